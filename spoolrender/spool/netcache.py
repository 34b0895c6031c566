"""A file as it is now on the server, past a network filesystem's attribute and page caches.

A client of a network filesystem answers ``stat()`` from attributes it fetched up to a
timeout ago: NFS's ``actimeo`` (3-60 s by default), the kernel's FUSE ``attr_timeout``,
sshfs's own cache (``dir_cache``, 20 s). A file another host is still writing then
looks unchanged, and old enough to be settled, for that long; and ``read()`` stops at
the cached size, or returns pages cached earlier (sshfs ``kernel_cache``): a prefix of
the upload. Measured on sshfs 3.7.3 (docs/reliability.md, "Uploads on a network
filesystem"): ``lstat()``, ``statx(AT_STATX_FORCE_SYNC)`` by path (sshfs's cache
answers) and a plain open-and-read all saw the old size; ``statx(fd, "",
AT_EMPTY_PATH | AT_STATX_FORCE_SYNC)`` on a descriptor just opened saw the server's, with
every option set tried (the open refreshes sshfs's cache, the forced statx the kernel's,
as NFS's close-to-open does), and a changed size drops the cached pages. A rewrite that
keeps the size can still leave old pages cached: :func:`drop_cached_pages` drops them
(``POSIX_FADV_DONTNEED``) before a read (``jobfile.read_job_bytes(uncached=True)``).

Python 3.11 has no ``os.statx``: glibc's is called through ctypes. Where it is missing
(ENOSYS, an old libc), :func:`fresh_attributes` falls back to ``fstat()``, and the
start-up probe (:mod:`spoolrender.runner.fscheck`) finds out whether that is stale on the mount.
"""

from __future__ import annotations

import ctypes
import errno
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_AT_EMPTY_PATH = 0x1000
_AT_STATX_FORCE_SYNC = 0x2000
_STATX_BASIC_STATS = 0x7FF
# O_NONBLOCK: opening a FIFO must not hang; O_NOFOLLOW: never look through a symlink.
_OPEN_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class _Timestamp(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_int64), ("tv_nsec", ctypes.c_uint32), ("reserved", ctypes.c_int32)]


class _Statx(ctypes.Structure):
    # struct statx (linux/stat.h): 256 bytes, the tail reserved for later fields.
    _fields_ = [
        ("stx_mask", ctypes.c_uint32),
        ("stx_blksize", ctypes.c_uint32),
        ("stx_attributes", ctypes.c_uint64),
        ("stx_nlink", ctypes.c_uint32),
        ("stx_uid", ctypes.c_uint32),
        ("stx_gid", ctypes.c_uint32),
        ("stx_mode", ctypes.c_uint16),
        ("spare0", ctypes.c_uint16),
        ("stx_ino", ctypes.c_uint64),
        ("stx_size", ctypes.c_uint64),
        ("stx_blocks", ctypes.c_uint64),
        ("stx_attributes_mask", ctypes.c_uint64),
        ("stx_atime", _Timestamp),
        ("stx_btime", _Timestamp),
        ("stx_ctime", _Timestamp),
        ("stx_mtime", _Timestamp),
        ("spare", ctypes.c_uint64 * 16),
    ]


def _load_statx() -> Callable[..., int] | None:
    try:
        function: Any = ctypes.CDLL(None, use_errno=True).statx
    except (OSError, AttributeError):  # not glibc >= 2.28: fstat() it is
        return None
    function.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_uint, ctypes.POINTER(_Statx)]
    function.restype = ctypes.c_int
    result: Callable[..., int] = function
    return result


_statx = _load_statx()


@dataclass(frozen=True)
class Attributes:
    """What a settle check compares: the file's identity, size and modification time."""

    mode: int
    inode: int
    size: int
    mtime_ns: int
    uid: int  # its owner: whose upload a claimed file is (owncopy.others_may_write)

    @property
    def signature(self) -> tuple[int, int, int]:
        return self.inode, self.size, self.mtime_ns

    @classmethod
    def of(cls, st: os.stat_result) -> Attributes:
        return cls(st.st_mode, st.st_ino, st.st_size, st.st_mtime_ns, st.st_uid)


def fstat_fresh(fd: int) -> Attributes:
    """The attributes of open file ``fd`` as the server has them now (see the module doc)."""
    if _statx is not None:
        buf = _Statx()
        if _statx(fd, b"", _AT_EMPTY_PATH | _AT_STATX_FORCE_SYNC, _STATX_BASIC_STATS, ctypes.byref(buf)) == 0:
            mtime = buf.stx_mtime.tv_sec * 1_000_000_000 + buf.stx_mtime.tv_nsec
            return Attributes(buf.stx_mode, buf.stx_ino, buf.stx_size, mtime, buf.stx_uid)
        err = ctypes.get_errno()
        if err not in (errno.ENOSYS, errno.EINVAL):  # EINVAL: a kernel without AT_EMPTY_PATH for statx
            raise OSError(err, os.strerror(err))
    return Attributes.of(os.fstat(fd))


def fresh_attributes(path: Path) -> Attributes:
    """``path``'s attributes as the server has them now: opened (close-to-open), then a
    forced statx. Raises OSError (ELOOP for a symlink, ENOENT once it is gone)."""
    fd = os.open(path, _OPEN_FLAGS)
    try:
        return fstat_fresh(fd)
    finally:
        os.close(fd)


def drop_cached_pages(fd: int) -> None:
    """Forget cached pages of ``fd``'s file, so that the next read asks the server.

    Clean pages only; a file this host writes has no stale pages to drop.
    """
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
