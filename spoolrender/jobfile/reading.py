"""Reading a claimed job file's bytes without following links, blocking or reading too much."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from spoolrender.errors import JobInvalid
from spoolrender.spool.netcache import Attributes, drop_cached_pages, fstat_fresh


def read_job_bytes(path: Path, max_bytes: int, *, uncached: bool = False) -> bytes:
    """Read a claimed job file without following links or blocking on FIFOs.

    ``uncached`` (a spool on a network filesystem): the bytes the server has now, not a
    prefix the client cached while another host was still writing (spoolrender.spool.netcache).
    """
    return read_job_at(None, path, max_bytes, uncached=uncached)[0]


def read_job_at(
    dir_fd: int | None, name: str | Path, max_bytes: int, *, uncached: bool = False
) -> tuple[bytes, Attributes]:
    """The bytes of job file ``name`` (in directory ``dir_fd``, or a path) and the
    attributes of the very file they were read from (its descriptor's fstat).

    Raises JobInvalid (with a reason for the job's record) for anything but a regular
    file within ``max_bytes``; opening never follows a symlink nor waits for a FIFO.
    """
    try:
        # O_NOFOLLOW: a symlink dropped into incoming/ must not make us read (and echo
        # into records) some other file. O_NONBLOCK: opening a FIFO must not hang.
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError as exc:
        try:
            kind = file_kind(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
        except OSError:
            kind = None
        if kind is not None and kind != "regular file":
            raise JobInvalid([f"job file: expected a regular file, got a {kind}"]) from exc
        raise JobInvalid([f"job file: cannot open: {exc.strerror}"]) from exc
    try:
        st = fstat_fresh(fd) if uncached else Attributes.of(os.fstat(fd))
        return read_open_job(fd, st, max_bytes, uncached=uncached), st
    finally:
        os.close(fd)


def read_open_job(fd: int, st: Attributes, max_bytes: int, *, uncached: bool = False) -> bytes:
    """The bytes of the job file open as ``fd`` (from its start), whose attributes are
    ``st`` (its fstat, or netcache.fstat_fresh with ``uncached``); JobInvalid as
    :func:`read_job_at` raises it."""
    if not stat.S_ISREG(st.mode):
        raise JobInvalid([f"job file: expected a regular file, got a {file_kind(st.mode)}"])
    if st.size > max_bytes:
        raise JobInvalid([f"job file: {st.size} bytes is over the limit of {max_bytes} (max_job_bytes)"])
    if uncached:
        drop_cached_pages(fd)
    data = _read_upto(fd, max_bytes + 1, st.size)
    if len(data) > max_bytes:  # grew after fstat
        raise JobInvalid([f"job file: over the limit of {max_bytes} bytes (max_job_bytes)"])
    return data


def _read_upto(fd: int, limit: int, size: int) -> bytes:
    """At most ``limit`` bytes of ``fd``, to its end, with plain read(2) calls (``size``:
    its fstat's, the first read's length): a file object would cost an fstat, an ioctl
    and an lseek more, and allocate ``limit`` bytes up front (a mmap of 1 MiB per read)."""
    parts: list[bytes] = []
    left = limit
    while left > 0:
        chunk = os.read(fd, min(left, max(size + 1, 65536) if parts else size + 1))
        if not chunk:
            break
        parts.append(chunk)
        left -= len(chunk)
    return parts[0] if len(parts) == 1 else b"".join(parts)


def file_kind(mode: int) -> str:
    """What an inode of ``mode`` is, for a reason: ``symlink``, ``directory``, ``FIFO``..."""
    if stat.S_ISLNK(mode):
        return "symlink"
    if stat.S_ISDIR(mode):
        return "directory"
    if stat.S_ISFIFO(mode):
        return "FIFO"
    if stat.S_ISSOCK(mode):
        return "socket"
    if stat.S_ISREG(mode):
        return "regular file"
    return "special file"
