"""Claiming a job with one atomic rename: from incoming/ (the file into a new running/
directory) or from retry/ (the whole job directory into running/).

What can be claimed, and in which order, is found by :mod:`spoolrender.scan` (its
:class:`~spoolrender.scan.SpoolScanner` and :class:`~spoolrender.candidates.Candidate` are
importable from here too, as they always were).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
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
from spoolrender.errors import ClaimBlocked, ClaimLost, JobInvalid
from spoolrender.failpoints import crash_point
from spoolrender.heartbeat import ActiveJob, HeartbeatWriter, JobLock, acquire_job_lock
from spoolrender.held_dirs import HeldSpoolDirs
from spoolrender.job_file_modes import private_file_mode
from spoolrender.jobfile.reading import file_kind, read_job_at
from spoolrender.layout import SpoolLayout, new_token, running_name
from spoolrender.netcache import Attributes
from spoolrender.owncopy import ensure_copy, job_dir_mode, submitted_owner, write_copy
from spoolrender.queues import QUEUE_FILENAME
from spoolrender.records import next_run_number
from spoolrender.renderers.base import CancelToken
from spoolrender.scan import SpoolScanner
from spoolrender.seal import JobFileState
from spoolrender.spool_io import is_spool_io
from spoolrender.spooldir import DirHandle, SpoolPathRefused, entry_dir
from spoolrender.vocabulary import CancelReason, JobState

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
    refusal: str | None = None  # why the claimed file cannot be a job (a FIFO, too big...): it fails
    job_file: JobFileState | None = None  # what this run validated (spoolrender.seal)
    # The submitted file's (owner uid, mode) at the claim: may a later append to it be the
    # submitter's own upload going on (owncopy.others_may_write)?
    submitted_owner: tuple[int, int] | None = None
    sealed: bool = False  # an earlier run was decided: its seal stands, and no upload can go on
    decided: bool = False  # this run's record is written: a later spool error must not requeue it
    # What this run has learnt of the job (priority, queue, seal...): the details of its
    # record, also when a spool error ends the run before it is decided (executor.execute).
    details: dict[str, Any] = field(default_factory=dict)
    # Free bytes of the output and spool filesystems (by st_dev) when this run started: did
    # a full disk stop it, or did it fill the disk itself (spool_io.filled_by_run)?
    room_at_start: dict[int, int] = field(default_factory=dict)
    _file_mode: int | None = None  # file_mode(), once known
    chunk_entry: bool | None = None  # a chunk of a split job (its chunk.json), once read
    # The bytes this claim wrote as job.yaml (the copy is read-only and the directory the
    # runner's alone): the run parses them instead of reading its own copy back.
    copied: bytes | None = None

    @property
    def key(self) -> str:
        return self.job_dir.name

    def file_mode(self) -> int:
        """The mode of this run's log and record (job_file_modes.private_file_mode), read
        once per run: the copy's mode is fixed once it is written, before the run starts."""
        if self._file_mode is None:
            self._file_mode = private_file_mode(self.job_dir)
        return self._file_mode

    def release(self) -> None:
        if self.lock is not None:
            with contextlib.suppress(OSError):
                self.lock.release()
            self.lock = None


def claim(
    layout: SpoolLayout,
    candidate: Candidate,
    heartbeat: HeartbeatWriter,
    clock: Clock,
    *,
    max_job_bytes: int = defaults.MAX_JOB_BYTES,
    uncached: bool = False,
    held: HeldSpoolDirs | None = None,
) -> Claim | None:
    """Try to take ``candidate``; None if another runner was faster (a normal outcome), or
    if the file claimed is not the one the scan decided on (it went back to incoming/).

    Either way the job renders from a private copy (spoolrender.owncopy) of the bytes read
    once at the claim (``max_job_bytes``: the cap; ``uncached``: past a network
    filesystem's caches). A spool I/O error (:func:`spoolrender.spool_io.is_spool_io`: a
    full disk...) propagates, with nothing of the claim left behind: the caller backs off.
    ``held``: the runner's incoming/ and running/, held open (held_dirs.HeldDir), else
    both are opened for this claim.
    """
    if candidate.source == JobState.INCOMING:
        return _claim_incoming(layout, candidate, heartbeat, clock, max_job_bytes, uncached, held)
    return _claim_retry(layout, candidate, heartbeat, clock, max_job_bytes, uncached)


def _claim_incoming(
    layout: SpoolLayout,
    candidate: Candidate,
    heartbeat: HeartbeatWriter,
    clock: Clock,
    max_bytes: int,
    uncached: bool,
    dirs: HeldSpoolDirs | None,
) -> Claim | None:
    token = new_token()
    job_dir = layout.running / running_name(candidate.job_id, token, token)  # the first claim names the job
    with contextlib.ExitStack() as held:
        try:
            incoming = dirs.incoming.get() if dirs else held.enter_context(DirHandle.open(layout.incoming))
            # The directory the file is in, held open, never through a symlink (and a queue
            # directory only as spooldir honours it): a queue directory swapped for a link
            # after the listing cannot send the rename elsewhere.
            source, base = held.enter_context(entry_dir(incoming, candidate.name))
        except (SpoolPathRefused, FileNotFoundError) as exc:
            log.info("not claiming incoming/%s: %s", candidate.name, exc)
            return None
        running = dirs.running.get() if dirs else held.enter_context(DirHandle.open(layout.running))
        # The directory, its lock and a first heartbeat exist *before* the job file is moved
        # in, so there is no moment at which running/ holds a job that no live lock covers.
        try:
            job = held.enter_context(running.mkdir(job_dir.name, job_dir_mode(os.fstat(running.fd))))
        except OSError as exc:
            if os.path.lexists(job_dir):  # made, but not protected: it goes
                shutil.rmtree(job_dir, ignore_errors=True)
            if is_spool_io(exc):
                raise  # the filesystem's trouble, not this job's: the runner backs off
            log.warning("could not claim %s: %s", candidate.name, exc)
            return None
        return _move_in(candidate, heartbeat, clock, job_dir, job, running, source, base, token, max_bytes, uncached)
    raise AssertionError("unreachable")  # pragma: no cover - ExitStack swallows nothing


def _move_in(
    candidate: Candidate,
    heartbeat: HeartbeatWriter,
    clock: Clock,
    job_dir: Path,
    job: DirHandle,
    running: DirHandle,
    source: DirHandle,
    base: str,
    token: str,
    max_bytes: int,
    uncached: bool,
) -> Claim | None:
    """The claim proper, into the prepared ``job_dir``: the rename, the one read, the copy."""
    cancel = CancelToken()
    lock = None
    moved = False
    try:
        lock = acquire_job_lock(job_dir, token)
        started = clock.wall()
        heartbeat.add(_active_job(job_dir, token, 1, started, cancel))
        if candidate.queue_dir is not None:
            # The job's queue came from its drop directory: kept for its retries. Written
            # before the claim, into our own directory, so a failure here loses nothing.
            write_atomic(job_dir / QUEUE_FILENAME, candidate.queue_dir.encode(), durable=False)
        crash_point("claim-before-rename")
        entry = source.stat(base)  # never following it; ENOENT: another runner was faster
        if not stat.S_ISREG(entry.st_mode):
            # No job file: it fails with a record that says what it was, and its inode is
            # never moved into the runner's tree (a member's directory in failed/ would let
            # them write inside a runner-owned state directory).
            return _refuse_in_place(candidate, job_dir, source, base, entry, token, started, cancel, lock)
        # THE claim: rename is atomic, so of several runners exactly one moves the file;
        # the others get ENOENT. From the held source directory (the listed name is not
        # resolved again from the root); into our directory by its name in running/
        # (only the runner writes there), so that once recovery has parked a stalled
        # claim's directory the rename fails with ENOENT instead of landing in it. No
        # fsync: until the job is decided, a claim lost in a power cut only means the
        # job is found in incoming/ again, or recovered.
        os.rename(base, f"{job_dir.name}/{defaults.SUBMITTED_FILENAME}", src_dir_fd=source.fd, dst_dir_fd=running.fd)
        moved = True
        crash_point("claim-after-rename")
        refusal, attrs, copied = _copy_claimed(candidate, job, source, base, max_bytes, uncached)
        # The owner and mode of the inode just read (its fstat), not a second lstat by name:
        # the file was renamed into our directory, which only the runner can change.
        owner = submitted_owner(job_dir) if attrs is None else (attrs.uid, stat.S_IMODE(attrs.mode))
    except (FileNotFoundError, ClaimLost, _NotScanned, OSError) as exc:
        heartbeat.remove(token)
        if lock is not None:
            lock.release()
        if moved and not isinstance(exc, _NotScanned) and not _put_back(job, source, base):
            if job.try_stat(defaults.SUBMITTED_FILENAME) is None:
                # Gone from our directory: we stalled past the lease and recovery gave it
                # back to incoming/ (recovery._give_back). The claim is lost, nothing to undo.
                log.info("lost the claim of %s: recovery took it back while this runner stalled", candidate.name)
                return None
            # The submitter's file is in our directory and cannot go back: the claim is
            # left to recovery (its lock released), which gives it back. Never deleted.
            raise
        shutil.rmtree(job_dir, ignore_errors=True)
        if isinstance(exc, _NotScanned):
            log.info("not claiming incoming/%s: %s; it went back to incoming/ to be scanned again", candidate.name, exc)
            return None
        if isinstance(exc, FileNotFoundError | ClaimLost):
            # ENOENT for the job file: another runner was faster. ENOENT for our own
            # directory: we stalled past the lease and recovery cleared the claim; the
            # job file is still in incoming/ (or was re-queued), never lost.
            log.debug("lost the race for %s to another runner", candidate.name)
            return None
        if isinstance(exc, OSError) and exc.errno in (errno.EACCES, errno.EPERM, errno.EBUSY, errno.EXDEV):
            # Moving it will fail the same way next time (a directory of mode 555 cannot be
            # renamed: its ".." entry would change): let the scanner back off.
            st = source.try_stat(base)
            hint = " (a directory must be writable to be moved or removed)" if st and stat.S_ISDIR(st.st_mode) else ""
            raise ClaimBlocked(f"{exc.strerror}{hint}") from exc
        if is_spool_io(exc):
            raise
        log.warning("could not claim %s: %s", candidate.name, exc)
        return None
    # The default id derives from the file's own name.
    return Claim(
        job_dir, candidate.job_id, token, token, 1, base, started, cancel, lock,
        refusal=refusal, submitted_owner=owner, copied=copied,
    )  # fmt: skip


def _refuse_in_place(
    candidate: Candidate,
    job_dir: Path,
    source: DirHandle,
    base: str,
    st: os.stat_result,
    token: str,
    started: float,
    cancel: CancelToken,
    lock: JobLock | None,
) -> Claim:
    """The claim of a non-regular entry (symlink, FIFO, socket, directory): removed from
    incoming/ (unlinkat; a directory by an iterative, descriptor-relative removal), and
    claimed without a file so that it fails with a record naming what it was. Raises
    OSError when it cannot be removed (EACCES, EPERM: the scanner then reports it)."""
    kind = file_kind(st.st_mode)
    source.rmtree(base)
    log.info("incoming/%s is a %s, not a job file: removed, failing it with that reason", candidate.name, kind)
    refusal = f"job file: expected a regular file, got a {kind}"
    return Claim(job_dir, candidate.job_id, token, token, 1, base, started, cancel, lock, refusal=refusal)


def _put_back(job: DirHandle, source: DirHandle, base: str) -> bool:
    """Return a claimed file to where it was (never over a file dropped there since)."""
    try:
        job.rename(defaults.SUBMITTED_FILENAME, source, base, replace=False)
    except OSError:
        return False
    return True


class _NotScanned(Exception):
    """The claimed file is not the one the scan read (replaced meanwhile): it was put back."""


def _copy_claimed(
    candidate: Candidate, job: DirHandle, source: DirHandle, base: str, max_bytes: int, uncached: bool
) -> tuple[str | None, Attributes | None, bytes | None]:
    """Read the claimed file once, check it is the scan's, write the private copy.

    Returns why the job cannot run (no regular file, too big: it fails with that reason,
    its file kept as evidence), or None; the attributes of the file read (None if it
    could not be); and the bytes of the copy written (None: none was). Raises _NotScanned when the file is another than
    the scan parsed: its id, queue and priority were the other file's, so nothing of them
    may be used for it; it goes back to incoming/ under its name, and is scanned afresh.
    """
    try:
        data, attrs = read_job_at(job.fd, defaults.SUBMITTED_FILENAME, max_bytes, uncached=uncached)
        refusal = None
    except JobInvalid as exc:
        data, attrs, refusal = b"", None, "; ".join(exc.problems)
    if candidate.sha256 is not None and (
        attrs is None or attrs.inode != candidate.inode or hashlib.sha256(data).hexdigest() != candidate.sha256
    ):
        try:
            # NOREPLACE: a file dropped under that name meanwhile is never overwritten.
            job.rename(defaults.SUBMITTED_FILENAME, source, base, replace=False)
        except FileExistsError:
            # Its name was taken again: it cannot go back, so it fails (kept as evidence),
            # and nothing of the scanned job (its id) is reserved for it.
            return (
                (
                    "the job file was replaced between the scan and the claim, and its name in "
                    "incoming/ was taken again; submit it again"
                ),
                attrs,
                None,
            )
        raise _NotScanned("the file was replaced after the scan read it")
    if attrs is not None and refusal is None:
        write_copy(job, data, attrs.mode)
        return None, attrs, data
    return refusal, attrs, None


def _claim_retry(
    layout: SpoolLayout, candidate: Candidate, heartbeat: HeartbeatWriter, clock: Clock, max_bytes: int, uncached: bool
) -> Claim | None:
    assert candidate.uid is not None
    token = new_token()
    job_dir = layout.running / running_name(candidate.job_id, candidate.uid, token)
    cancel = CancelToken()
    try:
        # THE claim of a retry: the whole job directory moves in one atomic rename. Its
        # old heartbeats (if any: a recovered claim's are left in it) are named by older
        # tokens than the new name's, so nobody reads them as ours, nor takes the moment
        # before our lock and heartbeat exist for a dead owner; ours never touches theirs.
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
        # Older job directories hold the submitter's own file, a discarded run none: the
        # copy is made now, under our lock (the seal still refuses a file that changed).
        refusal = ensure_copy(job_dir, max_bytes, uncached=uncached)
        owner = submitted_owner(job_dir)
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
    return Claim(
        job_dir, candidate.job_id, candidate.uid, token, run, filename, started, cancel, lock,
        refusal=refusal, submitted_owner=owner,
    )  # fmt: skip


def _active_job(job_dir: Path, token: str, run: int, started: float, cancel: CancelToken) -> ActiveJob:
    return ActiveJob(
        job_dir,
        token,
        run,
        started,
        on_lost=lambda: cancel.cancel(CancelReason.LOST),
        on_cancel=lambda: cancel.cancel(CancelReason.USER),
    )
