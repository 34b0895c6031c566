"""Reading a job (show, GET /jobs/{id}, Job.status) while another process moves it between
states: every read answers, from one state, never a FileNotFoundError or a mix of two."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.spool_jobs import command_job

from spoolrender.api import Spool
from spoolrender.config.spool_config import SpoolConfig
from spoolrender.errors import JobNotFound
from spoolrender.ops import lookup
from spoolrender.ops.lookup import show_document
from spoolrender.serve.api import job_detail
from spoolrender.spool.layout import SpoolLayout, new_token

# A separate process moves the job as runners do, in a loop with no pauses: a run writes
# its log and decides its record in running/, then the job goes to retry/ and is claimed
# back into running/ under a new token, which writes its heartbeat (each move and write
# fsynced, as runners do). After RUNS runs it only moves the job and writes heartbeats (so
# reads stay short); it stops when the stop file appears.
MOVER = r"""
import os, sys, time
from pathlib import Path
from spoolrender import defaults
from spoolrender.spool.durable import rename_durable, write_atomic
from spoolrender.spool.layout import new_token
from spoolrender.spool.records import RunRecord, decide, log_path

spool, job_id, uid, token, stop = Path(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4], Path(sys.argv[5])
runs = int(sys.argv[6])
where = spool / "running" / f"{job_id}.{uid}.{token}"
run = 0
while not stop.exists():
    if run < runs:
        run += 1
        log_path(where, run).write_bytes(b"rendering\n")
        record = RunRecord(run=run, outcome="retry", host="mover", pid=os.getpid(), token=token, ended=time.time())
        decide(where, record)
    waiting = spool / "retry" / f"{int(time.time() * 1000):013d}-0000-{job_id}.{uid}"
    rename_durable(where, waiting)
    token = new_token()
    where = spool / "running" / f"{job_id}.{uid}.{token}"
    rename_durable(waiting, where)
    write_atomic(where / defaults.HEARTBEAT_FILENAME, token.encode())
"""

READS = 300  # each reader's reads while the job moves
RUNS = 20  # runs the mover writes


def moving_job(spool: SpoolLayout, tmp_path: Path) -> tuple[str, subprocess.Popen[bytes], Path]:
    job_id, uid, token = "moving", new_token(), new_token()
    job_dir = spool.running / f"{job_id}.{uid}.{token}"
    job_dir.mkdir()
    (job_dir / "job.yaml").write_text(yaml.safe_dump(command_job()))
    stop = tmp_path / "stop"
    argv = [sys.executable, "-c", MOVER, str(spool.root), job_id, uid, token, str(stop), str(RUNS)]
    return job_id, subprocess.Popen(argv), stop


def check_snapshot(info: dict[str, Any]) -> int:
    """One read is of one state: its runs, logs and path agree. Returns its run count."""
    assert info["state"] in ("running", "retry"), info
    runs = [run["run"] for run in info["runs"]]
    assert runs == list(range(1, len(runs) + 1)), info
    # Each run's log is written before its record (runs are read before logs are listed),
    # in the directory the read names; in retry/ every run is decided.
    assert [Path(p).parent for p in info["logs"]] == [Path(info["path"])] * len(info["logs"]), info
    assert len(info["logs"]) >= len(runs), info
    if info["state"] == "retry":
        assert runs and info["runs"][-1]["outcome"] == "retry", info
    return len(runs)


def read_while_moving(spool: SpoolLayout, tmp_path: Path, read: Callable[[str], dict[str, Any]]) -> None:
    job_id, mover, stop = moving_job(spool, tmp_path)
    try:
        reads, runs = 0, 0
        deadline = time.monotonic() + 300
        while reads < READS or runs < RUNS:  # the mover moves the job until told to stop
            assert mover.poll() is None, "the mover died"
            assert time.monotonic() < deadline, f"{reads} reads, {runs} runs in 300 s"
            runs = max(runs, check_snapshot(read(job_id)))
            reads += 1
    finally:
        stop.touch()
        mover.wait(timeout=60)
    assert mover.returncode == 0


def test_show_reads_a_job_that_moves_between_states(spool: SpoolLayout, config: SpoolConfig, tmp_path: Path) -> None:
    read_while_moving(spool, tmp_path, lambda job_id: show_document(config, job_id))


def test_serve_job_detail_reads_a_job_that_moves_between_states(
    spool: SpoolLayout, config: SpoolConfig, tmp_path: Path
) -> None:
    def read(job_id: str) -> dict[str, Any]:
        info = job_detail(config, job_id)
        assert info["job"] is not None, info  # job.yaml read from the entry it describes
        assert info["entry"] == f"{info['state']}/{Path(info['path']).name}", info
        return info

    read_while_moving(spool, tmp_path, read)


def test_job_handle_reads_a_job_that_moves_between_states(spool: SpoolLayout, tmp_path: Path) -> None:
    handle = Spool(spool.root)
    read_while_moving(spool, tmp_path, lambda job_id: handle.job(job_id).show())


def test_an_unknown_id_is_answered_after_one_lookup_when_nothing_moved(
    spool: SpoolLayout, config: SpoolConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An empty lookup was repeated JOB_READ_ATTEMPTS times (about 7 s for `show` of an
    unknown id at 100k done); it is repeated only if a directory a job can be in changed
    during it, or just before it (a coarse clock): above, a moving job is still found."""
    calls: list[str] = []
    real = lookup.find_job

    def counted(config: SpoolConfig, job_id: str, **kwargs: Any) -> list[lookup.Located]:
        calls.append(job_id)
        return real(config, job_id, **kwargs)

    monkeypatch.setattr(lookup, "find_job", counted)
    queue = spool.incoming / "q1"
    queue.mkdir()
    an_hour_ago = time.time() - 3600
    for directory in (spool.incoming, queue, spool.running, spool.retry, spool.split, spool.done, spool.failed):
        os.utime(directory, (an_hour_ago, an_hour_ago))
    with pytest.raises(JobNotFound):
        show_document(config, "nobody")
    assert calls == ["nobody"]
    os.utime(spool.done)  # modified just now: a job may have moved during the lookup
    calls.clear()
    with pytest.raises(JobNotFound):
        show_document(config, "nobody")
    assert len(calls) > 1
