"""Claiming a job with one atomic rename: from incoming/ (the file into a new running/
directory) or from retry/ (the whole job directory into running/).

What can be claimed, and in which order, is found by :mod:`spoolrender.scan` (its
:class:`~spoolrender.scan.SpoolScanner` and :class:`~spoolrender.candidates.Candidate` are
importable from here too, as they always were).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import shutil
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from spoolrender import defaults
from spoolrender.candidates import Candidate, ScanResult
from spoolrender.clock import Clock
from spoolrender.durable import write_atomic
from spoolrender.errors import ClaimBlocked, ClaimLost
from spoolrender.failpoints import crash_point
from spoolrender.heartbeat import ActiveJob, HeartbeatWriter, JobLock, acquire_job_lock
from spoolrender.layout import SpoolLayout, new_token, running_name
from spoolrender.queues import QUEUE_FILENAME
from spoolrender.records import next_run_number
from spoolrender.renderers.base import CancelToken
from spoolrender.scan import SpoolScanner
from spoolrender.seal import JobFileState
from spoolrender.spool_io import is_spool_io

__all__ = ["Candidate", "Claim", "ScanResult", "SpoolScanner", "claim"]

log = logging.getLogger(__name__)


@dataclass
class Claim:
    """A job this runner owns: its running/ directory, lock, heartbeat and cancel token."""

    job_dir: Path
    job_id: str
    uid: str
    token: str
    run: int
    source_name: str  # the file name the job's default id derives from
    started: float
    cancel: CancelToken
    lock: JobLock | None
    keep_scratch: bool = False  # a decided publish could not be carried out: recovery needs it
    job_file: JobFileState | None = None  # what this run validated (spoolrender.seal)
    sealed: bool = False  # an earlier run was decided: the job file may not change any more
    decided: bool = False  # this run's record is written: a later spool error must not requeue it
    # What this run has learnt of the job (priority, queue, seal...): the details of its
    # record, also when a spool error ends the run before it is decided (executor.execute).
    details: dict[str, Any] = field(default_factory=dict)
    # Free bytes of the output and spool filesystems (by st_dev) when this run started: did
    # a full disk stop it, or did it fill the disk itself (spool_io.filled_by_run)?
    room_at_start: dict[int, int] = field(default_factory=dict)

    @property
    def key(self) -> str:
        return self.job_dir.name

    def release(self) -> None:
        if self.lock is not None:
            with contextlib.suppress(OSError):
                self.lock.release()
            self.lock = None


def claim(layout: SpoolLayout, candidate: Candidate, heartbeat: HeartbeatWriter, clock: Clock) -> Claim | None:
    """Try to take ``candidate``; None if another runner was faster (a normal outcome).

    A spool I/O error (:func:`spoolrender.spool_io.is_spool_io`: a full disk...) propagates,
    with nothing of the claim left behind: the caller backs off.
    """
    if candidate.source == "incoming":
        return _claim_incoming(layout, candidate, heartbeat, clock)
    return _claim_retry(layout, candidate, heartbeat, clock)


def _claim_incoming(
    layout: SpoolLayout, candidate: Candidate, heartbeat: HeartbeatWriter, clock: Clock
) -> Claim | None:
    token = new_token()
    uid = token  # the first claim names the job for the rest of its life
    job_dir = layout.running / running_name(candidate.job_id, uid, token)
    cancel = CancelToken()
    # The directory, its lock and a first heartbeat exist *before* the job file is moved
    # in, so there is no moment at which running/ holds a job that no live lock covers.
    try:
        os.mkdir(job_dir)
    except OSError as exc:
        if is_spool_io(exc):
            raise  # the filesystem's trouble, not this job's: the runner backs off
        log.warning("could not claim %s: %s", candidate.name, exc)
        return None
    lock = None
    try:
        lock = acquire_job_lock(job_dir, token)
        started = clock.wall()
        heartbeat.add(_active_job(job_dir, token, 1, started, cancel))
        if candidate.queue_dir is not None:
            # The job's queue came from its drop directory: kept for its retries. Written
            # before the claim, into our own directory, so a failure here loses nothing.
            write_atomic(job_dir / QUEUE_FILENAME, candidate.queue_dir.encode(), durable=False)
        crash_point("claim-before-rename")
        # THE claim: rename is atomic, so of several runners exactly one moves the file;
        # the others get ENOENT. No fsync: until the job is decided, a claim lost in a
        # power cut only means the job is found in incoming/ again, or recovered.
        os.rename(layout.incoming / candidate.name, job_dir / defaults.JOB_FILENAME)
        crash_point("claim-after-rename")
    except (FileNotFoundError, ClaimLost, OSError) as exc:
        heartbeat.remove(token)
        if lock is not None:
            lock.release()
        shutil.rmtree(job_dir, ignore_errors=True)
        if isinstance(exc, FileNotFoundError | ClaimLost):
            # ENOENT for the job file: another runner was faster. ENOENT for our own
            # directory: we stalled past the lease and recovery cleared the claim; the
            # job file is still in incoming/ (or was re-queued), never lost.
            log.debug("lost the race for %s to another runner", candidate.name)
            return None
        if isinstance(exc, OSError) and exc.errno in (errno.EACCES, errno.EPERM, errno.EBUSY, errno.EXDEV):
            # Moving it will fail the same way next time (a directory of mode 555 cannot be
            # renamed: its ".." entry would change): let the scanner back off.
            hint = " (a directory must be writable to be moved)" if stat.S_ISDIR(_lmode(candidate, layout)) else ""
            raise ClaimBlocked(f"{exc.strerror}{hint}") from exc
        if is_spool_io(exc):
            raise
        log.warning("could not claim %s: %s", candidate.name, exc)
        return None
    source = candidate.name.rpartition("/")[2]  # the default id derives from the file's own name
    return Claim(job_dir, candidate.job_id, uid, token, 1, source, started, cancel, lock)


def _lmode(candidate: Candidate, layout: SpoolLayout) -> int:
    try:
        return os.lstat(layout.incoming / candidate.name).st_mode
    except OSError:
        return 0


def _claim_retry(layout: SpoolLayout, candidate: Candidate, heartbeat: HeartbeatWriter, clock: Clock) -> Claim | None:
    assert candidate.uid is not None
    token = new_token()
    job_dir = layout.running / running_name(candidate.job_id, candidate.uid, token)
    cancel = CancelToken()
    try:
        # THE claim of a retry: the whole job directory moves in one atomic rename. Its
        # old heartbeat (if any) carries an older token than the new name, so nobody
        # takes the moment before our lock and heartbeat exist for a dead owner.
        os.rename(layout.retry / candidate.name, job_dir)
    except FileNotFoundError:
        log.debug("lost the race for retry %s to another runner", candidate.name)
        return None
    except OSError as exc:
        if is_spool_io(exc):
            raise
        log.warning("could not claim retry %s: %s", candidate.name, exc)
        return None
    crash_point("retry-claim-after-rename")
    try:
        # Lock, records and heartbeat only ever *inside* the directory we renamed: if we
        # stalled here past the lease, another runner has moved the job on, and ENOENT
        # says so; nothing may recreate the directory as an empty phantom.
        lock = acquire_job_lock(job_dir, token)
        started = clock.wall()
        run = next_run_number(job_dir)
    except (ClaimLost, FileNotFoundError):
        log.info("retry %s was taken over by another runner while this one stalled claiming it", candidate.name)
        return None
    except OSError as exc:
        if is_spool_io(exc):
            # No lock file could be made: give the job back to retry/ as it was (its name
            # there is free again), rather than leave it in running/ unlocked and silent,
            # where a lease later would count an attempt for it.
            with contextlib.suppress(OSError):
                os.rename(job_dir, layout.retry / candidate.name)
        raise
    heartbeat.add(_active_job(job_dir, token, run, started, cancel))
    # The job's default id came from its original file name; the retry entry's name must
    # not replace it, so the id stands in for the file name from now on.
    filename = f"{candidate.job_id}.yaml"
    return Claim(job_dir, candidate.job_id, candidate.uid, token, run, filename, started, cancel, lock)


def _active_job(job_dir: Path, token: str, run: int, started: float, cancel: CancelToken) -> ActiveJob:
    return ActiveJob(
        job_dir, token, run, started, on_lost=lambda: cancel.cancel("lost"), on_cancel=lambda: cancel.cancel("user")
    )
