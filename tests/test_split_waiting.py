"""A split job whose chunks are all rendered waits in retry/ for its join: status shows it
as a split job joining (nothing failed), and its result counts the chunks' time."""

from __future__ import annotations

import json
from typing import Any

import pytest
from chunk_jobs import FRAMES_CONFIG, frames_job, video
from conftest import drop, entries, write_spool_config

from spoolrender.cli import main
from spoolrender.config import load_config
from spoolrender.layout import SpoolLayout
from spoolrender.runner import Runner


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
