"""The runner's records inside a job directory, beside the job's private copy ``job.yaml``.

Every claim of a job is a *run*, numbered from 1. Its outcome is written once, as
``run-NNNN.json``, by whoever decides it: the owning runner, or a runner that found the
owner dead. The file is created exclusively (see
:func:`spoolrender.spool.durable.create_exclusive`), so when an owner that was merely paused
and a recoverer both try to decide the same run, exactly one wins and the other backs off.
This is the fencing token of the protocol: nobody moves a job or publishes its output
without having won its run file (or reading the winner's decision and carrying it out).

Records are append-only, so a job's full history is simply its run files.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from spoolrender.core.vocabulary import FailureKind, RunOutcome
from spoolrender.spool.durable import create_exclusive, json_bytes
from spoolrender.spool.job_file_modes import private_file_mode

log = logging.getLogger(__name__)

RUN_FILE = re.compile(r"run-(\d{4,})\.json")

# Outcomes: where a run sends the job.
# (Names kept for their importers; the members and what they mean: spoolrender.core.vocabulary.)
PUBLISHING = RunOutcome.PUBLISHING
RETRY = RunOutcome.RETRY
FAILED = RunOutcome.FAILED
REQUEUE = RunOutcome.REQUEUE
RESET = RunOutcome.RESET
SPLIT = RunOutcome.SPLIT
OUTCOMES = (PUBLISHING, RETRY, FAILED, REQUEUE, RESET, SPLIT)
NOT_AN_ATTEMPT = (REQUEUE, RESET, SPLIT)
# The error kind of a run decided by a recoverer because its owner died (lifecycle/recovery.py).
RUNNER_DIED = FailureKind.RUNNER_DIED
# The error kind of a claim whose runner died or stalled before it started the job (lifecycle/recovery.py).
CLAIM_ABANDONED = FailureKind.CLAIM_ABANDONED
# The error kind of a run that ended (or could not be recorded) because the spool's
# filesystem failed (full, read-only, ...: spoolrender.spool.io_trouble): requeued, no attempt used.
SPOOL_IO = FailureKind.SPOOL_IO
# Run details: what the run went ahead despite, one line each (e.g. a Remotion project
# whose packages have mixed versions, which Remotion's own CLI warns about and renders).
WARNINGS_KEY = "warnings"


@dataclass(frozen=True)
class RunRecord:
    run: int
    outcome: str
    host: str
    pid: int
    token: str
    ended: float
    started: float | None = None
    attempt: int | None = None
    error: dict[str, Any] | None = None  # RunError.to_record() (spoolrender.core.run_error); as read back
    due: float | None = None  # RETRY/REQUEUE: not before this wall time
    publish: dict[str, Any] | None = None  # PUBLISHING: {"temp", "output", "bytes", "inode", "mtime_ns"}
    details: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.outcome not in OUTCOMES:
            raise ValueError(f"unknown outcome {self.outcome!r}")
        if self.run < 1:
            raise ValueError("run numbers start at 1")

    def to_json(self) -> bytes:
        return json_bytes(asdict(self))

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> RunRecord:
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in raw.items() if k in known})


def run_path(job_dir: Path, run: int) -> Path:
    return job_dir / f"run-{run:04d}.json"


def log_path(job_dir: Path, run: int) -> Path:
    return job_dir / f"run-{run:04d}.log"


def run_numbers(job_dir: Path) -> list[int]:
    numbers = []
    for p in job_dir.iterdir():
        m = RUN_FILE.fullmatch(p.name)
        if m:
            numbers.append(int(m.group(1)))
    return sorted(numbers)


def read_runs(job_dir: Path) -> list[RunRecord]:
    """Every decided run of the job, oldest first; unreadable files are skipped with a warning.

    FileNotFoundError when the directory is gone, as from :func:`run_numbers`: also when
    it moves between the listing and a read (run files are never deleted one by one), which
    is a job carried on by another runner, not an unreadable record.
    """
    runs = []
    for n in run_numbers(job_dir):
        try:
            runs.append(RunRecord.from_dict(json.loads(run_path(job_dir, n).read_bytes())))
        except FileNotFoundError:
            raise
        except PermissionError:
            _private(job_dir, n)
        except (OSError, ValueError, TypeError) as exc:
            log.warning("unreadable run record %s: %s", run_path(job_dir, n), exc)
    return runs


def read_run(job_dir: Path, run: int) -> RunRecord | None:
    try:
        return RunRecord.from_dict(json.loads(run_path(job_dir, run).read_bytes()))
    except FileNotFoundError:
        return None
    except PermissionError:
        _private(job_dir, run)
        return None
    except (OSError, ValueError, TypeError) as exc:
        log.warning("unreadable run record %s: %s", run_path(job_dir, run), exc)
        return None


def _private(job_dir: Path, run: int) -> None:
    # A private job's records are the runner's user's alone (spool/job_file_modes.py): `status`,
    # `show` or serve run as another user see the job without them, which is no fault.
    log.debug("run record %s: not readable by this user (a private job)", run_path(job_dir, run))


def recorded_priority(runs: list[RunRecord]) -> int | None:
    """The job's priority as its last run that knew it recorded it (None: none did); a
    run decided before its job file was read (a cancel, a dead owner) records none."""
    for record in reversed(runs):
        value = record.details.get("priority")
        if isinstance(value, int):
            return value
    return None


def attempts_used(runs: list[RunRecord]) -> int:
    """Attempts counted against max_attempts: runs since the last reset that used one."""
    used = 0
    for record in runs:
        if record.outcome == RESET:
            used = 0
        elif record.outcome not in NOT_AN_ATTEMPT:
            used += 1
    return used


def spool_io_requeues(runs: list[RunRecord]) -> int:
    """How many of the last runs in a row were requeued for spool I/O trouble (``SPOOL_IO``)
    without using an attempt: the free requeues a job has had since it last ran for real."""
    count = 0
    for record in reversed(runs):
        if record.outcome != REQUEUE or (record.error or {}).get("kind") != SPOOL_IO:
            break
        count += 1
    return count


def next_run_number(job_dir: Path) -> int:
    numbers = run_numbers(job_dir)
    return (numbers[-1] + 1) if numbers else 1


def decide(job_dir: Path, record: RunRecord, mode: int | None = None, *, encoded: bytes | None = None) -> bool:
    """Write the run's outcome if nobody has; True if this call decided it.

    The record is no more readable than the job (job_file_modes.private_file_mode, or
    ``mode`` when the caller knows it): its error message quotes what the render printed.
    ``encoded``: ``record.to_json()``, if the caller has it already.
    FileNotFoundError propagates: the job directory moved, so it is not ours any more.
    """
    if mode is None:
        mode = private_file_mode(job_dir)
    data = record.to_json() if encoded is None else encoded
    if create_exclusive(run_path(job_dir, record.run), data, mode=mode):
        return True
    # Taken: by another decider, or by this very record, whose link went through although
    # it reported an error (ENOTCONN below a GlusterFS quorum) before this call was tried
    # again (executor._spool_write). The bytes say which: a record names its host, pid,
    # token and end time, so no other decision has the same.
    try:
        return run_path(job_dir, record.run).read_bytes() == data
    except OSError:
        return False


def as_read_back(encoded: bytes) -> RunRecord:
    """The record read_runs reads from a run file holding ``encoded`` (run files are
    written once and never changed): its writer need not read its own file again."""
    return RunRecord.from_dict(json.loads(encoded))
