"""`run --max-jobs` and `run --max-runtime`: real runner processes, their exit statuses."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from support.processes import spoolrender_cmd
from support.spool_jobs import command_job, drop, entries, write_spool_config
from support.waiting import wait_for

from spoolrender.spool.layout import SpoolLayout

Start = Callable[..., subprocess.Popen[bytes]]


def test_max_jobs_stops_claiming_lets_the_jobs_finish_and_exits_5(
    spool: SpoolLayout, start_runner: Start, tmp_path: Path
) -> None:
    # Slow jobs: if the runner cut them short at the limit, they would land in retry/.
    for i in range(5):
        drop(spool, f"j{i}.yaml", command_job(sleep=1.5))
    log = tmp_path / "runner.log"
    proc = start_runner("--max-jobs", "3", log=log)
    assert proc.wait(timeout=120) == 5, log.read_text()
    assert len(entries(spool, "done")) == 3
    assert entries(spool, "retry") == [] and entries(spool, "running") == []
    assert len(entries(spool, "incoming")) == 2  # never claimed: left for the next worker
    text = log.read_text()
    assert "--max-jobs 3 reached" in text and "max-jobs: 3 claimed, 3 done" in text
    # The runner's own last log line says the same for people, never a dataclass repr.
    assert "stopped: max-jobs: 3 claimed, 3 done, 0 to retry, 0 put back, 0 failed\n" in text
    assert "RunSummary(" not in text


def test_max_jobs_with_drain_reports_failures_first(spool: SpoolLayout, start_runner: Start, tmp_path: Path) -> None:
    drop(spool, "bad.yaml", {"renderer": "command", "command": "no-such-command"})  # invalid: failed for good
    drop(spool, "good.yaml", command_job())
    log = tmp_path / "runner.log"
    proc = start_runner("--drain", "--max-jobs", "1", "--slots", "1", log=log)
    assert proc.wait(timeout=120) == 3, log.read_text()  # the first job (by arrival) failed for good
    assert len(entries(spool, "failed")) == 1 and len(entries(spool, "incoming")) == 1


def test_drain_that_finishes_before_max_jobs_exits_0(spool: SpoolLayout, start_runner: Start) -> None:
    drop(spool, "one.yaml", command_job())
    proc = start_runner("--drain", "--max-jobs", "10")
    assert proc.wait(timeout=120) == 0
    assert len(entries(spool, "done")) == 1


def test_max_runtime_stops_like_sigterm_and_exits_6(spool: SpoolLayout, start_runner: Start, tmp_path: Path) -> None:
    write_spool_config(spool, {"grace_seconds": 0.5})
    drop(spool, "long.yaml", command_job(sleep=120))
    log = tmp_path / "runner.log"
    started = time.monotonic()
    proc = start_runner("--max-runtime", "3s", log=log)
    wait_for(lambda: len(entries(spool, "running")) == 1, timeout=30)
    assert proc.wait(timeout=60) == 6, log.read_text()
    assert time.monotonic() - started >= 3
    # Put back without using an attempt, due at once, for the next runner.
    (entry,) = entries(spool, "retry")
    (run,) = [json.loads(p.read_text()) for p in (spool.retry / entry).glob("run-*.json")]
    assert run["outcome"] == "requeue" and run["attempt"] is None
    assert "--max-runtime 3 s reached" in log.read_text()


def test_max_runtime_on_an_idle_long_running_runner(spool: SpoolLayout, start_runner: Start) -> None:
    proc = start_runner("--max-runtime", "1.5s")
    assert proc.wait(timeout=60) == 6


def test_bad_limits_are_usage_errors(spool: SpoolLayout) -> None:
    for args in (["--max-jobs", "0"], ["--max-jobs", "x"], ["--max-runtime", "0s"], ["--max-runtime", "soon"]):
        result = subprocess.run(
            spoolrender_cmd("run", "--spool", str(spool.root), *args), capture_output=True, text=True, timeout=60
        )
        assert result.returncode == 2, (args, result.stderr)
        assert "--max-" in result.stderr
