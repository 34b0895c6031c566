"""A split job whose chunks are all rendered waits in retry/ for its join: status shows it
as a split job joining (nothing failed), and its result counts the chunks' time."""

from __future__ import annotations

import json
import os
from typing import Any

import pytest
from support.chunk_jobs import FRAMES_CONFIG, frames_job, video
from support.spool_jobs import drop, entries, write_spool_config

from spoolrender.cli import main
from spoolrender.config.spool_config import SpoolConfig, load_config
from spoolrender.lifecycle.transitions import complete_publish
from spoolrender.ops.metrics import spool_metrics_text
from spoolrender.ops.split_progress import joining_key
from spoolrender.ops.status import job_counts, take_snapshot
from spoolrender.runner.loop import Runner
from spoolrender.spool.chunk_names import ledger_dir
from spoolrender.spool.layout import SpoolLayout, final_name, retry_name
from spoolrender.spool.records import FAILED, PUBLISHING, REQUEUE, RESET, RETRY, SPLIT, RunRecord, decide


def drain(spool: SpoolLayout, **kwargs: Any) -> None:
    Runner(load_config(spool.root, environ={}, overrides={"slots": 1}), drain=True, **kwargs).run()


def test_a_split_job_waiting_for_its_join_is_no_retry_and_its_time_counts_the_chunks(
    spool: SpoolLayout, capsys: pytest.CaptureFixture[str]
) -> None:
    write_spool_config(spool, FRAMES_CONFIG)
    drop(spool, "long.yaml", frames_job(4, sleep=0.05))  # 10 frames a chunk: half a second each
    drain(spool, max_jobs=1)  # the split
    drain(spool, max_jobs=4)  # its four chunks; the last one wakes it into retry/ for the join
    assert len(entries(spool, "retry")) == 1 and entries(spool, "split") == []
    assert main(["status", "--json", "--spool", str(spool.root)]) == 0
    status = json.loads(capsys.readouterr().out)
    assert status["retry"] == [] and (status["counts"]["retry"], status["counts"]["split"]) == (0, 1)
    (job,) = status["split"]
    assert job["id"] == "long" and job["joining"] is True and job["progress"] == 1
    assert job["chunks"]["done"] == 4 and job["entry"] == entries(spool, "retry")[0]
    assert main(["status", "--spool", str(spool.root)]) == 0
    text = capsys.readouterr().out
    assert "RETRY" not in text and "4/4 done, 0 running, 0 waiting  100%      join next" in text

    drain(spool)  # the join
    (done,) = entries(spool, "done")
    assert (spool.root / "output" / "long.mp4").read_text() == video(40)
    result = json.loads((spool.done / done / "result.json").read_text())
    split_run, join_run = result["runs"]
    assert (split_run["outcome"], join_run["outcome"]) == ("split", "publishing")
    assert result["started"] == split_run["started"]
    assert result["duration_seconds"] == round(result["finished"] - split_run["started"], 3)
    assert result["duration_seconds"] > 4 * 0.5 > join_run["ended"] - join_run["started"]


UID = "0123456789ab"


def _record(run: int, outcome: str, *, started: float | None, ended: float, **extra: Any) -> RunRecord:
    return RunRecord(run=run, outcome=outcome, host="h", pid=1, token="t", started=started, ended=ended, **extra)


def _woken_split_job(spool: SpoolLayout, *outcomes: str) -> str:
    """A split job's retry/ entry with a ledger and runs ending in ``outcomes``, built by hand."""
    ledger_dir(spool, final_name("long", UID)).mkdir(parents=True)
    name = retry_name("long", UID, 1000.0, 0)
    (spool.retry / name).mkdir()
    for run, outcome in enumerate(outcomes, start=1):
        decide(spool.retry / name, _record(run, outcome, started=float(run), ended=float(run)))
    return name


def _counts(spool: SpoolLayout) -> dict[str, int]:
    return job_counts(spool, take_snapshot(spool, 2.0))[0]


def test_a_join_run_requeued_still_waits_for_its_join(spool: SpoolLayout) -> None:
    name = _woken_split_job(spool, SPLIT, REQUEUE)  # the join run stopped by a shutdown
    assert joining_key(spool, name) == final_name("long", UID)
    assert (_counts(spool)["retry"], _counts(spool)["split"]) == (0, 1)


def test_a_join_that_failed_is_a_retry(spool: SpoolLayout) -> None:
    name = _woken_split_job(spool, SPLIT, RETRY, REQUEUE)
    assert joining_key(spool, name) is None
    assert (_counts(spool)["retry"], _counts(spool)["split"]) == (1, 0)


def test_a_woken_split_job_claimed_while_status_reads_it_is_no_crash(spool: SpoolLayout) -> None:
    name = _woken_split_job(spool, SPLIT)
    os.rename(spool.retry / name, spool.running / final_name("long", UID))  # a runner claims it
    assert joining_key(spool, name) is None


def test_metrics_count_a_joining_job_with_split_as_status_does(config: SpoolConfig) -> None:
    _woken_split_job(SpoolLayout(config.spool), SPLIT)
    text = spool_metrics_text(config)
    assert 'spoolrender_jobs{state="split"} 1.0' in text and 'spoolrender_jobs{state="retry"} 0.0' in text


def test_a_job_retried_after_a_split_takes_its_time_from_the_runs_after_the_retry(spool: SpoolLayout) -> None:
    output_root = spool.root / "output"
    output_root.mkdir(exist_ok=True)
    (output_root / ".long.tmp").write_bytes(b"video")
    job_dir = spool.running / final_name("long", UID)
    job_dir.mkdir()
    for record in (
        _record(1, SPLIT, started=100.0, ended=101.0),
        _record(2, FAILED, started=200.0, ended=201.0),  # the join failed for good
        _record(3, RESET, started=None, ended=300.0),  # `spoolrender retry`
    ):
        decide(job_dir, record)
    publishing = _record(4, PUBLISHING, started=400.0, ended=410.0,
                         publish={"temp": ".long.tmp", "output": "long.mp4"})  # fmt: skip
    decide(job_dir, publishing)
    done = complete_publish(spool, output_root, job_dir, "long", UID, publishing)
    result = json.loads((done / "result.json").read_text())
    assert (result["started"], result["duration_seconds"]) == (400.0, 10.0)
