"""Run records and id reservations on a real spool: the exclusive decision (the first
writer of a run's record decides it), what counts as an attempt, and an id held by one
job at a time, taken over from a job that is gone, refused while its holder is done."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from spoolrender.errors import JobInvalid
from spoolrender.spool.ids import release_id, reserve_id
from spoolrender.spool.layout import SpoolLayout
from spoolrender.spool.records import (
    FAILED,
    PUBLISHING,
    REQUEUE,
    RESET,
    RETRY,
    SPOOL_IO,
    RunRecord,
    attempts_used,
    decide,
    next_run_number,
    read_run,
    read_runs,
    recorded_priority,
    spool_io_requeues,
)
from spoolrender.testing import make_spool

UID_A, UID_B = "aaaaaaaaaaaa", "bbbbbbbbbbbb"


def record(
    run: int, outcome: str, *, error: dict[str, Any] | None = None, details: dict[str, Any] | None = None
) -> RunRecord:
    return RunRecord(run, outcome, "h", 1, f"t{run}", 100.0 + run, error=error, details=details or {})


@pytest.fixture
def layout(tmp_path: Path) -> SpoolLayout:
    return SpoolLayout(make_spool(tmp_path / "spool").spool)


def test_the_first_record_of_a_run_decides_it_and_a_second_changes_nothing(tmp_path: Path) -> None:
    job = tmp_path / "job"
    job.mkdir()
    assert next_run_number(job) == 1
    assert decide(job, record(1, RETRY, error={"kind": "x", "message": "m", "transient": True}))
    assert not decide(job, record(1, PUBLISHING))  # a stalled owner that lost the job: fenced
    assert read_run(job, 1) == record(1, RETRY, error={"kind": "x", "message": "m", "transient": True})
    assert next_run_number(job) == 2
    assert decide(job, record(2, FAILED))
    assert [r.outcome for r in read_runs(job)] == [RETRY, FAILED]
    assert read_run(job, 3) is None
    with pytest.raises(FileNotFoundError):
        decide(tmp_path / "moved-away", record(1, RETRY))


def test_attempts_count_since_the_last_reset_and_requeues_are_free() -> None:
    runs = [record(1, RETRY), record(2, REQUEUE), record(3, RETRY)]
    assert attempts_used(runs) == 2
    assert attempts_used([*runs, record(4, RESET)]) == 0  # `spoolrender retry`: fresh attempts
    assert attempts_used([*runs, record(4, RESET), record(5, RETRY)]) == 1
    spool_io = {"kind": SPOOL_IO, "message": "disk full", "transient": True}
    trouble = [record(1, RETRY), record(2, REQUEUE, error=spool_io), record(3, REQUEUE, error=spool_io)]
    assert spool_io_requeues(trouble) == 2
    assert spool_io_requeues([*trouble, record(4, RETRY)]) == 0
    assert recorded_priority([record(1, RETRY, details={"priority": 4}), record(2, REQUEUE)]) == 4
    assert recorded_priority([record(1, REQUEUE)]) is None


def test_an_id_is_held_by_one_job_until_released(layout: SpoolLayout) -> None:
    running = layout.running / f"intro.{UID_A}.{UID_A}"
    running.mkdir()
    reserve_id(layout, "intro", UID_A, rerun=False)
    reserve_id(layout, "intro", UID_A, rerun=False)  # its own again: fine
    with pytest.raises(JobInvalid) as held:
        reserve_id(layout, "intro", UID_B, rerun=False)
    assert held.value.problems == [f"field 'id': 'intro' is already queued or running (running/{running.name})"]
    assert os.readlink(layout.ids / "intro") == UID_A
    release_id(layout, "intro", UID_B)  # not B's: untouched
    assert os.readlink(layout.ids / "intro") == UID_A
    release_id(layout, "intro", UID_A)
    assert not os.path.lexists(layout.ids / "intro")
    reserve_id(layout, "intro", UID_B, rerun=False)
    assert os.readlink(layout.ids / "intro") == UID_B


def test_a_done_holder_keeps_its_id_unless_rerun_and_a_gone_one_loses_it(layout: SpoolLayout) -> None:
    (layout.done / f"intro.{UID_A}").mkdir()
    reserve_id(layout, "intro", UID_A, rerun=False)
    with pytest.raises(JobInvalid) as held:
        reserve_id(layout, "intro", UID_B, rerun=False, origin="id from the file name 'intro.yaml'")
    assert held.value.problems == [
        f"id from the file name 'intro.yaml': 'intro' was already rendered (done/intro.{UID_A}); "
        "use another id, or set rerun: true to render it again"
    ]
    reserve_id(layout, "intro", UID_B, rerun=True)
    assert os.readlink(layout.ids / "intro") == UID_B
    release_id(layout, "intro", UID_B)  # the rerun failed: the done job gets its id back
    assert os.readlink(layout.ids / "intro") == UID_A
    os.rmdir(layout.done / f"intro.{UID_A}")  # purged: its reservation proves nothing now
    reserve_id(layout, "intro", UID_B, rerun=False)
    assert os.readlink(layout.ids / "intro") == UID_B
