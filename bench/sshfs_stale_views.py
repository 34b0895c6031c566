"""Which way of looking at a file sees another host's write through a caching sshfs mount?

Issue 21: a runner polling through sshfs with attribute caching claimed an upload that
another host was still writing, and rendered the prefix its cached size allowed. For
each mount option set this mounts a directory with sshfs (sftp-server started directly:
no ssh transport, which changes nothing about caching), caches a file's attributes and
pages through the mount as a scan leaves them (lstat, read, lstat), appends to the file
on the server's disk (where another host's SFTP write lands), and asks the mount again,
one way per fresh file:

- ``lstat``: what the scanner's listing sees;
- ``statx force, by path``: ``statx(AT_STATX_FORCE_SYNC)`` on the name;
- ``open + fstat``; ``open + statx force``: a forced statx on the new descriptor
  (spoolrender.spool.netcache.fresh_attributes);
- ``open + read``: a plain read of the job file; ``open + statx force + read``;
  ``open + fadvise + read`` (cached pages dropped only); ``O_DIRECT read``.

"new" means the server's size (or all its bytes), "OLD" the cached one. Needs root,
sshfs and FUSE (scripts/setup.sh --test). Prints a table and the command:

    .venv/bin/python bench/sshfs_stale_views.py
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from spoolrender.spool.netcache import fresh_attributes, fstat_fresh

SFTP_SERVER = "/usr/lib/openssh/sftp-server"
OPTION_SETS = (
    "cache=yes,kernel_cache,attr_timeout=5,entry_timeout=5",
    "dir_cache=no,attr_timeout=5,entry_timeout=5",
    "dir_cache=no,kernel_cache,attr_timeout=5,entry_timeout=5",
    "cache=yes,attr_timeout=0,entry_timeout=0",
    "dir_cache=no,attr_timeout=0,entry_timeout=0,negative_timeout=0",
)
BEFORE, AFTER = 1000, 2000  # bytes before and after the server-side append


def _statx_by_path(path: Path) -> int:
    buf = ctypes.create_string_buffer(256)
    libc = ctypes.CDLL(None, use_errno=True)
    # AT_SYMLINK_NOFOLLOW | AT_STATX_FORCE_SYNC, STATX_BASIC_STATS; stx_size at offset 40.
    if libc.statx(-100, os.fsencode(path), 0x100 | 0x2000, 0x7FF, buf) != 0:
        raise OSError(ctypes.get_errno(), "statx")
    return int.from_bytes(buf.raw[40:48], sys.byteorder)


def _read(path: Path, flags: int = 0, before: Callable[[int], object] | None = None) -> int:
    fd = os.open(path, os.O_RDONLY | flags)
    try:
        if before is not None:
            before(fd)
        return len(os.read(fd, 1 << 20))
    finally:
        os.close(fd)


def _open_fstat(path: Path) -> int:
    fd = os.open(path, os.O_RDONLY)
    try:
        return os.fstat(fd).st_size
    finally:
        os.close(fd)


WAYS: dict[str, Callable[[Path], int]] = {
    "lstat": lambda p: os.lstat(p).st_size,
    "statx force, by path": _statx_by_path,
    "open + fstat": _open_fstat,
    "open + statx force": lambda p: fresh_attributes(p).size,
    "open + read": _read,
    "open + statx force + read": lambda p: _read(p, before=fstat_fresh),
    "open + fadvise + read": lambda p: _read(p, before=lambda fd: os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)),
    "O_DIRECT read": lambda p: _read(p, os.O_DIRECT),
}


def measure(options: str) -> dict[str, str]:
    work = Path(tempfile.mkdtemp(prefix="sshfs-stale-"))
    served, mnt, server = work / "served", work / "mnt", work / "sftp.sh"
    served.mkdir()
    mnt.mkdir()
    server.write_text(f"#!/bin/sh\nexec {SFTP_SERVER}\n")
    server.chmod(0o755)
    subprocess.run(["sshfs", "-o", f"ssh_command={server},{options}", f"localhost:{served}", str(mnt)], check=True)
    seen = {}
    try:
        for i, (way, look) in enumerate(WAYS.items()):
            name = f"f{i}"
            (served / name).write_bytes(b"a" * BEFORE)
            path = mnt / name
            os.lstat(path)
            path.read_bytes()
            os.lstat(path)  # a read invalidates the cached atime: this lstat fetches, the next ones are cached
            with open(served / name, "ab") as fh:
                fh.write(b"b" * (AFTER - BEFORE))
            size = look(path)
            seen[way] = "new" if size == AFTER else f"OLD ({size})"
    finally:
        subprocess.run(["fusermount3", "-u", str(mnt)], check=False)
        shutil.rmtree(work, ignore_errors=True)
    return seen


def main() -> None:
    if os.geteuid() != 0 or shutil.which("sshfs") is None or not Path("/dev/fuse").exists():
        sys.exit("cannot run: needs root, sshfs and /dev/fuse (scripts/setup.sh --test)")
    results = {options: measure(options) for options in OPTION_SETS}
    print(f"{'way of looking':28} " + " | ".join(f"{f'[{i + 1}]':>10}" for i in range(len(OPTION_SETS))))
    for way in WAYS:
        print(f"{way:28} " + " | ".join(f"{results[o][way]:>10}" for o in OPTION_SETS))
    for i, options in enumerate(OPTION_SETS):
        print(f"[{i + 1}] {options}")
    print("reproduce: .venv/bin/python bench/sshfs_stale_views.py")


if __name__ == "__main__":
    main()
