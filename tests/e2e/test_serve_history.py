"""The spool's history that `spoolrender serve` keeps for the dashboard's plots (issue 16,
item 4): real servers and a real runner over a real spool, with one sample a second.

Each finished job is counted once, in one sample; the history is on disk in the spool, so a
restarted server and a second server show the same samples; two servers never both write
an interval.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from support.browser.server import running_server
from support.spool_jobs import allow_steps, command_job, drop, entries, write_spool_config
from support.waiting import wait_for

from spoolrender.serve.history import HISTORY_DIR, SAMPLE_NAME
from spoolrender.spool.layout import SpoolLayout


def totals(samples: list[dict[str, Any]]) -> tuple[int, int]:
    return sum(s["done"] for s in samples), sum(s["failed"] for s in samples)


def test_history_counts_each_finished_job_once_and_survives_restarts(
    spool: SpoolLayout, start_runner: Any, tmp_path: Path
) -> None:
    write_spool_config(spool, {"slots": 2})
    history_dir = spool.root / ".spoolrender" / HISTORY_DIR
    fast = ("--history-interval", "1")
    with (
        running_server(spool.root, tmp_path / "a.log", *fast) as first,
        running_server(spool.root, tmp_path / "b.log", *fast) as second,
    ):
        wait_for(lambda: len(first.get_json("/history")["samples"]) >= 2, timeout=60)  # watching
        start_runner()
        steps = tmp_path / "steps"  # the clips render until the history has seen them
        for i in range(6):
            drop(spool, f"clip-{i}.yaml", command_job(steps_file=str(steps)))
        drop(spool, "broken.yaml", command_job(exit=65, message="no"))

        def busy_with_a_backlog() -> bool:
            samples = first.get_json("/history")["samples"]
            busy = any(r["busy"] >= 1 for s in samples for r in s["runners"])
            return busy and any(s["backlog"] >= 1 for s in samples)

        wait_for(busy_with_a_backlog, timeout=60)
        allow_steps(steps, 10)
        wait_for(lambda: len(entries(spool, "done")) == 6 and len(entries(spool, "failed")) == 1, timeout=90)
        wait_for(lambda: totals(first.get_json("/history")["samples"]) == (6, 1), timeout=60)
        history = first.get_json("/history?hours=1")
        assert history["interval"] == 1 and history["hours"] == 1
        samples = history["samples"]
        assert sum(len(s["durations"]) for s in samples) == 6
        assert all(0 <= d < 60 for s in samples for d in s["durations"])
        busy = [r for s in samples for r in s["runners"]]
        assert busy and all(r["slots"] == 2 for r in busy) and max(r["busy"] for r in busy) >= 1
        assert any(s["backlog"] >= 1 for s in samples) and samples[-1]["counts"]["done"] == 6
        # Both servers read the one history: every interval written once, by one of them.
        assert second.get_json("/history?hours=1")["samples"][: len(samples)] == samples
        names = [n for n in (p.name for p in history_dir.iterdir()) if SAMPLE_NAME.fullmatch(n)]
        starts = [int(n.split("-")[0]) for n in names]
        assert len(starts) == len(set(starts))
        assert not [p for p in history_dir.iterdir() if p.name.startswith(".")]  # no temporary left
    # A new server (a restart, or another host) shows the same history.
    with running_server(spool.root, tmp_path / "c.log", *fast) as again:
        assert again.get_json("/history?hours=1")["samples"][: len(samples)] == samples
        assert again.get("/history?hours=49").status == 400 and again.get("/history?hours=x").status == 400
