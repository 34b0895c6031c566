"""The runner's own copy of every claimed job: what it renders from, whatever the submitter does.

A submitter owns the inode of the file they dropped, also after the claim renamed it into
``running/<job>/``: they can rewrite it, touch it, or (in a group-writable directory)
rename it aside and back at any moment. So the claim reads it exactly once, through the
descriptor of the renamed entry, and writes that byte string into a runner-owned,
read-only file, ``job.yaml``, in a job directory only the runner can write. From then on
everything derives from the copy: the id and its reservation, validation, the seal, chunk
plans, ``{job_file}``, the render-cache key, hooks, ``show`` and serve. The submitter's
file stays beside it as ``submitted.yaml``: evidence, and the one thing the decision looks
at to catch a remote upload that was still being appended to when it was claimed
(:func:`continued_append`). Nothing else done to it changes a render: only its owner's
continued append, before the first decision, to a file no one else may write, voids the
run and is copied again at the next claim (at most defaults.MAX_UPLOAD_DISCARDS times).

Invariant for recovery: a job directory holding ``submitted.yaml`` and no ``job.yaml`` has
no committed copy yet (the copy is written under a temporary name and renamed into place,
so ``job.yaml`` is complete whenever it exists); its claim is redone from the submitted file.
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
from pathlib import Path

from spoolrender import defaults
from spoolrender.core.failpoints import crash_point
from spoolrender.errors import JobInvalid
from spoolrender.intake.seal import JobFileState
from spoolrender.intake.upload_writers import Writer, probe_lease
from spoolrender.jobfile.reading import read_job_at, read_open_job
from spoolrender.spool.durable import sync_fd
from spoolrender.spool.job_file_modes import copy_mode, private_file_mode
from spoolrender.spool.layout import new_token
from spoolrender.spool.netcache import Attributes, fstat_fresh
from spoolrender.spool.spooldir import DirHandle

log = logging.getLogger(__name__)

# Read-only: not even the runner rewrites a copy. Readable by its owner (the runner), and by
# group and others only as far as the submitted file was (job_file_modes.copy_mode): a 0600
# job stays private.
# rwxr-xr-x: only the runner may create, rename or delete entries in a job directory. With
# umask 002 mkdir would make it group-writable, and a group member could swap job.yaml.
JOB_DIR_MODE = 0o755
_COPY_TEMP_PREFIX = ".job.yaml."


def job_dir_mode(parent: os.stat_result) -> int:
    """The mode of a job directory made in ``parent``: runner-only, plus the parent's setgid
    bit (mkdir would have inherited it: files in it keep the spool's group)."""
    return JOB_DIR_MODE | (parent.st_mode & stat.S_ISGID)


def holds_job(job_dir: Path) -> bool:
    """Whether a job directory holds its job: the copy, or the submitted file before it."""
    return any(os.path.lexists(job_dir / n) for n in (defaults.JOB_FILENAME, defaults.SUBMITTED_FILENAME))


def is_private_copy(st: os.stat_result) -> bool:
    """Whether ``st`` (of a ``job.yaml``, not followed) is a copy this runner's user wrote:
    a job directory of 8329ac5..fe27397 holds the submitter's own file under that name."""
    mode = stat.S_IMODE(st.st_mode)
    return stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid() and mode == copy_mode(mode)


def write_copy(job: DirHandle, data: bytes, submitted_mode: int) -> None:
    """Write ``data`` as ``job.yaml`` in the job directory ``job``: complete, read-only,
    no more readable than the submitted file of mode ``submitted_mode`` (copy_mode), and
    (with fsync on) durable before the caller decides anything from it."""
    temp = f"{_COPY_TEMP_PREFIX}{new_token()}"
    mode = copy_mode(submitted_mode)
    # O_EXCL|O_NOFOLLOW: a name nobody else can have made (the directory is ours alone).
    fd = job.open_file(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        os.fchmod(fd, mode)  # the umask must not decide the copy's mode
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        sync_fd(fd)  # the copy's data before its name: a power cut never leaves a short copy
    finally:
        os.close(fd)
    crash_point("copy-before-commit")
    # Into place in one rename: job.yaml is complete whenever it exists (recovery relies on
    # it). No directory fsync here: every decision is a run record created in this same
    # directory and fsynced with it (records.decide), which makes this name durable before
    # any decision is; a power cut before that leaves a claim without its copy, which
    # recovery re-queues (a job directory holding only submitted.yaml).
    job.rename(temp, job, defaults.JOB_FILENAME)


def remove_stale_temps(job: DirHandle) -> None:
    """Copies a killed claim left half-written under their temporary names."""
    for name in job.names():
        if name.startswith(_COPY_TEMP_PREFIX):
            job.unlink_if_present(name)


def ensure_copy(job_dir: Path, max_bytes: int, *, uncached: bool = False) -> str | None:
    """At a retry claim: make sure ``job_dir`` renders from a private copy. Returns None,
    or why the job cannot run (its file is no regular file, or too big).

    - ``job.yaml`` is a private copy: nothing to do;
    - ``job.yaml`` is the submitter's own file (a job directory of an older version): it is
      renamed to ``submitted.yaml`` and copied (the seal then refuses it if it changed);
    - only ``submitted.yaml`` (a claim or a discarded run that stopped before its copy):
      it is copied now.
    """
    with DirHandle.open(job_dir) as job:
        st = job.try_stat(defaults.JOB_FILENAME)
        if st is not None and is_private_copy(st):
            return None
        crash_point("retry-claim-before-copy")
        remove_stale_temps(job)
        if st is not None:
            # The submitter's inode under the copy's name: evidence from now on.
            job.rename(defaults.JOB_FILENAME, job, defaults.SUBMITTED_FILENAME)
            log.info("%s: converted to a private copy of its job file", job_dir.name)
        try:
            data, attrs = read_job_at(job.fd, defaults.SUBMITTED_FILENAME, max_bytes, uncached=uncached)
        except JobInvalid as exc:
            return "; ".join(exc.problems)
        write_copy(job, data, attrs.mode)
        return None


def prepare_private_file(path: Path, job_dir: Path, mode: int | None = None) -> Path:
    """Create ``path`` (a run log, hooks.log) with private_file_mode (``mode``: that of
    ``job_dir``, known already), or narrow it to that mode when it exists: whoever appends
    to it later (a renderer's ``open(log, "ab")``) then cannot make it wider, whatever the
    umask. Never through a symlink."""
    if mode is None:
        mode = private_file_mode(job_dir)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    try:
        if stat.S_IMODE(os.fstat(fd).st_mode) != mode:
            os.fchmod(fd, mode)  # open() filtered it through the umask, or it existed wider
    finally:
        os.close(fd)
    return path


def drop_copy(job_dir: Path) -> None:
    """Remove the copy of an unsealed run that is discarded: its next claim copies the
    submitted file again, complete by then (recovery treats the directory as a claim
    without its copy meanwhile)."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(job_dir / defaults.JOB_FILENAME)


def submitted_owner(job_dir: Path) -> tuple[int, int] | None:
    """The submitted file's (owner uid, mode) now, never following it; None if absent."""
    try:
        st = os.stat(job_dir / defaults.SUBMITTED_FILENAME, follow_symlinks=False)
    except OSError:
        return None
    return st.st_uid, stat.S_IMODE(st.st_mode)


def others_may_write(job_dir: Path, at_claim: tuple[int, int] | None) -> str | None:
    """Why a change to the submitted file may be someone else's than its submitter's, or None.

    Only the owner's own upload going on justifies a discard and a re-copy: a file that its
    group or others may write (a job written under umask 002 in the setgid incoming/ is
    writable by every spool-group member), or whose owner or mode changed since the claim,
    may have been appended to by another user, whose bytes must never be rendered.
    """
    now = submitted_owner(job_dir)
    if at_claim is None or now is None:
        return "cannot be checked against the claim"
    for _, mode in (at_claim, now):
        if mode & (stat.S_IWGRP | stat.S_IWOTH):
            return f"is writable by its group or others (mode {mode:04o})"
    if now[0] != at_claim[0]:
        return f"changed owner since the claim (uid {at_claim[0]} to {now[0]})"
    return None


def continued_append(job_dir: Path, copied: JobFileState, max_bytes: int, *, uncached: bool = False) -> str | None:
    """Why the submitter's file shows an upload still in progress at the decision, or None.

    Exactly two things count: a local process holding it open for writing, or bytes that
    continue the copied ones (a remote writer appending after a pause the intake could not
    see). A touch, a rewrite, a rename: none of them is an upload of this job, and none
    matters to a run that renders from its copy.
    """
    try:
        # One open for the lease and the bytes. Without the lstat lease_probe makes first
        # (it keeps it from opening a dropped device node): this name is the inode the
        # claim renamed into the runner's own directory and read as a regular file (else
        # the run has no copy and is never asked), and only the runner renames in there.
        fd = os.open(job_dir / defaults.SUBMITTED_FILENAME, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None  # gone, or replaced by something else: no upload of this job
    try:
        attrs = fstat_fresh(fd) if uncached else Attributes.of(os.fstat(fd))
        if not stat.S_ISREG(attrs.mode):
            return None
        # The lease alone (~0.1 ms): where it cannot answer, the bytes below still do.
        if probe_lease(fd) is Writer.HELD:
            return "is still open for writing by a local process"
        now = read_open_job(fd, attrs, max_bytes, uncached=uncached)
    except (JobInvalid, OSError):
        return None  # unreadable or over the limit: no upload of this job
    finally:
        os.close(fd)
    if copied.continued_by(now):
        return f"grew from {copied.size} to {len(now)} bytes after it was claimed"
    return None
