"""A small real filesystem to fill: a fresh 64 MiB ext4 image, loop-mounted (as root), with
nothing reserved for root, so that "full" is full for the root runner too. For
tests/reliability/test_full_disk.py and bench/full_disk.py."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from pathlib import Path

IMAGE_MB = 64


def mount_small_ext4(tmp_path: Path) -> Path | str:
    """The mount point of a fresh ext4 image, or why one cannot be made here."""
    if os.geteuid() != 0:
        return "mounting a loop device needs root"
    if shutil.which("mkfs.ext4") is None:
        return "mkfs.ext4 (e2fsprogs) is not installed"
    image, mnt = tmp_path / "disk.img", tmp_path / "mnt"
    mnt.mkdir()
    with open(image, "wb") as fh:
        fh.truncate(IMAGE_MB * 1024 * 1024)
    # -m 0: no blocks reserved for root (the runner here is root, and would use them).
    made = subprocess.run(["mkfs.ext4", "-q", "-F", "-m", "0", str(image)], capture_output=True, text=True)
    if made.returncode != 0:
        return f"mkfs.ext4 failed: {made.stderr.strip()}"
    mounted = subprocess.run(["mount", "-o", "loop", str(image), str(mnt)], capture_output=True, text=True)
    if mounted.returncode != 0:
        return f"cannot loop-mount an ext4 image here: {mounted.stderr.strip()}"
    # ext4 keeps ~2% of its blocks for root beyond -m ("reserved clusters"): without this,
    # a root runner's small writes still fit when the disk reads full for everyone else.
    device = subprocess.run(["findmnt", "-n", "-o", "SOURCE", str(mnt)], capture_output=True, text=True)
    (Path("/sys/fs/ext4") / Path(device.stdout.strip()).name / "reserved_clusters").write_text("0")
    return mnt


def fill(disk: Path) -> None:
    """Write a file until the filesystem has no block left (ENOSPC at every size)."""
    fd = os.open(disk / "filler", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        for size in (1024 * 1024, 65536, 4096, 1024, 1):  # big steps, then the last blocks
            with contextlib.suppress(OSError):
                while True:
                    os.write(fd, b"\0" * size)
        os.fsync(fd)
    finally:
        os.close(fd)
    st = os.statvfs(disk)
    assert st.f_bavail * st.f_frsize < 64 * 1024, "the disk did not fill"


def free(disk: Path) -> None:
    (disk / "filler").unlink()
