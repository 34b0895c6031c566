"""What `retry` means for a cancelled job and for a scheduled one, the same through the
CLI, the Python API and the HTTP API: the job runs again as submitted, with fresh
attempts and the cancel withdrawn, and never before its not_before."""

from __future__ import annotations

import json
import os
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.chunk_jobs import FRAMES_CONFIG, frames_job, video
from support.spool_jobs import command_job, drop, entries, write_spool_config
from support.waiting import wait_for

from spoolrender import Spool, defaults
from spoolrender.cli import main
from spoolrender.cli.show_text import format_description
from spoolrender.config.spool_config import load_config
from spoolrender.runner.loop import Runner
from spoolrender.serve.api import retry_job
from spoolrender.spool.layout import RETRY_NAME, SpoolLayout, priority_key, retry_name
from spoolrender.spool.records import read_runs

SCHEDULED = datetime(2030, 1, 1, tzinfo=UTC)


def drain(spool: SpoolLayout, **kwargs: Any) -> None:
    Runner(load_config(spool.root, environ={}), drain=True, **kwargs).run()


def test_a_job_cancelled_while_running_renders_when_retried(
    spool: SpoolLayout, start_runner: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    go, pid = tmp_path / "go", tmp_path / "pid"
    drop(spool, "long.yaml", command_job(until_file=str(go), pidfile=str(pid)))
    start_runner()
    wait_for(pid.exists, timeout=60)
    Spool(spool.root).cancel("long", by="test")
    wait_for(lambda: bool(entries(spool, "failed")), timeout=60)
    (failed,) = entries(spool, "failed")
    assert json.loads((spool.failed / failed / "failure.json").read_text())["kind"] == "cancelled"
    go.touch()  # the next render ends at once
    assert main(["retry", "long", "--spool", str(spool.root)]) == 0
    assert f"failed/{failed}: back to retry/, due now, with fresh attempts" in capsys.readouterr().out
    wait_for(lambda: bool(entries(spool, "done")), timeout=60)
    done = Spool(spool.root).show("long")
    assert [r["outcome"] for r in done["runs"]] == ["failed", "reset", "publishing"]
    text = format_description(done)
    assert "failed:" not in text and "cancelled by test" in text  # the run's history, not a stale outcome


def test_a_cancelled_scheduled_job_retried_waits_for_its_time(
    spool: SpoolLayout, capsys: pytest.CaptureFixture[str]
) -> None:
    drop(spool, "later.yaml", {**command_job(), "not_before": SCHEDULED.isoformat()})
    api = Spool(spool.root)
    api.cancel("later")
    (failed,) = entries(spool, "failed")
    assert main(["retry", "later", "--spool", str(spool.root)]) == 0
    line = capsys.readouterr().out.strip()
    assert line == f"failed/{failed}: back to retry/, due 2030-01-01T00:00:00Z (its not_before), with fresh attempts"
    (waiting,) = entries(spool, "retry")
    m = RETRY_NAME.fullmatch(waiting)
    assert m is not None and int(m.group("due")) / 1000 == SCHEDULED.timestamp()
    drain(spool)
    assert entries(spool, "retry") == [waiting] and entries(spool, "done") == []  # not rendered early
    # Retried again while it waits: the CLI, the Python API and the HTTP API say the same.
    assert main(["retry", "later", "--spool", str(spool.root)]) == 0
    again = capsys.readouterr().out.strip()
    assert (
        again
        == f"retry/{waiting}: not made due now: its not_before is 2030-01-01T00:00:00Z (retry never runs a job early)"
    )
    assert api.retry("later") == [again]
    answer = retry_job(load_config(spool.root, environ={}), "later")
    assert answer == {"id": "later", "state": "retry", "moved": 0, "due": SCHEDULED.timestamp(), "changes": [again]}
    assert api.job("later").status().due == SCHEDULED.timestamp()


def test_a_cancelled_chunked_job_renders_whole_when_retried(spool: SpoolLayout) -> None:
    write_spool_config(spool, FRAMES_CONFIG)
    drop(spool, "long.yaml", frames_job(4))
    drain(spool, max_jobs=1)  # splits it, then stops: its chunks wait in retry/
    assert len(entries(spool, "split")) == 1
    api = Spool(spool.root)
    api.cancel("long", by="test")
    (failed,) = entries(spool, "failed")
    assert os.path.exists(spool.failed / failed / "cancel")
    (change,) = api.retry("long")
    assert "back to retry/, due now" in change
    for _ in range(10):  # a drain per step: split, chunks, join
        drain(spool)
        if entries(spool, "done"):
            break
    assert (spool.root / "output" / "long.mp4").read_text() == video(40)
    assert entries(spool, "failed") == []


def test_a_job_cancelled_in_incoming_keeps_its_priority_when_retried(spool: SpoolLayout) -> None:
    drop(spool, "urgent.yaml", {**command_job(), "priority": 7})
    api = Spool(spool.root)
    api.cancel("urgent")
    (failed,) = entries(spool, "failed")
    assert [r.details.get("priority") for r in read_runs(spool.failed / failed)] == [7]
    api.retry("urgent")
    (waiting,) = entries(spool, "retry")
    m = RETRY_NAME.fullmatch(waiting)
    assert m is not None and m.group("prio") == priority_key(7)


def test_retry_of_a_waiting_job_withdraws_its_cancel_request(spool: SpoolLayout) -> None:
    """A job in retry/ still holding a cancel request (a cancelled split job woken for its
    join, a run that failed before its heartbeat saw the cancel): retried, it renders."""
    entry = spool.retry / retry_name("later", "0123456789ab", time.time() + 3600, 0)
    entry.mkdir()
    (entry / defaults.JOB_FILENAME).write_text(yaml.safe_dump(command_job()), encoding="utf-8")
    (entry / defaults.CANCEL_FILENAME).write_text("cancelled by test\n", encoding="utf-8")
    Spool(spool.root).retry("later")
    (waiting,) = entries(spool, "retry")
    assert not (spool.retry / waiting / defaults.CANCEL_FILENAME).exists()
    drain(spool)
    assert len(entries(spool, "done")) == 1 and entries(spool, "failed") == []
