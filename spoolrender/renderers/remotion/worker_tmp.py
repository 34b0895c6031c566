"""The private TMPDIR of one Remotion worker, and the removal of what dead ones left.

Every worker gets its own short directory (Chromium puts a unix socket in it, and socket
paths are limited to 107 bytes) as TMPDIR: Remotion's temp files, Chromium's profile
(``puppeteer_dev_chrome_profile-*``) and everything they spawn live there, so the
directory names the worker's processes too: each has TMPDIR=<dir> in its environment.

Chromium runs in its own process group (puppeteer launches it detached) and dies only
after the worker, so removing the directory right after the worker exits races with a
dying browser that still writes its profile. Removal therefore first ends the processes
whose TMPDIR is the directory, waits for them, and only then deletes it.

Ownership is an flock on ``.owner`` inside the directory, held by the runner for the
worker's lifetime: the kernel releases it when the runner dies however it dies, so a later
runner (or drain) can tell a dead runner's leftovers from a live one's, even after the pid
in the name was reused.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shutil
import signal
import tempfile
import time
from pathlib import Path

log = logging.getLogger(__name__)

WORKER_TMP_PREFIX = "spoolrender-worker-"
OWNER_FILE = ".owner"
PROFILE_PREFIX = "puppeteer_dev_chrome_profile-"
GONE_TIMEOUT_S = 10.0


class WorkerTmp:
    """A worker TMPDIR owned (flocked) by this process until :meth:`remove`."""

    def __init__(self) -> None:
        self.path = Path(tempfile.mkdtemp(prefix=f"{WORKER_TMP_PREFIX}{os.getpid()}-"))
        # O_CLOEXEC: the lock must die with the runner, not live on in the worker it spawns.
        self._fd = os.open(self.path / OWNER_FILE, os.O_CREAT | os.O_RDWR | os.O_CLOEXEC, 0o600)
        fcntl.flock(self._fd, fcntl.LOCK_EX)

    def remove(self) -> None:
        """End the processes still running with this TMPDIR, then delete it."""
        _end_processes_of(self.path)
        _rmtree(self.path)
        with contextlib.suppress(OSError):
            os.close(self._fd)

    def remove_dead_profiles(self) -> None:
        """Delete Chromium profiles no live process uses (a killed browser leaves its own)."""
        in_use = "\0".join(_cmdline(pid) for pid in _processes_of(self.path))
        for path in self.path.glob(f"{PROFILE_PREFIX}*"):
            if str(path) not in in_use:
                shutil.rmtree(path, ignore_errors=True)


def _pids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode("utf-8", "replace")
    except OSError:
        return ""


def _processes_of(tmpdir: Path) -> list[int]:
    """Live processes whose environment has TMPDIR=``tmpdir`` (the worker and its children)."""
    marker = b"\0TMPDIR=" + os.fsencode(tmpdir) + b"\0"
    found = []
    for pid in _pids():
        try:
            environ = b"\0" + Path(f"/proc/{pid}/environ").read_bytes()
            state = Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[0]
        except OSError:
            continue  # gone, or not ours to read
        if marker in environ and state not in (b"Z", b"X"):
            found.append(pid)
    return found


def _end_processes_of(tmpdir: Path) -> bool:
    """SIGKILL the processes running with TMPDIR=``tmpdir`` and wait for them; False if
    some are not ours to kill or do not exit in time (then the directory stays)."""
    deadline = time.monotonic() + GONE_TIMEOUT_S
    while (pids := _processes_of(tmpdir)) and time.monotonic() < deadline:
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            except PermissionError:
                log.warning("process %s of %s belongs to another user: leaving the directory", pid, tmpdir)
                return False
        time.sleep(0.05)
    if pids:
        log.warning("processes %s of %s did not exit", pids, tmpdir)
    return not pids


def _rmtree(path: Path) -> None:
    # A process that exited a moment ago may still have had a file created on its behalf:
    # try again until the directory is gone.
    deadline = time.monotonic() + GONE_TIMEOUT_S
    while path.exists() and time.monotonic() < deadline:
        shutil.rmtree(path, ignore_errors=True)
        if path.exists():
            time.sleep(0.05)


def _owner_alive(path: Path) -> bool:
    """Whether a live process holds ``path``'s owner lock (or, for a directory without one,
    whether the runner pid in its name is running)."""
    try:
        fd = os.open(path / OWNER_FILE, os.O_RDWR | os.O_CLOEXEC)
    except FileNotFoundError:
        pid = path.name[len(WORKER_TMP_PREFIX) :].split("-", 1)[0]
        return pid.isdigit() and Path(f"/proc/{pid}").exists()
    except OSError:
        return True  # not ours to judge
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def remove_stale_worker_tmpdirs() -> None:
    """Delete the worker TMPDIRs of runners that are gone, with any process still in them."""
    for path in Path(tempfile.gettempdir()).glob(f"{WORKER_TMP_PREFIX}*"):
        if path.is_dir() and not path.is_symlink() and not _owner_alive(path):
            log.info("removing %s, left by a runner that is gone", path)
            if _end_processes_of(path):
                _rmtree(path)
