"""Claiming a job with one atomic rename: from incoming/ (the file into a new running/
directory) or from retry/ (the whole job directory into running/).

What can be claimed, and in which order, is found by :mod:`spoolrender.intake.scan` (its
:class:`~spoolrender.intake.scan.SpoolScanner` and :class:`~spoolrender.intake.candidates.Candidate` are
importable from here too, as they always were).
"""

from __future__ import annotations

import contextlib
import enum
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
from spoolrender.config.queues import QUEUE_FILENAME
from spoolrender.core.failpoints import crash_point
from spoolrender.core.vocabulary import CancelReason, JobState
from spoolrender.errors import ClaimBlocked, ClaimLost, JobInvalid
from spoolrender.intake.candidates import Candidate, ScanResult
from spoolrender.intake.owncopy import ensure_copy, job_dir_mode, remove_stale_temps, submitted_owner, write_copy
from spoolrender.intake.scan import SpoolScanner
from spoolrender.intake.seal import JobFileState
from spoolrender.jobfile.reading import file_kind, read_job_at
from spoolrender.renderers.base import CancelToken
from spoolrender.spool.clock import Clock
from spoolrender.spool.durable import write_atomic
from spoolrender.spool.heartbeat import ActiveJob, HeartbeatWriter, JobLock, acquire_job_lock
from spoolrender.spool.held_dirs import HeldSpoolDirs
from spoolrender.spool.io_trouble import is_spool_io
from spoolrender.spool.job_file_modes import copy_mode, private_file_mode, private_mode_of_copy
from spoolrender.spool.layout import SpoolLayout, new_token, running_name
from spoolrender.spool.netcache import Attributes
from spoolrender.spool.queue_dirs import entry_dir
from spoolrender.spool.records import next_run_number
from spoolrender.spool.spooldir import DirHandle, SpoolPathRefused

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
    job_file: JobFileState | None = None  # what this run validated (spoolrender.intake.seal)
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
    # Made by this claim from incoming/: its directory holds nothing the claim did not put
    # there (only the runner writes in it), so the run looks for no chunk.json (a chunk
    # entry is made whole in retry/) and takes the queue file's text from ``queue_dir``.
    fresh: bool = False
    queue_dir: str | None = None  # fresh: the drop directory the claim wrote as the queue file

    @property
    def key(self) -> str:
        return self.job_dir.name

    def file_mode(self) -> int:
        """The mode of this run's log and record (job_file_modes.private_file_mode), read
        once per run: the copy's mode is fixed once it is written, before the run starts."""
        if self._file_mode is None:
            self._file_mode = private_file_mode(self.job_dir)
        return self._file_mode

    def preset_file_mode(self, mode: int) -> None:
        """:meth:`file_mode` known without a look: from the copy this claim wrote."""
        self._file_mode = mode

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

    Either way the job renders from a private copy (spoolrender.intake.owncopy) of the bytes read
    once at the claim (``max_job_bytes``: the cap; ``uncached``: past a network
    filesystem's caches). A spool I/O error (:func:`spoolrender.spool.io_trouble.is_spool_io`: a
    full disk...) propagates, the caller backs off: the job file is back in incoming/, or
    (when it cannot go back) in a claim directory holding nothing else, with its lock
    released, that recovery gives back. Whatever the error, nothing is left that recovery
    would run besides the file given back (tests/unit/test_claim_errors.py).
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
            # directory only as queue_dirs honours it): a queue directory swapped for a link
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
        heartbeat.add(_active_job(job_dir, token, 1, started, cancel), lock)
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
    except Exception as exc:
        if not _claim_stopped(exc, candidate, heartbeat, job_dir, job, source, base, token, lock, moved):
            raise
        return None
    # The default id derives from the file's own name.
    claimed = Claim(
        job_dir, candidate.job_id, token, token, 1, base, started, cancel, lock,
        refusal=refusal, submitted_owner=owner, copied=copied, fresh=True, queue_dir=candidate.queue_dir,
    )  # fmt: skip
    if copied is not None and attrs is not None:
        claimed.preset_file_mode(private_mode_of_copy(copy_mode(attrs.mode)))  # the copy just written
    return claimed


def _claim_stopped(
    exc: Exception,
    candidate: Candidate,
    heartbeat: HeartbeatWriter,
    job_dir: Path,
    job: DirHandle,
    source: DirHandle,
    base: str,
    token: str,
    lock: JobLock | None,
    moved: bool,
) -> bool:
    """Undo the claim that ``exc`` stopped (``moved``: after its rename). True: a claim's
    normal end (a lost race, a file given back to be scanned again...), logged, no claim;
    False: ``exc`` goes on up. Raises ClaimBlocked when the entry will not move next time
    either."""
    # Whatever stopped the claim (a lost race, ENOSPC, EIO, anything), what is on disk
    # decides what to undo, never what this code believes it did: a rename or link that
    # reported an error may have happened all the same (a GlusterFS volume below its
    # quorum keeps what one brick did: docs/reliability.md "A full brick"). Undone
    # under our lock and heartbeat, so that no recoverer takes the claim for dead and
    # gives the file back too while we do.
    back = _give_back_claimed(job, source, base)
    heartbeat.remove(token)
    if lock is not None:
        lock.release()
    if back is _GivenBack.NO:
        # The submitter's file is in our directory and cannot go back (nor be found
        # back already): the claim is left to recovery (its lock released), which gives
        # it back (recovery._give_back). Never deleted.
        if is_spool_io(exc) or not isinstance(exc, OSError | ClaimLost | _NotScanned):
            return False
        log.warning("could not claim %s: %s; left to recovery to give back", candidate.name, exc)
        return True
    if back is _GivenBack.GONE and moved and not isinstance(exc, _NotScanned):
        # Gone from our directory: we stalled past the lease and recovery gave it back
        # to incoming/ (recovery._give_back). The claim is lost, nothing to undo.
        log.info("lost the claim of %s: recovery took it back while this runner stalled", candidate.name)
        return True
    shutil.rmtree(job_dir, ignore_errors=True)  # what is left of it, no job: recovery's if it stays
    if isinstance(exc, _NotScanned):
        log.info("not claiming incoming/%s: %s; it went back to incoming/ to be scanned again", candidate.name, exc)
        return True
    if isinstance(exc, FileNotFoundError | ClaimLost):
        # ENOENT for the job file: another runner was faster. ENOENT for our own
        # directory: we stalled past the lease and recovery cleared the claim; the
        # job file is still in incoming/ (or was re-queued), never lost.
        log.debug("lost the race for %s to another runner", candidate.name)
        return True
    if isinstance(exc, OSError) and exc.errno in (errno.EACCES, errno.EPERM, errno.EBUSY, errno.EXDEV):
        # Moving it will fail the same way next time (a directory of mode 555 cannot be
        # renamed: its ".." entry would change): let the scanner back off.
        st = source.try_stat(base)
        hint = " (a directory must be writable to be moved or removed)" if st and stat.S_ISDIR(st.st_mode) else ""
        raise ClaimBlocked(f"{exc.strerror}{hint}") from exc
    if is_spool_io(exc) or not isinstance(exc, OSError):
        return False
    log.warning("could not claim %s: %s", candidate.name, exc)
    return True


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


class _GivenBack(enum.Enum):
    """Where a stopped claim left the job file (_give_back_claimed)."""

    BACK = "back"  # put back now: in incoming/ under its name
    GONE = "gone"  # not in our directory: never moved in, put back before, or recovery's now
    NO = "no"  # still in our directory: recovery gives it back


def _give_back_claimed(job: DirHandle, source: DirHandle, base: str) -> _GivenBack:
    """Undo a claim that stopped: the job file goes back to where it was, exactly once.

    Our copy and its temporary files go first: a directory left behind then holds the
    submitted file alone (recovery gives it back) or nothing (recovery removes it), never a
    copy whose file went back to incoming/ (recovery would run it as well). Then the file
    goes back, never over a file dropped there since. A put back that reported an error may
    have linked the name all the same (RENAME_NOREPLACE's fallback, below a GlusterFS
    quorum): if incoming/ names our very inode, it is back, and our name of it goes.
    """
    try:
        held = job.try_stat(defaults.SUBMITTED_FILENAME)
        if held is None:
            return _GivenBack.GONE
        job.unlink_if_present(defaults.JOB_FILENAME)
        remove_stale_temps(job)
    except OSError:
        return _GivenBack.NO  # cannot tell, or cannot remove the copy: recovery decides
    try:
        job.rename(defaults.SUBMITTED_FILENAME, source, base, replace=False)
        return _GivenBack.BACK
    except FileNotFoundError:
        return _GivenBack.GONE  # recovery gave it back meanwhile
    except OSError:
        pass
    try:
        there = source.try_stat(base)
        if there is None or not os.path.samestat(there, held):
            return _GivenBack.NO
        # Two names of one file: incoming/'s is the job's, ours goes (unlink works on a
        # full disk; if it fails, recovery finds the file back and drops ours).
        job.unlink(defaults.SUBMITTED_FILENAME)
    except FileNotFoundError:
        return _GivenBack.BACK
    except OSError:
        return _GivenBack.NO
    return _GivenBack.BACK


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
    lock = None
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
        if lock is not None:
            with contextlib.suppress(OSError):
                lock.release()
        log.info("retry %s was taken over by another runner while this one stalled claiming it", candidate.name)
        return None
    except OSError as exc:
        if lock is not None:
            with contextlib.suppress(OSError):
                lock.release()
        # No lock file or copy could be made (a full disk, EIO, anything): give the job back
        # to retry/ as it was (its name there is free again; a half-made copy is redone by
        # the next claim), rather than leave it in running/ unlocked and silent, where a
        # lease later would count an attempt for it. If even that fails, recovery decides it.
        with contextlib.suppress(OSError):
            os.rename(job_dir, layout.retry / candidate.name)
        if is_spool_io(exc):
            raise
        log.warning("could not claim retry %s: %s; it went back to retry/", candidate.name, exc)
        return None
    heartbeat.add(_active_job(job_dir, token, run, started, cancel), lock)
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
