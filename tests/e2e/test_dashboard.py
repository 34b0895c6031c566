"""The dashboard in a real headless Chromium (Debian's), over a real server and runner.

The page must load without a script error or CSP violation, show the spool's counts,
and move a running job's progress bar while the runner renders, with no reload: only the
event stream feeds it. A screenshot taken mid-render is kept as a test artefact.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from support.browser.cdp import CHROMIUM, Chromium
from support.browser.server import running_server
from support.browser.spools import finished_entries
from support.browser.videos import FFMPEG, video_spool
from support.processes import spoolrender_cmd
from support.spool_jobs import allow_steps, command_job, drop, entries, write_spool_config
from support.waiting import wait_for

from spoolrender.spool.heartbeat import read_heartbeat
from spoolrender.spool.layout import SpoolLayout

pytestmark = pytest.mark.skipif(
    not os.access(CHROMIUM, os.X_OK), reason=f"{CHROMIUM} missing (scripts/setup.sh installs Debian's chromium)"
)

ARTIFACT = Path(__file__).parent / "artifacts" / "dashboard.png"
FINISHED = ARTIFACT.with_name("dashboard-finished.png")
STATES = ("incoming", "running", "retry", "done", "failed")
BAR = '#running .bar[data-job="render-intro"]'


def progress_now(layout: SpoolLayout) -> float:
    names = entries(layout, "running")
    hb = read_heartbeat(layout.running / names[0]) if len(names) == 1 else None
    return (hb.progress or 0.0) if hb is not None else 0.0


def test_dashboard_counts_and_live_progress(spool: SpoolLayout, start_runner: Any, tmp_path: Path) -> None:
    write_spool_config(spool, {"backoff_base_seconds": 900, "backoff_cap_seconds": 900, "slots": 1})
    drop(spool, "good.yaml", command_job())
    drop(spool, "bad.yaml", command_job(exit=65, message="props.title is missing <b>bold?</b>"))
    drop(spool, "flaky.yaml", {**command_job(exit=1), "priority": 3})
    drain = subprocess.run(spoolrender_cmd("run", "--drain", "--spool", str(spool.root)), capture_output=True,
                           timeout=120, check=False)  # fmt: skip
    assert drain.returncode == 3, drain.stderr
    drop(spool, "waiting.yaml", {**command_job(), "not_before": "2099-01-01T00:00:00Z"})

    with running_server(spool.root, tmp_path / "serve.log", "--poll", "0.25") as server, Chromium() as browser:
        start_runner()
        steps = tmp_path / "steps"  # the render goes on only as far as the test lets it
        allow_steps(steps, 2)
        drop(spool, "render-intro.yaml", command_job(steps_file=str(steps)))
        wait_for(lambda: abs(progress_now(spool) - 0.2) < 1e-6, timeout=60)

        page = browser.new_page(server.url)
        page.wait_for(f"document.body.dataset.ready === '1' && document.querySelector('{BAR}') !== null")
        assert page.evaluate("document.title") == "spoolrender"
        counts = page.evaluate(
            "Object.fromEntries([...document.querySelectorAll('.count')]"
            ".map(c => [c.dataset.state, Number(c.querySelector('.n').textContent)]))"
        )
        assert counts.pop("scheduled") in (1, None)  # waiting.yaml (its count comes from GET /jobs)
        assert counts == {**dict.fromkeys(STATES, 1), "split": 0}
        assert counts == server.get_json("/status")["counts"]
        assert page.evaluate("document.querySelector('#connection').textContent") == "live"
        retry = page.evaluate("[...document.querySelectorAll('#retry tbody tr')].map(r => r.textContent)")
        assert len(retry) == 1 and re.fullmatch(r"flakyin \d+m3", retry[0]), retry  # due in 7.5..15 min
        reason = page.evaluate("document.querySelector('#failures td.reason').textContent")
        assert "props.title is missing <b>bold?</b>" in reason  # as text...
        assert page.evaluate("document.querySelector('#failures td.reason b')") is None  # ...never as HTML
        # The runner's beacon says it is busy at its next heartbeat, which a loaded machine
        # may deliver after the progress the test waited for: wait for the row to say so.
        runner_row = page.wait_for(
            "(t => t.includes('1/1') && t.includes('online') ? t : '')"
            "(document.querySelector('#runners tbody tr')?.textContent ?? '')"
        )
        assert "1/1" in runner_row and "online" in runner_row

        # The bar moves as the runner renders: value and drawn width, with no reload.
        first = float(page.evaluate(f"document.querySelector('{BAR}').getAttribute('aria-valuenow')"))

        def drawn_at(percent: float) -> str:  # the fill's width once its CSS transition got there
            return (f"(b => {{ const w = b.querySelector('.fill').getBoundingClientRect().width;"
                    f" return w >= b.getBoundingClientRect().width * {percent} / 100 - 1 ? w : 0; }})"
                    f"(document.querySelector('{BAR}'))")  # fmt: skip

        first_width = page.wait_for(drawn_at(first))
        page.evaluate("window.__sameDocument = true")
        allow_steps(steps, 6)
        later = page.wait_for(
            f"(() => {{ const v = Number(document.querySelector('{BAR}')?.getAttribute('aria-valuenow'));"
            f" return v >= {first} + 20 ? v : 0; }})()"
        )
        later_width = page.wait_for(drawn_at(later))  # the drawn width follows
        assert 0 < first < later <= 100 and later_width > first_width
        eta = page.evaluate("document.querySelector('#running tr[data-job=\"render-intro\"] .eta').textContent")
        assert eta.endswith("s") or eta.endswith("m")
        shot = page.screenshot(ARTIFACT)
        print(f"dashboard screenshot: {shot}")

        # The job finishes: counts and the activity list follow, still on the same document.
        allow_steps(steps, 10)
        page.wait_for(
            "document.querySelector('#count-done').textContent === '2'"
            " && document.querySelector('#count-running').textContent === '0'"
        )
        assert page.evaluate("window.__sameDocument") is True
        # (from the job's own state event, which may come after the summary with the counts)
        activity = page.wait_for(
            "(t => t.includes('running → done') ? t : '')(document.querySelector('#activity').textContent)"
        )
        assert "render-intro" in activity
        print(f"dashboard screenshot after the render: {page.screenshot(FINISHED)}")
        assert page.errors() == []


JOB_SHOT = ARTIFACT.with_name("job-page.png")
FAILED_SHOT = ARTIFACT.with_name("job-page-failed.png")


def test_job_page_from_the_overview(spool: SpoolLayout, start_runner: Any, tmp_path: Path) -> None:
    write_spool_config(spool, {"slots": 1})
    drop(spool, "broken.yaml", command_job(exit=65, message="props.title is missing <b>bold?</b>"))
    drain = subprocess.run(spoolrender_cmd("run", "--drain", "--spool", str(spool.root)), capture_output=True,
                           timeout=120, check=False)  # fmt: skip
    assert drain.returncode == 3, drain.stderr

    with running_server(spool.root, tmp_path / "serve.log", "--poll", "0.25") as server, Chromium() as browser:
        start_runner()
        steps = tmp_path / "steps"  # the render goes on only as far as the test lets it
        allow_steps(steps, 2)
        drop(spool, "render-intro.yaml", command_job(steps_file=str(steps)))
        wait_for(lambda: abs(progress_now(spool) - 0.2) < 1e-6, timeout=60)

        # From the overview's running table to the job page, by clicking the id.
        page = browser.new_page(server.url)
        page.wait_for(f"document.body.dataset.ready === '1' && document.querySelector('{BAR}') !== null")
        page.evaluate("document.querySelector('#running a.job-link').click()")
        page.wait_for("location.pathname === '/job' && document.body.dataset.ready === '1'")
        assert page.evaluate("location.search") == "?id=render-intro"
        assert page.evaluate("document.querySelector('#state').textContent") == "running"
        assert page.evaluate("document.querySelector('#job-id').textContent") == "render-intro"

        # Live: the bar moves and the log grows without a reload.
        page.evaluate("window.__sameDocument = true")
        bar = "Number(document.querySelector('#progress .bar').getAttribute('aria-valuenow'))"
        log_lines = "document.querySelector('#log-text').textContent.split('PROGRESS').length - 1"
        page.wait_for("document.querySelector('#log-state').textContent.includes('live')")
        page.wait_for(f"{bar} === 20 && {log_lines} === 2")
        allow_steps(steps, 6)
        page.wait_for(f"{bar} === 60 && {log_lines} === 6")
        page.wait_for("document.querySelector('#jobfile').textContent.includes('renderer: command')")
        settings = page.evaluate(
            "Object.fromEntries([...document.querySelectorAll('#settings tr')]"
            ".map(r => [r.querySelector('th').textContent, r.querySelector('td').textContent]))"
        )
        assert settings["renderer"] == "command" and settings["id"] == "render-intro"
        print(f"job page screenshot: {page.screenshot(JOB_SHOT)}")

        # It finishes: the page follows to done, with the run in the table.
        allow_steps(steps, 10)
        page.wait_for("document.querySelector('#state').textContent === 'done'")
        runs = page.wait_for(
            "(() => { const r = [...document.querySelectorAll('#runs tbody tr')].map(r => r.textContent);"
            " return r.length ? r : null; })()"
        )
        assert len(runs) == 1 and "done" in runs[0]
        # The log follows the state on its own poll: its last line may come a moment later.
        page.wait_for("document.querySelector('#log-text').textContent.includes('PROGRESS 1.00')")
        assert page.evaluate("document.querySelector('#log-text').textContent").count("PROGRESS 1.00") == 1
        assert page.evaluate("window.__sameDocument") is True
        assert page.errors() == []

        # A failed job's page: every run with its error, the reason as text, never HTML.
        page = browser.new_page(server.url + "job?id=broken")
        page.wait_for("document.body.dataset.ready === '1' && document.querySelector('#runs tbody tr') !== null")
        assert page.evaluate("document.querySelector('#state').textContent") == "failed"
        reason = page.evaluate("document.querySelector('#reason').textContent")
        assert "props.title is missing <b>bold?</b>" in reason
        assert page.evaluate("document.querySelector('#reason b, #runs b')") is None
        page.wait_for("document.querySelector('#log-text').textContent.includes('props.title is missing')")
        print(f"failed job page screenshot: {page.screenshot(FAILED_SHOT)}")
        assert page.errors() == []

        # An unknown id says so; a hostile one is refused before the page loads.
        page = browser.new_page(server.url + "job?id=nope")
        page.wait_for("document.body.dataset.ready === '1'")
        assert "No job with id nope" in page.evaluate("document.querySelector('#problem').textContent")
        assert server.get("/job?id=../../etc/passwd").status == 400


VIDEO_SHOT = ARTIFACT.with_name("job-page-video.png")


@pytest.mark.skipif(FFMPEG is None, reason="Remotion's ffmpeg missing (scripts/setup.sh installs it)")
def test_job_page_plays_the_rendered_video(tmp_path: Path) -> None:
    layout = video_spool(tmp_path / "spool")
    with running_server(layout.root, tmp_path / "serve.log") as server, Chromium() as browser:
        page = browser.new_page(server.url + "job?id=intro")
        page.wait_for("document.body.dataset.ready === '1' && document.querySelector('#output-video') !== null")
        video = "document.querySelector('#output-video')"
        assert page.evaluate(f"{video}.getAttribute('poster')") == "/jobs/intro/poster"
        page.wait_for(f"{video}.readyState >= 1")  # metadata: the server answered
        assert abs(page.evaluate(f"{video}.duration") - 3.0) < 0.2
        page.evaluate(f"{video}.muted = true; {video}.play()")
        page.wait_for(f"{video}.currentTime > 1.0")  # the first second played
        # Seeking needs range answers: jump near the end and play on from there.
        page.evaluate(f"{video}.currentTime = 2.5")
        page.wait_for(f"{video}.currentTime >= 2.5 && !{video}.seeking")
        assert page.evaluate(f"{video}.error") is None
        page.evaluate(f"{video}.pause()")
        print(f"video job page screenshot: {page.screenshot(VIDEO_SHOT)}")
        assert page.errors() == []


BROWSE_SHOT = ARTIFACT.with_name("browse-done.png")
DASH = "\N{EN DASH}"  # as the page writes ranges


def test_browse_ten_thousand_done_jobs(spool: SpoolLayout, tmp_path: Path) -> None:
    start = float(int(time.time()) - 20_000)  # whole seconds: the filters take whole seconds here
    finished_entries(spool, "done", 10_000, start)
    finished_entries(spool, "failed", 30, start)
    with running_server(spool.root, tmp_path / "serve.log") as server, Chromium() as browser:
        # From the overview's count tile to the list of done jobs.
        page = browser.new_page(server.url)
        page.wait_for("document.body.dataset.ready === '1'")
        page.evaluate("document.querySelector('.count[data-state=\"done\"]').click()")
        page.wait_for("location.pathname === '/browse' && document.body.dataset.ready === '1'")
        rows = "[...document.querySelectorAll('#list tbody tr')].map(r => r.dataset.job)"
        assert page.evaluate("document.querySelector('#range').textContent") == f"1{DASH}50 of 10000"
        assert page.evaluate(rows)[:2] == ["job-0009999", "job-0009998"]  # newest first

        def turn(button: str, expected_range: str) -> list[str]:
            loaded = page.evaluate("document.body.dataset.loaded")
            page.evaluate(f"document.querySelector('#{button}').click()")
            page.wait_for(f"document.body.dataset.loaded !== '{loaded}'")
            assert page.evaluate("document.querySelector('#range').textContent") == expected_range
            result: list[str] = page.evaluate(rows)
            return result

        turn("next", f"51{DASH}100 of 10000")
        turn("next", f"101{DASH}150 of 10000")
        third = turn("next", f"151{DASH}200 of 10000")
        api = server.get_json("/jobs?state=done&limit=50&offset=150")
        assert third == [j["id"] for j in api["jobs"]]
        assert turn("prev", f"101{DASH}150 of 10000")[0] == "job-0009899"
        assert page.evaluate("location.search") == "?state=done&offset=100"  # a view can be linked

        # The last page, by URL: 50 rows and no further.
        page = browser.new_page(server.url + "browse?state=done&offset=9950")
        page.wait_for("document.body.dataset.ready === '1'")
        assert page.evaluate(rows)[-1] == "job-0000000"
        assert page.evaluate("document.querySelector('#next').disabled") is True

        # Filters through the form: id substring, then a time window (one job per second).
        page.evaluate("document.querySelector('#f-q').value = '00042'")
        matching = sum("00042" in f"job-{i:07d}" for i in range(10_000))
        loaded = page.evaluate("document.body.dataset.loaded")
        page.evaluate("document.querySelector('#filters button[type=submit]').click()")
        page.wait_for(f"document.body.dataset.loaded !== '{loaded}'")
        assert page.evaluate("document.querySelector('#range').textContent") == f"1{DASH}50 of {matching}"
        assert all("00042" in job for job in page.evaluate(rows))
        window = server.get_json(f"/jobs?state=done&since={start + 100:.0f}&until={start + 159:.0f}")
        assert window["total"] == 60 and window["jobs"][0]["id"] == "job-0000159"

        # The failed ones, by error kind; reasons as text.
        page = browser.new_page(server.url + "browse?state=failed&kind=timeout")
        page.wait_for("document.body.dataset.ready === '1'")
        assert page.evaluate("document.querySelector('#range').textContent") == f"1{DASH}10 of 10"
        assert all("timeout" in t for t in page.evaluate("[...document.querySelectorAll('#list td.details')]"
                                                          ".map(d => d.textContent)"))  # fmt: skip
        page = browser.new_page(server.url + "browse?state=done")
        page.wait_for("document.body.dataset.ready === '1'")
        print(f"browse screenshot: {page.screenshot(BROWSE_SHOT)}")
        assert page.errors() == []

        # The server keeps up: a page of 10k done jobs, timed (printed, not asserted; bench/ has goals).
        t0 = time.monotonic()
        for offset in range(0, 10_000, 2_000):
            assert server.get(f"/jobs?state=done&limit=50&offset={offset}").status == 200
        print(f"GET /jobs?state=done (10k done): {(time.monotonic() - t0) / 5 * 1000:.0f} ms per page")


ACTIONS_SHOT = ARTIFACT.with_name("job-page-actions.png")
TOKEN = "dashboard-token-0123456789"


def test_actions_with_a_token(spool: SpoolLayout, tmp_path: Path) -> None:
    token_file = spool.root / "serve-token"
    token_file.write_text(TOKEN + "\n")
    token_file.chmod(0o600)
    write_spool_config(spool, {"serve_token_file": "serve-token"})
    drop(spool, "broken.yaml", command_job(exit=65, message="props.title is missing"))
    drain = subprocess.run(spoolrender_cmd("run", "--drain", "--spool", str(spool.root)), capture_output=True,
                           timeout=120, check=False)  # fmt: skip
    assert drain.returncode == 3, drain.stderr
    with running_server(spool.root, tmp_path / "serve.log", "--poll", "0.25") as server, Chromium() as browser:
        page = browser.new_page(server.url + "job?id=broken")
        page.wait_for(
            "document.body.dataset.ready === '1' && document.querySelector('#auth').dataset.state === 'locked'"
        )
        assert page.evaluate("document.querySelector('#retry-btn').hidden") is False
        assert page.evaluate("document.querySelector('#retry-btn').disabled") is True  # locked until a token
        assert "serve token" in page.evaluate("document.querySelector('#action-note').textContent")

        def unlock(token: str) -> None:
            page.evaluate(f"document.querySelector('#auth-token').value = {json.dumps(token)}")
            page.evaluate("document.querySelector('#auth-form button').click()")

        unlock("wrong-token-wrong-token")
        page.wait_for("document.querySelector('.auth-error')?.textContent === 'that token is not right'")
        unlock(TOKEN)
        page.wait_for("document.querySelector('#auth').dataset.state === 'unlocked'")
        assert page.evaluate("document.cookie") == "" and TOKEN not in page.evaluate("location.href")

        # Retry: the job moves failed -> retry, on the spool and on the page.
        page.evaluate("document.querySelector('#retry-btn').click()")
        page.wait_for("document.querySelector('#state').textContent === 'retry'")
        assert [n.split("-", 2)[2].split(".")[0] for n in entries(spool, "retry")] == ["broken"]
        print(f"actions screenshot: {page.screenshot(ACTIONS_SHOT)}")
        # Cancel takes two clicks; then it is failed as cancelled.
        page.evaluate("document.querySelector('#cancel-btn').click()")
        assert "again" in page.evaluate("document.querySelector('#cancel-btn').textContent")
        page.evaluate("document.querySelector('#cancel-btn').click()")
        page.wait_for("document.querySelector('#state').textContent === 'failed'")
        assert "cancelled" in page.evaluate("document.querySelector('#reason').textContent")

        # The overview, same tab: the token is still there. Submit (invalid, then valid), pause, resume.
        page = browser.new_page(server.url)
        page.wait_for("document.body.dataset.ready === '1'")
        assert page.evaluate("document.querySelector('#auth').dataset.state") in ("unlocked", "locked")
        # (a new target is a new tab: sessionStorage is per tab, so unlock once more here)
        if page.evaluate("document.querySelector('#auth').dataset.state") == "locked":
            unlock(TOKEN)
            page.wait_for("document.querySelector('#auth').dataset.state === 'unlocked'")
        page.evaluate("document.querySelector('#submit-panel').open = true")
        page.evaluate("document.querySelector('#submit-text').value = 'renderer: command\\ncommand: nope\\n'")
        page.evaluate("document.querySelector('#submit-btn').click()")
        problems = page.wait_for("[...document.querySelectorAll('#submit-problems li')].map(l => l.textContent)")
        assert any("command" in p for p in problems), problems
        page.evaluate("document.querySelector('#submit-text').value = 'renderer: command\\ncommand: props\\n'")
        page.evaluate("document.querySelector('#submit-name').value = 'from-the-page.yaml'")
        page.evaluate("document.querySelector('#submit-btn').click()")
        page.wait_for("document.querySelector('#submit-result a')?.textContent === 'from-the-page'")
        assert (spool.incoming / "from-the-page.yaml").read_text() == "renderer: command\ncommand: props\n"
        page.wait_for("document.querySelector('#count-incoming').textContent === '1'")
        page.evaluate("document.querySelector('#pause-btn').click()")
        page.wait_for("!document.querySelector('#paused').hidden")
        assert (spool.root / ".spoolrender" / "paused").exists()
        page.evaluate("document.querySelector('#resume-btn').click()")
        page.wait_for("document.querySelector('#paused').hidden")
        assert not (spool.root / ".spoolrender" / "paused").exists()
        # The browser logs the refused (422) submission as a failed load; nothing else may fail.
        assert [e for e in page.errors() if "status of 422" not in e] == []


def test_read_only_pages_say_why(spool: SpoolLayout, tmp_path: Path) -> None:
    with running_server(spool.root, tmp_path / "serve.log") as server, Chromium() as browser:
        page = browser.new_page(server.url)
        page.wait_for(
            "document.body.dataset.ready === '1' && document.querySelector('#auth').dataset.state === 'read-only'"
        )
        assert page.evaluate("document.querySelector('#pause-btn').disabled") is True
        assert "serve_token_file" in page.evaluate("document.querySelector('#toolbar-note').textContent")
        assert page.evaluate("document.querySelector('#auth-token')") is None  # nothing to type a token into
        assert page.errors() == []


PLOTS_SHOT = ARTIFACT.with_name("plots.png")


def test_plots_from_the_spool_history(spool: SpoolLayout, start_runner: Any, tmp_path: Path) -> None:
    write_spool_config(spool, {"slots": 2})
    with running_server(spool.root, tmp_path / "serve.log", "--history-interval", "1") as server:
        wait_for(lambda: len(server.get_json("/history")["samples"]) >= 2, timeout=60)
        start_runner()
        for i in range(8):
            drop(spool, f"clip-{i}.yaml", command_job(sleep=1 + i % 3))
        drop(spool, "broken.yaml", command_job(exit=65, message="no"))

        def finished() -> tuple[int, int]:
            samples = server.get_json("/history")["samples"]
            return sum(s["done"] for s in samples), sum(s["failed"] for s in samples)

        wait_for(lambda: finished() == (8, 1), timeout=120)
        with Chromium() as browser:
            page = browser.new_page(server.url)
            page.wait_for("document.querySelector('#plots').dataset.done === '8'")
            assert page.evaluate("document.querySelector('#plots').dataset.failed") == "1"
            captions = page.evaluate(
                "Object.fromEntries([...document.querySelectorAll('.plot-box')]"
                ".map(b => [b.id, b.querySelector('figcaption').textContent]))"
            )
            assert "8 done, 1 failed" in captions["plot-finished"]
            assert "8 renders" in captions["plot-durations"]
            assert "1 runner" in captions["plot-runners"]
            bars = "document.querySelectorAll('#plot-finished rect.bar-done').length"
            assert (
                page.evaluate(bars) >= 1
                and page.evaluate("document.querySelectorAll('#plot-finished rect.bar-failed').length") == 1
            )
            assert page.evaluate("document.querySelectorAll('#plot-durations rect').length") >= 1
            assert page.evaluate("document.querySelector('#plot-runners polyline').getAttribute('points').length") > 0
            page.evaluate("document.querySelector('#plot-range button[data-hours=\"1\"]').click()")
            page.wait_for("document.querySelector('#plot-range button.active').dataset.hours === '1'")
            page.wait_for("document.querySelector('#plots').dataset.done === '8'")
            page.evaluate("document.querySelector('#history').scrollIntoView()")
            print(f"plots screenshot: {page.screenshot(PLOTS_SHOT)}")
            assert page.errors() == []
