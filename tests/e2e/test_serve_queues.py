"""`spoolrender serve` per queue: /jobs items carry their queue and tags, /jobs and the
browse page filter by queue, the overview shows /status's queues and unserved jobs, the job
page its queue. A real runner (serving some queues, no tags) over a real spool with queue
directories; the dashboard in Debian's headless Chromium."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.browser.cdp import CHROMIUM, Chromium
from support.browser.server import Server, running_server
from support.spool_jobs import command_job, drop, entries
from support.waiting import wait_for

from spoolrender.spool.layout import SpoolLayout

Start = Callable[..., Any]


def drop_in_queue(spool: SpoolLayout, queue: str, name: str, data: dict[str, Any] | str) -> None:
    """scp-style: write a dot-file in the queue directory, then rename it in place."""
    directory = spool.incoming / queue
    directory.mkdir(exist_ok=True)
    tmp = directory / f".{name}.part"
    tmp.write_text(data if isinstance(data, str) else yaml.safe_dump(data))
    os.utime(tmp, (time.time() - 60, time.time() - 60))  # past the settle time
    os.rename(tmp, directory / name)


def ids(page: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {job["id"]: job for job in page["jobs"]}


@pytest.fixture
def queued(spool: SpoolLayout, start_runner: Start, tmp_path: Path) -> Iterator[tuple[SpoolLayout, Server]]:
    """Done and failed jobs of two queues, and two waiting jobs nobody online can serve."""
    drop_in_queue(spool, "urgent", "u1.yaml", command_job())
    drop_in_queue(spool, "urgent", "broken.yaml", "id: broken\nrenderer: [not, a, name\n")  # does not parse
    drop(spool, "plain.yaml", command_job())
    drop(spool, "n.yaml", {**command_job(), "queue": "nightly"})
    drop(spool, "gpu.yaml", {**command_job(), "requires": ["gpu"]})
    start_runner("--queues", "urgent,default")  # no tags: leaves gpu.yaml; never serves nightly
    with running_server(spool.root, tmp_path / "serve.log", "--poll", "0.2") as server:
        wait_for(
            lambda: (
                len(entries(spool, "done")) == 2
                and len(entries(spool, "failed")) == 1
                and len(server.get_json("/status")["unserved"]) == 2
            ),
            timeout=90,
        )
        yield spool, server


def test_jobs_carry_their_queue_and_tags(queued: tuple[SpoolLayout, Server]) -> None:
    spool, server = queued
    page = server.get_json("/jobs")
    status = server.get_json("/status")
    assert page["counts"] == status["counts"] and page["counts"]["incoming"] == 2 and page["total"] == 5
    jobs = ids(page)
    assert {i: (j["state"], j["queue"], j["requires"]) for i, j in jobs.items()} == {
        "n": ("incoming", "nightly", []),  # from its queue: field
        "gpu": ("incoming", "default", ["gpu"]),
        "u1": ("done", "urgent", []),  # from its drop directory, kept through the claim
        "plain": ("done", "default", []),
        "broken": ("failed", "urgent", None),  # the file does not parse: its tags are unknown
    }

    # A job waiting in a queue directory is listed as <queue>/<name>, and found by id.
    drop_in_queue(spool, "nightly", "n2.yaml", command_job())
    waiting = ids(server.get_json("/jobs?state=incoming"))
    assert waiting["n2"]["entry"] == "nightly/n2.yaml" and waiting["n2"]["queue"] == "nightly"
    detail = server.get_json("/jobs/n2")
    assert detail["queue"] == "nightly" and detail["requires"] == [] and detail["state"] == "incoming"
    assert detail["arrived_before"] == 2  # n.yaml and gpu.yaml in incoming/ itself came first

    assert (server.get_json("/jobs/gpu")["queue"], server.get_json("/jobs/gpu")["requires"]) == ("default", ["gpu"])
    assert server.get_json("/jobs/u1")["queue"] == "urgent"
    broken = server.get_json("/jobs/broken")
    assert broken["queue"] == "urgent" and broken["requires"] is None


def test_jobs_filter_by_queue(queued: tuple[SpoolLayout, Server]) -> None:
    spool, server = queued
    urgent = server.get_json("/jobs?queue=urgent")
    assert urgent["total"] == 2 and set(ids(urgent)) == {"u1", "broken"}
    assert set(ids(server.get_json("/jobs?queue=default"))) == {"gpu", "plain"}
    page = server.get_json("/jobs?queue=default&state=done&q=pla")  # with the other filters
    assert page["total"] == 1 and ids(page)["plain"]["state"] == "done"
    assert server.get_json("/jobs?queue=nosuch")["total"] == 0
    for bad in ("Urgent", "a%2Fb", "-x", "x" * 65):
        response = server.get(f"/jobs?queue={bad}")
        assert response.status == 400 and "queue" in response.json()["error"]

    # A waiting file rewritten in place with another queue moves to that queue's listing
    # (the same name: its parsed route is keyed by size and mtime, not by name alone).
    before = server.get_json("/jobs?queue=batch&state=incoming")["total"]
    tmp = spool.incoming / ".gpu.yaml.part"
    tmp.write_text(yaml.safe_dump({**command_job(tag="moved"), "requires": ["gpu"], "queue": "batch"}))
    os.utime(tmp, (time.time() - 30, time.time() - 30))
    os.replace(tmp, spool.incoming / "gpu.yaml")
    moved = server.get_json("/jobs?queue=batch&state=incoming")
    assert before == 0 and set(ids(moved)) == {"gpu"} and ids(moved)["gpu"]["queue"] == "batch"
    assert "gpu" not in ids(server.get_json("/jobs?queue=default&state=incoming"))


@pytest.mark.skipif(not os.access(CHROMIUM, os.X_OK), reason=f"{CHROMIUM} missing (scripts/setup.sh installs it)")
def test_dashboard_per_queue(queued: tuple[SpoolLayout, Server]) -> None:
    _, server = queued
    with Chromium() as browser:
        page = browser.new_page(server.url)
        page.wait_for("document.body.dataset.ready === '1'")

        seen: list[tuple[dict[str, list[str]], dict[str, Any]]] = []

        def page_matches_status() -> bool:
            # The counts come from the runner's beacon, which moves on while the page loads:
            # compare the page with a status read after it, until both saw the same beacon.
            rows = page.evaluate(
                "Object.fromEntries([...document.querySelectorAll('#queues tbody tr')]"
                ".map(r => [r.dataset.queue, [...r.cells].map(c => c.textContent)]))"
            )
            status = server.get_json("/status")
            seen.append((rows, status))
            return set(rows) == set(status["queues"]) and all(
                rows[name][1] == str(q["waiting"]) for name, q in status["queues"].items()
            )

        wait_for(page_matches_status, timeout=60)
        rows, status = seen[-1]
        for name, q in status["queues"].items():
            assert rows[name][1] == str(q["waiting"]) and rows[name][3] == str(q["runners"])
            assert rows[name][4] == (str(q["unserved"]) if q["unserved"] else "")
        banner = page.evaluate(
            "document.querySelector('#unserved').hidden ? '' : document.querySelector('#unserved').textContent"
        )
        assert "UNSERVED: 1 job(s) in queue nightly: no online runner serves queue 'nightly'" in banner
        assert "in queue default requiring gpu: no online runner of queue 'default' has tag(s) gpu" in banner

        # The queue link leads to the browse page, filtered by that queue.
        page.evaluate("document.querySelector('#queues tr[data-queue=\"urgent\"] a').click()")
        page.wait_for("location.search === '?queue=urgent' && document.body.dataset.ready === '1'")
        page.wait_for("document.querySelectorAll('#list tbody tr').length === 2")
        listed = page.evaluate(
            "[...document.querySelectorAll('#list tbody tr')]"
            ".map(r => [r.dataset.job, r.querySelector('td.queue').textContent])"
        )
        assert sorted(listed) == [["broken", "urgent"], ["u1", "urgent"]]
        assert page.evaluate("document.querySelector('#f-queue').value") == "urgent"

        page = browser.new_page(server.url + "job?id=gpu")
        page.wait_for("document.body.dataset.ready === '1'")
        facts = page.evaluate("document.querySelector('#facts').textContent")
        assert "queuedefault" in facts and "requires tagsgpu" in facts
        assert page.errors() == []
