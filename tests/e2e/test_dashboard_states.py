"""Issue 24 in a real headless Chromium: bulk actions on the browse page, every state as
it is (scheduled, retry now, cancelled while running, split with its chunks), the runners
panel, and an unknown job id; over a real server (and, where a job must run, a runner).

One browser for the module; each test has its own spool and server (tests are
independent, and safe to run side by side).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.browser.cdp import CHROMIUM, Chromium, Page
from support.browser.server import running_server
from support.browser.spools import finished_entries, with_token
from support.chunk_jobs import FRAMES_CONFIG, frames_job
from support.spool_jobs import FAST, allow_steps, command_job, drop, entries
from support.waiting import wait_for

from spoolrender.spool.layout import SpoolLayout, retry_name

pytestmark = pytest.mark.skipif(
    not os.access(CHROMIUM, os.X_OK), reason=f"{CHROMIUM} missing (scripts/setup.sh installs Debian's chromium)"
)

ARTIFACTS = Path(__file__).parent / "artifacts"
TOKEN = "states-token-0123456789abcdef"
DASH = "\N{EN DASH}"  # as the page writes ranges
NOT_FOUND = "status of 404"  # the browser logs a 404 answer as a failed load


class Tabs:
    """One tab at a time of the module's browser: each page's event stream holds one of the
    six connections Chromium opens to a server, so the last tab is closed before the next."""

    def __init__(self, chromium: Chromium) -> None:
        self.chromium = chromium
        self.page: Page | None = None

    def new_page(self, url: str) -> Page:
        if self.page is not None:
            self.page.close()
        self.page = self.chromium.new_page(url)
        return self.page


@pytest.fixture(scope="module")
def chromium() -> Iterator[Chromium]:
    with Chromium() as browser:
        yield browser


@pytest.fixture
def browser(chromium: Chromium) -> Iterator[Tabs]:
    tabs = Tabs(chromium)
    yield tabs
    if tabs.page is not None:
        tabs.page.close()


def open_unlocked(browser: Tabs, url: str) -> Page:
    """A new tab at ``url`` with the token typed in (sessionStorage is per tab)."""
    page = browser.new_page(url)
    page.wait_for("document.body.dataset.ready === '1' && document.querySelector('#auth').dataset.state === 'locked'")
    page.evaluate(f"document.querySelector('#auth-token').value = {json.dumps(TOKEN)}")
    page.evaluate("document.querySelector('#auth-form button').click()")
    page.wait_for("document.querySelector('#auth').dataset.state === 'unlocked'")
    return page


def text(page: Page, selector: str) -> str:
    value: str = page.evaluate(f"document.querySelector({json.dumps(selector)})?.textContent ?? ''")
    return value


def wait_text(page: Page, selector: str, wanted: str) -> str:
    found: str = page.wait_for(
        f"(t => t.includes({json.dumps(wanted)}) ? t : '')"
        f"(document.querySelector({json.dumps(selector)})?.textContent ?? '')"
    )
    return found


def test_bulk_scheduled_retry_now_and_unknown_ids(spool: SpoolLayout, tmp_path: Path, browser: Tabs) -> None:
    with_token(spool, TOKEN)
    start = float(int(time.time()) - 5000)
    finished_entries(spool, "failed", 60, start, prefix="fail")  # more than a page (50)
    finished_entries(spool, "done", 2, start, prefix="done")
    drop(spool, "later.yaml", {**command_job(), "not_before": "2099-01-01T09:00:00Z"})
    # A job waiting for its next attempt, due in 15 minutes (as a runner's backoff leaves it).
    waiting = spool.failed / "fail-0000059.00000000003b"
    os.rename(waiting, spool.retry / retry_name("fail-0000059", "00000000003b", time.time() + 900, 0))

    with running_server(spool.root, tmp_path / "serve.log", "--poll", "0.25") as server:
        # Read-only until the token: no checkboxes, the bar says why.
        page = browser.new_page(server.url + "browse?state=failed")
        page.wait_for("document.body.dataset.ready === '1' && document.querySelector('#auth').dataset.state")
        page.wait_for("document.querySelector('#bulk-note').textContent.includes('serve token')")
        assert page.evaluate("document.querySelector('#bulk').hidden") is True
        assert page.evaluate("document.querySelector('#list input.select').hidden") is True

        # Two chosen by their boxes: the dry run's count first, then the retry once confirmed.
        page = open_unlocked(browser, server.url + "browse?state=failed")
        page.wait_for("document.querySelector('#bulk').hidden === false")
        for job in ("fail-0000058", "fail-0000057"):  # newest first: on the first page
            page.evaluate(f"document.querySelector('#list input.select[data-job=\"{job}\"]').click()")
        assert text(page, "#bulk-count") == "2 selected"
        page.evaluate("document.querySelector('.bulk-btn[data-action=\"retry\"]').click()")
        plan = wait_text(page, "#bulk-plan", "would retry 2 job(s)")
        assert "2 failed" in plan and text(page, "#bulk-go") == "retry 2 job(s)"
        assert len(entries(spool, "retry")) == 1  # nothing moved by the dry run
        loaded = page.evaluate("document.body.dataset.loaded")
        page.evaluate("document.querySelector('#bulk-go').click()")
        wait_text(page, "#bulk-msg", "retry 2 job(s)")
        page.wait_for(f"document.body.dataset.loaded !== '{loaded}'")
        assert len(entries(spool, "retry")) == 3 and len(entries(spool, "failed")) == 57

        # Every failed job matching a filter, on every page (57: more than the 50 shown):
        # "select this page", then "all matching", then delete.
        page = open_unlocked(browser, server.url + "browse?state=failed&q=fail-")
        page.wait_for(
            "document.querySelector('#bulk').hidden === false && document.querySelector('#range').textContent"
        )
        matching = 57
        page.evaluate("document.querySelector('#select-page').click()")
        assert text(page, "#bulk-count") == "50 selected"
        assert page.evaluate("document.querySelector('#select-matching').hidden") is False
        page.evaluate("document.querySelector('#select-matching').click()")
        assert text(page, "#bulk-count") == f"all {matching} job(s) matching the filter selected"
        page.evaluate("document.querySelector('.bulk-btn[data-action=\"delete\"]').click()")
        wait_text(page, "#bulk-plan", f"would delete {matching} job(s)")
        print(f"bulk confirm screenshot: {page.screenshot(ARTIFACTS / 'browse-bulk-confirm.png')}")
        page.evaluate("document.querySelector('#bulk-go').click()")
        wait_text(page, "#bulk-msg", f"delete {matching} job(s)")
        assert entries(spool, "failed") == []
        assert page.errors() == []

        # A scheduled job: its own state, count and due time; the settings show it as a time.
        page = browser.new_page(server.url)
        page.wait_for("document.querySelector('#count-scheduled').textContent === '1'")
        page.wait_for("!document.querySelector('#no-runner').hidden")  # no runner started in this test
        assert "NO RUNNER ONLINE" in text(page, "#no-runner")
        page = browser.new_page(server.url + "job?id=later")
        page.wait_for("document.body.dataset.ready === '1' && document.querySelector('#settings tr') !== null")
        assert text(page, "#state") == "scheduled"
        assert text(page, "#place").startswith("scheduled: due ") and "no runner takes it before then" in text(
            page, "#place"
        )
        settings = page.evaluate(
            "Object.fromEntries([...document.querySelectorAll('#settings tr')]"
            ".map(r => [r.dataset.key, r.querySelector('td').textContent]))"
        )
        assert settings["not_before"].startswith("2099-01-01T09:00:00Z")
        assert "null" not in settings.values() and "output_dir" not in settings
        assert page.evaluate("document.querySelector('#retry-btn').hidden") is True
        page = browser.new_page(server.url + "browse?state=incoming")
        page.wait_for("document.body.dataset.ready === '1'")
        assert page.evaluate("document.querySelector('#list tr[data-job=\"later\"]').dataset.state") == "scheduled"

        # A waiting retry: "retry now" makes it due now.
        page = open_unlocked(browser, server.url + "job?id=fail-0000059")
        page.wait_for("!document.querySelector('#retry-btn').hidden")
        assert text(page, "#retry-btn") == "retry now" and "due in" in text(page, "#place")
        page.evaluate("document.querySelector('#retry-btn').click()")
        wait_text(page, "#place", "due now")
        assert text(page, "#action-msg") == "retry: done"

        # An unknown id: said so, with the close ids, and nothing keeps reconnecting.
        page = browser.new_page(server.url + "job?id=fail-000005")
        page.wait_for("document.body.dataset.ready === '1'")
        assert "No job with id fail-000005 in this spool." in text(page, "#problem")
        suggested = page.evaluate("[...document.querySelectorAll('#problem a')].map(a => a.textContent)")
        assert suggested and all(s.startswith("fail-000005") for s in suggested), suggested
        assert text(page, "#connection") == "no such job"
        print(f"unknown id screenshot: {page.screenshot(ARTIFACTS / 'job-page-unknown.png')}")
        assert [e for e in page.errors() if NOT_FOUND not in e] == []


@pytest.mark.slow  # a runner renders, cancels and renders again (a few minutes on a busy machine)
def test_runners_cancelled_retry_and_split_chunks(
    spool: SpoolLayout, start_runner: Any, tmp_path: Path, browser: Tabs
) -> None:
    commands = {**FAST["commands"], **FRAMES_CONFIG["commands"]}  # `props` and `frames`
    with_token(spool, TOKEN, {**FRAMES_CONFIG, "commands": commands, "slots": 3, "tags": ["gpu"]})
    with running_server(spool.root, tmp_path / "serve.log", "--poll", "0.25") as server:
        start_runner("--queues", "default,urgent")
        steps = tmp_path / "steps"
        allow_steps(steps, 2)
        drop(spool, "render-intro.yaml", command_job(steps_file=str(steps)))
        # Two chunks: the first renders, the second hangs until it is stopped.
        drop(spool, "split-job.yaml", frames_job(chunks=2, frames=40, hang_index=1))

        # The runners panel: its job, slots, queues and tags; no "no runner" banner.
        page = open_unlocked(browser, server.url)
        row = page.wait_for(
            "(r => r && r.querySelector('.jobs').textContent.includes('render-intro') ? r.textContent : '')"
            "(document.querySelector('#runners tbody tr'))"
        )
        assert "default, urgent" in text(page, "#runners .queues") and text(page, "#runners .tags") == "gpu"
        assert "/3" in text(page, "#runners .slots") and "online" in row
        assert page.evaluate("document.querySelector('#no-runner').hidden") is True
        # The queues panel counts the runners that serve each queue: this one serves both.
        served = page.evaluate(
            "Object.fromEntries([...document.querySelectorAll('#queues tbody tr')]"
            ".map(r => [r.dataset.queue, r.children[3].textContent]))"
        )
        assert served == {"default": "1", "urgent": "1"}, served

        # The split job: cancel offered with the token, and a table of its chunks.
        page = open_unlocked(browser, server.url + "job?id=split-job")
        page.wait_for(
            "[...document.querySelectorAll('#chunks tbody tr')].map(r => r.dataset.state).join() === 'done,running'",
            timeout=300,  # the split, then a chunk rendered and the next started: minutes on a loaded machine
        )
        chunks = page.evaluate("[...document.querySelectorAll('#chunks tbody tr')].map(r => r.textContent)")
        assert chunks[0].startswith(f"10{DASH}19 (20)") and chunks[1].startswith(f"220{DASH}39 (20)"), chunks
        assert page.evaluate("document.querySelector('#retry-btn').hidden") is True
        assert page.evaluate("document.querySelector('#cancel-btn').hidden") is False
        print(f"split job screenshot: {page.screenshot(ARTIFACTS / 'job-page-split.png')}")
        overview = server.get_json("/status")
        assert [j["id"] for j in overview["retry"]] == []  # a split job is never in the retry queue
        page.evaluate("document.querySelector('#cancel-btn').click()")
        page.evaluate("document.querySelector('#cancel-btn').click()")
        page.wait_for("document.querySelector('#state').textContent === 'failed'", timeout=120)
        assert "cancelled" in text(page, "#reason")

        # Cancelled while running, then retried: the cancel is withdrawn and it renders again.
        page = open_unlocked(browser, server.url + "job?id=render-intro")
        page.wait_for("document.querySelector('#state').textContent === 'running'")
        page.evaluate("document.querySelector('#cancel-btn').click()")
        page.evaluate("document.querySelector('#cancel-btn').click()")
        page.wait_for("document.querySelector('#state').textContent === 'failed'", timeout=120)
        assert "cancelled" in text(page, "#reason")
        assert (
            text(page, "#retry-btn") == "retry"
            and page.evaluate("document.querySelector('#retry-btn').hidden") is False
        )
        page.evaluate("document.querySelector('#retry-btn').click()")
        page.wait_for("['retry', 'running'].includes(document.querySelector('#state').textContent)")
        allow_steps(steps, 10)
        page.wait_for("document.querySelector('#state').textContent === 'done'", timeout=120)
        wait_for(lambda: len(entries(spool, "done")) == 1)
        assert page.errors() == []
