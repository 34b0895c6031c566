"""Filesystem primitives whose atomicity and durability the spool protocol relies on.

Rules followed here (Maildir's, and what the kernel actually guarantees):
- A reader must never see a half-written file, so content is written under a private
  temporary name and then renamed (or hard-linked) to its final name in one step.
- An acknowledged state change must survive a power cut, so the file's data is fsynced
  before the rename makes it visible, and the directory is fsynced after, because the
  rename itself lives in the directory's metadata.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
from pathlib import Path
from typing import Any

from spoolrender.core.failpoints import crash_point
from spoolrender.spool.indented_json import dumps_indented

_FSYNC = True


def set_fsync(enabled: bool) -> None:
    """Turn every fsync of the spool protocol on (the default) or off (`fsync: false`).

    Off trades durability for speed: a power cut may then lose acknowledged state
    changes (a crash of the process still loses nothing). For spools on tmpfs or
    throwaway machines only.
    """
    global _FSYNC
    _FSYNC = enabled


def fsync_enabled() -> bool:
    """Whether the protocol's fsyncs are on (:func:`set_fsync`): with them off, a caller
    that would open a file only to fsync it need not open it at all."""
    return _FSYNC


def sync_fd(fd: int) -> None:
    """fsync ``fd`` unless fsyncs are turned off (see :func:`set_fsync`)."""
    if _FSYNC:
        os.fsync(fd)


def fsync_dir(path: Path) -> None:
    """Make renames/creates inside ``path`` durable (they live in the directory's data)."""
    if not _FSYNC:
        return
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    except OSError as exc:
        # Some filesystems (e.g. some FUSE mounts) refuse fsync on directories; the
        # rename has still happened, only its durability is then the filesystem's business.
        if exc.errno not in (errno.EINVAL, errno.EBADF, errno.ENOTSUP):
            raise
    finally:
        os.close(fd)


def write_all(fd: int, data: bytes) -> None:
    """Write all of ``data`` to ``fd`` with plain write(2) calls: no file object, whose
    opening alone costs an fstat, an ioctl and an lseek (the runner writes several small
    records per job, P2 in bench/README.md)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _temp_name(target: Path) -> str:
    # A dot-prefixed, random temporary name beside the target: same directory, so the
    # final rename cannot cross filesystems, and never taken for a job by a scanner.
    # Joined as text: pathlib's with_name was a share of every heartbeat (P2).
    head, name = os.path.split(os.fspath(target))
    return os.path.join(head, f".{name}.{secrets.token_hex(6)}.tmp")


def _create_temp(tmp: str, mode: int) -> int:
    """Create the temporary file ``tmp`` (O_EXCL), returning its descriptor.

    A create that reported an error may have been made all the same (below a GlusterFS
    quorum the brick that made it keeps it, nothing to heal): the name is ours alone (random),
    so it is unlinked, in case, before the error propagates."""
    try:
        return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
    except FileExistsError:
        raise  # another's (a random name taken: never in practice), not ours to remove
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_atomic(
    target: Path, data: bytes, *, durable: bool = True, mode: int = 0o644, crash_at: str | None = None
) -> None:
    """Replace ``target`` with ``data`` so readers see the old or the new bytes, never a mix.

    ``durable=False`` skips the fsyncs: for files that are rewritten every few seconds
    and whose loss in a power cut is harmless (heartbeats). ``crash_at``: the failpoint
    (spoolrender.core.failpoints) between the temporary file's write and its rename.
    """
    tmp = _temp_name(target)
    fd = _create_temp(tmp, mode)
    try:
        try:
            os.fchmod(fd, mode)  # exactly ``mode``: open() filters it through the umask
            write_all(fd, data)
            if durable:
                # Data first: a rename that reaches the disk before the data would
                # publish an empty or truncated file after a crash.
                sync_fd(fd)
        finally:
            os.close(fd)
        if crash_at is not None:
            crash_point(crash_at)
        # rename() replaces atomically: there is no moment without a ``target``.
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    if durable:
        fsync_dir(target.parent)


def overwrite_in_place(path: Path, data: bytes) -> bool:
    """Rewrite the existing file ``path`` in the room it already has (no temporary file):
    for a heartbeat or beacon that must still tell something on a full disk. True if done.

    Not atomic: a reader may catch it half-written (heartbeat and beacon readers treat
    unreadable files as such). Padded with spaces to the old length, which JSON ignores,
    so no old byte is left at the end; a longer ``data`` may not fit and then fails.
    """
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        os.pwrite(fd, data.ljust(os.fstat(fd).st_size), 0)
    except OSError:
        with contextlib.suppress(OSError):
            os.close(fd)
        return False
    try:
        # A network filesystem may tell a write failed only when the file is closed: a
        # GlusterFS client answers the flush with ENOSPC when two of three bricks are full
        # (docs/reliability.md "A full brick"). Not done, like any other failure here: raised,
        # it ended the heartbeat thread, and every later claim of the runner beat no more.
        os.close(fd)
    except OSError:
        return False
    return True


def write_json_atomic(
    target: Path, obj: Any, *, durable: bool = True, mode: int = 0o644, crash_at: str | None = None
) -> None:
    write_atomic(target, json_bytes(obj), durable=durable, mode=mode, crash_at=crash_at)


def create_exclusive(target: Path, data: bytes, *, mode: int = 0o644) -> bool:
    """Create ``target`` with ``data`` only if no file of that name exists; True if we did.

    Used where two processes may both try to decide the same thing: exactly one create
    succeeds. Written via a temporary file and ``link()``, because link fails with EEXIST
    atomically even on NFS, where O_EXCL was historically unreliable, and the winner's
    content is complete the moment the name appears. ``mode`` through the umask, which can
    only take bits away: at most as readable as ``mode`` (a private job's records are
    readable by the runner only, spool/job_file_modes.py), and no fchmod per record.
    """
    tmp = _temp_name(target)
    fd = _create_temp(tmp, mode)
    try:
        try:
            write_all(fd, data)
            sync_fd(fd)
        finally:
            os.close(fd)
        try:
            os.link(tmp, target)
        except OSError as exc:
            # A link that reported an error may have been made all the same (below a
            # GlusterFS quorum one brick keeps it, and the client answers ENOTCONN or
            # ENOSPC): the name is ours if it names our file.
            if not _names_file(target, tmp):
                if isinstance(exc, FileExistsError):
                    return False
                raise
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
    fsync_dir(target.parent)
    return True


def _names_file(target: Path, tmp: str) -> bool:
    """Whether ``target`` is the file ``tmp`` (both looked up now, never followed)."""
    try:
        return os.path.samestat(os.stat(tmp, follow_symlinks=False), os.stat(target, follow_symlinks=False))
    except OSError:
        return False


def rename_durable(src: Path, dst: Path) -> None:
    """Move ``src`` to ``dst`` in one atomic rename and make the move survive a power cut.

    Raises FileNotFoundError when ``src`` is gone: the caller decides what losing that
    race means (a claim lost to another runner, a job recovered under our feet).
    """
    os.rename(src, dst)
    crash_point("after-move")
    # Both directories changed; fsync the destination first (the job must be somewhere).
    fsync_dir(dst.parent)
    if src.parent != dst.parent:
        fsync_dir(src.parent)


def json_bytes(obj: Any) -> bytes:
    """``obj`` as the spool's records are written: ``json.dumps(obj, indent=2,
    sort_keys=True, default=str)`` and a newline, built without json's Python encoder
    (spoolrender.spool.indented_json)."""
    return (dumps_indented(obj) + "\n").encode("utf-8")
