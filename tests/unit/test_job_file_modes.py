"""spoolrender.spool.job_file_modes: what the runner writes beside a job is no more readable than
the job (issue 20's remainder: run records and failure.json quote what a render printed)."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from spoolrender import defaults
from spoolrender.spool.durable import write_json_atomic
from spoolrender.spool.job_file_modes import private_file_mode
from spoolrender.spool.records import FAILED, RunRecord, decide, read_runs


@pytest.fixture
def umask_022() -> Iterator[None]:
    old = os.umask(0o022)  # the common umask: it takes no read bit away
    try:
        yield
    finally:
        os.umask(old)


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def _record(run: int) -> RunRecord:
    error = {"kind": "command-exit", "message": "exited with status 1: key=s3cret", "transient": False}
    return RunRecord(run=run, outcome=FAILED, host="h", pid=1, token="t", ended=1.0, error=error)


@pytest.mark.parametrize(
    ("copy", "submitted", "expected"),
    [
        (0o400, 0o600, 0o600),  # a private job: the runner's alone
        (0o440, 0o640, 0o640),  # readable by its group: so are its records
        (0o444, 0o644, 0o644),  # a public job: as before
        (None, 0o600, 0o600),  # no copy yet (refused, abandoned): the submitted file's bits
        (None, 0o644, 0o644),
        (None, None, 0o600),  # nothing to go by: private
    ],
)
def test_records_and_outcomes_get_the_jobs_read_bits(
    tmp_path: Path, umask_022: None, copy: int | None, submitted: int | None, expected: int
) -> None:
    for name, mode in ((defaults.JOB_FILENAME, copy), (defaults.SUBMITTED_FILENAME, submitted)):
        if mode is not None:
            (tmp_path / name).write_text("renderer: command\n")
            os.chmod(tmp_path / name, mode)
    assert private_file_mode(tmp_path) == expected
    assert decide(tmp_path, _record(1))
    write_json_atomic(tmp_path / defaults.FAILURE_FILENAME, {"reason": "s3cret"}, mode=private_file_mode(tmp_path))
    assert _mode(tmp_path / "run-0001.json") == expected
    assert _mode(tmp_path / defaults.FAILURE_FILENAME) == expected
    assert [r.run for r in read_runs(tmp_path)] == [1]  # the runner's own user reads them


def test_a_mode_given_by_the_caller_is_used_and_the_umask_only_narrows_it(tmp_path: Path) -> None:
    old = os.umask(0o077)
    try:
        assert decide(tmp_path, _record(1), 0o644)
    finally:
        os.umask(old)
    assert _mode(tmp_path / "run-0001.json") == 0o600
    assert decide(tmp_path, _record(2), 0o600)
    assert _mode(tmp_path / "run-0002.json") == 0o600
