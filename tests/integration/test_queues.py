"""Named queues and runner tags: real runner processes, drop directories, status and metrics."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.processes import spoolrender_cmd
from support.spool_jobs import command_job, drop, entries
from support.waiting import wait_for

from spoolrender.ops.status import SCHEMA_VERSION
from spoolrender.spool.layout import SpoolLayout

Start = Callable[..., subprocess.Popen[bytes]]


def drop_in_queue(spool: SpoolLayout, queue: str, name: str, job: dict[str, Any]) -> None:
    """scp-style: write a dot-file in the queue directory, then rename it in place."""
    directory = spool.incoming / queue
    directory.mkdir(exist_ok=True)
    tmp = directory / f".{name}.part"
    tmp.write_text(yaml.safe_dump(job))
    os.utime(tmp, (time.time() - 60, time.time() - 60))
    os.rename(tmp, directory / name)


def waiting(spool: SpoolLayout) -> list[str]:
    """Job files in incoming/ and its queue directories (the directories themselves stay)."""
    return sorted(str(p.relative_to(spool.incoming)) for p in spool.incoming.rglob("*") if p.is_file())


def cli(spool: SpoolLayout, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        spoolrender_cmd(*args, "--spool", str(spool.root)), capture_output=True, text=True, timeout=60, check=False
    )


def status_json(spool: SpoolLayout) -> dict[str, Any]:
    result = cli(spool, "status", "--json")
    assert result.returncode == 0, result.stderr
    data: dict[str, Any] = json.loads(result.stdout)
    return data


def test_queue_order_then_priority_and_arrival_within(spool: SpoolLayout, start_runner: Start, tmp_path: Path) -> None:
    marker = tmp_path / "order.txt"

    def job(tag: str, **extra: Any) -> dict[str, Any]:
        return {**command_job(marker=str(marker), tag=tag), **extra}

    drop(spool, "a.yaml", job("default-low"))
    drop(spool, "b.yaml", job("default-high", priority=100))  # priority never beats queue order
    drop(spool, "c.yaml", job("batch", queue="batch"))  # not served by this runner
    drop_in_queue(spool, "urgent", "u1.yaml", job("urgent-dir"))
    drop(spool, "u2.yaml", job("urgent-field", queue="urgent", priority=5))
    proc = start_runner("--drain", "--slots", "1", "--queues", "urgent,default")
    assert proc.wait(timeout=120) == 0
    order = [line.split()[0] for line in marker.read_text().splitlines()]
    assert order == ["urgent-field", "urgent-dir", "default-high", "default-low"]
    assert waiting(spool) == ["c.yaml"]  # another queue's job stays, untouched
    result = json.loads((spool.done / next(n for n in entries(spool, "done") if n.startswith("u1."))
                         / "result.json").read_text())  # fmt: skip
    assert result["details"]["queue"] == "urgent"
    # `*` serves every other queue after the named ones.
    proc = start_runner("--drain", "--queues", "urgent,*")
    assert proc.wait(timeout=120) == 0
    assert waiting(spool) == [] and len(entries(spool, "done")) == 5


def test_tags_and_unserved_jobs_in_status_and_metrics(spool: SpoolLayout, start_runner: Start) -> None:
    drop(spool, "needs-gpu.yaml", {**command_job(), "requires": ["gpu"]})
    drop_in_queue(spool, "nightly", "n.yaml", command_job())
    drop(spool, "plain.yaml", command_job())
    start_runner("--queues", "default")  # long-running, no tags: takes only plain.yaml

    def unserved() -> list[dict[str, Any]]:
        return list(status_json(spool)["unserved"])

    wait_for(lambda: len(entries(spool, "done")) == 1 and len(unserved()) == 2, timeout=60)
    status = status_json(spool)
    assert status["schema"] == SCHEMA_VERSION and status["counts"]["incoming"] == 2  # the queue dir's job, not the dir
    reasons = {u["queue"]: u for u in status["unserved"]}
    assert reasons["nightly"]["reason"] == "no online runner serves queue 'nightly'"
    assert reasons["default"]["requires"] == ["gpu"]
    assert reasons["default"]["reason"] == "no online runner of queue 'default' has tag(s) gpu"
    assert status["queues"]["nightly"]["unserved"] == 1 and status["queues"]["default"]["runners"] == 1
    text = cli(spool, "status").stdout
    assert "UNSERVED: 1 job(s) in queue nightly: no online runner serves queue 'nightly'" in text
    assert "QUEUES" in text
    metrics = cli(spool, "status", "--prometheus").stdout
    assert 'spoolrender_queue_jobs_unserved{queue="nightly"} 1.0' in metrics
    assert 'spoolrender_queue_jobs_waiting{queue="default"} 1.0' in metrics

    # A runner with the tag (and every queue) takes both; nothing is unserved any more.
    proc = start_runner("--drain", "--tags", "gpu,bigmem")
    assert proc.wait(timeout=120) == 0
    assert waiting(spool) == [] and len(entries(spool, "done")) == 3
    wait_for(lambda: unserved() == [], timeout=30)


def test_retry_keeps_the_drop_directory_queue(spool: SpoolLayout, start_runner: Start) -> None:
    drop_in_queue(spool, "urgent", "flaky.yaml", command_job(fail_until_attempt=2))
    start_runner("--queues", "urgent")  # the retry (due shortly) is claimed from retry/ by queue
    wait_for(lambda: len(entries(spool, "done")) == 1, timeout=60)
    (entry,) = entries(spool, "done")
    result = json.loads((spool.done / entry / "result.json").read_text())
    assert result["attempts"] == 2 and result["details"]["queue"] == "urgent"


def test_field_naming_another_queue_than_its_directory_is_invalid(spool: SpoolLayout, start_runner: Start) -> None:
    drop_in_queue(spool, "urgent", "mixed.yaml", {**command_job(), "queue": "batch"})
    proc = start_runner("--drain", "--queues", "batch")  # whoever sees it fails it with the reason
    assert proc.wait(timeout=120) == 3
    (entry,) = entries(spool, "failed")
    failure = json.loads((spool.failed / entry / "failure.json").read_text())
    assert failure["kind"] == "invalid-job" and "dropped into incoming/urgent/" in failure["reason"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--queues", "Urgent"], "queue name"),
        (["--queues", ","], "at least one queue"),
        (["--tags", "gpu,../x"], "tag name"),
    ],
)
def test_bad_queue_and_tag_names_are_refused(spool: SpoolLayout, args: list[str], message: str) -> None:
    result = cli(spool, "run", "--drain", *args)
    assert result.returncode == 1 and message in result.stderr


def test_bad_queue_and_requires_fields_fail_the_job(spool: SpoolLayout, start_runner: Start) -> None:
    drop(spool, "q.yaml", {**command_job(), "queue": "Not A Queue"})
    drop(spool, "r.yaml", {**command_job(), "requires": {"gpu": True}})
    proc = start_runner("--drain")
    assert proc.wait(timeout=120) == 3
    reasons = [json.loads((spool.failed / e / "failure.json").read_text())["reason"] for e in entries(spool, "failed")]
    assert any("field 'queue'" in r for r in reasons) and any("field 'requires'" in r for r in reasons)


def test_queues_and_tags_from_the_spool_config(spool: SpoolLayout, start_runner: Start) -> None:
    config = yaml.safe_load((spool.root / "spoolrender.yaml").read_text())
    (spool.root / "spoolrender.yaml").write_text(yaml.safe_dump({**config, "queues": ["gpu"], "tags": ["gpu"]}))
    drop(spool, "g.yaml", {**command_job(), "queue": "gpu", "requires": ["gpu"]})
    drop(spool, "d.yaml", command_job())
    proc = start_runner("--drain")
    assert proc.wait(timeout=120) == 0
    assert waiting(spool) == ["d.yaml"] and os.listdir(spool.done)[0].startswith("g.")


def test_queues_table_counts_the_runners_that_serve_each_queue_and_speaks_up_without_any(
    spool: SpoolLayout, start_runner: Start, capsys: pytest.CaptureFixture[str]
) -> None:
    from spoolrender.cli import main

    drop(spool, "a.yaml", {**command_job(), "requires": ["gpu"]})
    drop(spool, "b.yaml", {**command_job(), "requires": ["gpu"], "queue": "nightly"})
    drop_in_queue(spool, "urgent", "u.yaml", {**command_job(), "requires": ["gpu"]})
    # Before any runner started: the queues from the listing, and a warning that nothing runs.
    assert main(["status", "--spool", str(spool.root)]) == 0
    text = capsys.readouterr().out
    assert "NO RUNNER ONLINE: 3 job(s) waiting; nothing runs until `spoolrender run` starts" in text
    assert "RUNNERS\n  none: start one with `spoolrender run`" in text
    assert "UNSERVED:" not in text  # said once, by the line above
    assert main(["status", "--json", "--spool", str(spool.root)]) == 0
    before = json.loads(capsys.readouterr().out)
    assert {q: (v["waiting"], v["runners"], v["unserved"]) for q, v in before["queues"].items()} == {
        "default": (1, 0, 1), "nightly": (1, 0, 1), "urgent": (1, 0, 1),
    }  # fmt: skip
    assert {u["reason"] for u in before["unserved"]} == {"no runner is online"}

    start_runner()  # serves * (every queue), has no tags: takes none of them
    wait_for(lambda: any(r["online"] and r.get("waiting") for r in status_json(spool)["runners"]), timeout=60)
    after = status_json(spool)
    assert "*" not in after["queues"]
    assert {q: (v["waiting"], v["runners"]) for q, v in after["queues"].items()} == {
        "default": (1, 1), "nightly": (1, 1), "urgent": (1, 1),
    }  # fmt: skip
    assert {u["reason"] for u in after["unserved"]} == {f"no online runner of queue {q!r} has tag(s) gpu"
                                                       for q in ("default", "nightly", "urgent")}  # fmt: skip
    text = cli(spool, "status").stdout
    assert "NO RUNNER ONLINE" not in text and "  default  1        " in text
