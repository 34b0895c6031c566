"""Spool I/O trouble: a filesystem that is full, over quota, read-only, failing, stale or cut off.

Such errors are the filesystem's, never the job's: they pass (space is freed, a quota
raised, a mount comes back), and until then every write to the spool fails alike. So a
runner that meets one does not give up on anything, nor count it against a job:

- :class:`SpoolIOCondition` (one per runner, shared by its threads) records that the spool
  is in trouble, since when and why, and hands out the delay before the next try:
  ``SPOOL_IO_RETRY_MIN_S`` doubling per failure up to ``SPOOL_IO_RETRY_MAX_S``; a write
  that works in between does not start the doubling over unless the spool then stays
  clear for ``SPOOL_IO_RETRY_MAX_S`` (a disk that flickers full is tried ever more
  slowly, not every second). Claiming pauses while it lasts; the runner's beacon carries
  it to ``status``, the dashboard and the metrics. It logs one line when the trouble
  starts, a reminder at most once per delay, and one line when a write succeeds again
  (which ends it).
- a run whose record cannot be written keeps its claim (lock and heartbeat) and tries
  again with that backoff; a run stopped by spool trouble goes back to retry/ without
  using an attempt, with the error kind ``spool-io`` and the kernel's text; unless the run
  filled the disk itself (:func:`filled_by_run`: its output may never fit), or the job
  has had ``SPOOL_IO_FREE_REQUEUES`` such requeues in a row: then it counts as an attempt,
  so that no job loops for ever without using one.
"""

from __future__ import annotations

import errno
import logging
import os
import stat
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, TypeGuard, TypeVar

from spoolrender import defaults
from spoolrender.errors import SpoolIOError
from spoolrender.spool.clock import Clock, SystemClock

log = logging.getLogger(__name__)

T = TypeVar("T")

# The errors that are the filesystem's condition, not a property of one file or job.
# ENOTCONN: a FUSE mount whose client is cut off (GlusterFS past network.ping-timeout) or
# whose server went away answers every call with it until it is back; it was not here,
# and a runner cut off for 20 s logged an ERROR every pass (rescan_seconds) with no
# backoff, and warned for every heartbeat of every job (docs/reliability.md).
SPOOL_IO_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EROFS, errno.ESTALE, errno.ENOTCONN})

# What each condition means for a spool, for one-sentence messages.
_CONDITION = {
    errno.ENOSPC: "is full",
    errno.EDQUOT: "is over its disk quota",
    errno.EROFS: "is read-only",
    errno.EIO: "reports I/O errors",
    errno.ESTALE: "has gone stale (a network filesystem's handle)",
    errno.ENOTCONN: "cannot be reached (a network or FUSE mount cut off from its server)",
}


def is_spool_io(exc: BaseException | None) -> TypeGuard[OSError]:
    """True if ``exc`` is an OSError that says the filesystem is in trouble (see the module)."""
    return isinstance(exc, OSError) and exc.errno in SPOOL_IO_ERRNOS


def strerror(exc: OSError) -> str:
    """The kernel's text for ``exc`` (``No space left on device``), never a Python repr."""
    if exc.errno is not None:
        return os.strerror(exc.errno)
    return str(exc.strerror or exc)


def condition(exc: OSError) -> str:
    """``is full``, ``is read-only``, ...: what the error says about the filesystem."""
    return _CONDITION.get(exc.errno or 0, "failed")


def spool_io_error(exc: OSError, message: str) -> SpoolIOError:
    """A :class:`SpoolIOError` for ``exc`` (raise it ``from exc``)."""
    return SpoolIOError(message, errno=exc.errno, strerror=strerror(exc))


def filesystem_trouble(*paths: Path) -> OSError | None:
    """ENOSPC or EROFS for the first of ``paths`` whose filesystem is full or read-only now.

    For a render that failed in its own words (a command's exit status): if its output or
    log had no room, that is the disk's condition, not the job's. "Full" is less room than
    ``FULL_DISK_BYTES`` for an unprivileged writer (what renders and uploads get).
    """
    for path in paths:
        try:
            st = os.statvfs(path)
        except OSError:
            continue
        if st.f_flag & os.ST_RDONLY:
            return OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
        if st.f_bavail * st.f_frsize < defaults.FULL_DISK_BYTES:
            return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
    return None


def room_by_device(*paths: Path) -> dict[int, int]:
    """Free bytes (for an unprivileged writer) of each path's filesystem, by ``st_dev``:
    the room a run had when it started, for :func:`filled_by_run`. Unreadable paths are
    left out."""
    room: dict[int, int] = {}
    for path in paths:
        try:
            device = os.stat(path).st_dev
            if device in room:
                continue  # the same filesystem as an earlier path (the spool's beside the output)
            st = os.statvfs(path)
        except OSError:
            continue
        room[device] = st.f_bavail * st.f_frsize
    return room


def filled_by_run(trouble: OSError, room_at_start: Mapping[int, int], own_files: Iterable[Path]) -> bool:
    """True if a run filled the filesystem of ``trouble`` (ENOSPC) itself: the run's
    ``own_files`` there (its scratch output, its log) take at least
    ``RUN_FILLED_DISK_SHARE`` of the room that filesystem had when the run started
    (``room_at_start``, from :func:`room_by_device`), counted as at least
    ``FULL_DISK_BYTES``. Its output may never fit there, so trying again must use an
    attempt. A disk filled by someone else, or full before the run began (where any
    write fills it), is the disk's condition.

    Only ENOSPC: a quota (EDQUOT) is not what statvfs shows, so a job over its quota
    relies on the bound on free requeues (``SPOOL_IO_FREE_REQUEUES``).
    """
    if trouble.errno != errno.ENOSPC:
        return False
    where = _device(Path(os.fsdecode(trouble.filename))) if trouble.filename else None
    devices = list(room_at_start) if where is None else [where]
    own: dict[int, int] = {}
    for path in own_files:
        device = _device(path)
        if device is not None:
            own[device] = own.get(device, 0) + allocated_bytes(path)
    return any(
        device in room_at_start
        and own.get(device, 0) >= defaults.RUN_FILLED_DISK_SHARE * max(room_at_start[device], defaults.FULL_DISK_BYTES)
        for device in devices
    )


def allocated_bytes(path: Path) -> int:
    """The disk space the file ``path``, or the files under the directory ``path``, take
    (0 for a path that is gone)."""
    try:
        st = os.lstat(path)
    except OSError:
        return 0
    if not stat.S_ISDIR(st.st_mode):
        return st.st_blocks * 512
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_blocks * 512
            except OSError:
                continue  # removed meanwhile
    return total


def _device(path: Path) -> int | None:
    """The ``st_dev`` of ``path``, or of its nearest existing parent (a file that failed
    to be created)."""
    for candidate in (path, *path.parents):
        try:
            return os.stat(candidate).st_dev
        except OSError:
            continue
    return None


def attempt_counted(requeues: int) -> str:
    """Why a spool I/O stop of a job counts as an attempt after ``requeues`` free ones."""
    return (
        f"counted as an attempt: requeued {requeues} times in a row for spool I/O errors, "
        "the most without using one (SPOOL_IO_FREE_REQUEUES)"
    )


def next_delay(failures: int) -> float:
    """The wait after the ``failures``-th failure in a row: doubling, capped (defaults.SPOOL_IO_RETRY)."""
    return defaults.SPOOL_IO_RETRY.delay(failures)


class SpoolIOCondition:
    """Whether this runner's writes to the spool fail for the filesystem's reasons (thread-safe)."""

    def __init__(self, clock: Clock | None = None, host: str = "") -> None:
        self._clock = clock or SystemClock()
        self._host = host
        self._lock = threading.Lock()
        self._active = False  # the last write failed: the trouble lasts
        self._step = 0  # the backoff's step: failures since the spool was last clear for long
        self._clear_since: float | None = None  # monotonic: the last trouble ended then
        self._errors = 0  # failed operations since the trouble started (for the log)
        self._text = ""
        self._errno: int | None = None
        self._where = ""
        self._since_wall = 0.0
        self._since_mono = 0.0
        self._next_try = 0.0  # monotonic
        self._next_reminder = 0.0  # monotonic
        self.total = 0  # failed operations ever (the metrics' counter)

    def failed(self, exc: OSError, where: str, *, retried: bool = True) -> float:
        """``exc`` happened while ``where`` (``claiming incoming/x.yaml``): the delay to wait.

        ``retried=False``: a periodic write that does not back off (a heartbeat, rewritten
        in place meanwhile) reports the trouble, but neither doubles nor delays the next try.
        """
        now = self._clock.monotonic()
        with self._lock:
            started = not self._active
            if started:
                self._active = True
                if self._clear_since is not None and now - self._clear_since >= defaults.SPOOL_IO_RETRY_MAX_S:
                    # Clear for a whole maximum wait: the trouble is new, start over at the minimum.
                    self._step = 0
            if started or retried:
                self._step += 1
                self._next_try = now + next_delay(self._step)
            self._errors += 1
            self.total += 1
            delay = next_delay(self._step)
            text = strerror(exc)
            changed = text != self._text
            self._text, self._errno, self._where = text, exc.errno, where
            if started:
                self._since_wall, self._since_mono = self._clock.wall(), now
            remind = not started and (changed or now >= self._next_reminder)
            if started or remind:
                self._next_reminder = now + delay
            errors, since = self._errors, now - self._since_mono
        if started:
            log.error(
                "spool I/O: %s while %s: the spool's filesystem %s; claiming paused, trying again in %g s "
                "(doubling up to %g s)",
                text, where, condition(exc), delay, defaults.SPOOL_IO_RETRY_MAX_S,
            )  # fmt: skip
        elif remind:
            log.warning(
                "spool I/O: still %s (%s, %d failed operation(s) in %.0f s); claiming paused, next try in %g s",
                text, where, errors, since, delay,
            )  # fmt: skip
        return delay

    def succeeded(self) -> None:
        """A write to the spool worked: the trouble (if any) is over."""
        with self._lock:
            if not self._active:
                return
            now = self._clock.monotonic()
            errors, lasted, text = self._errors, now - self._since_mono, self._text
            # The backoff's step stays: trouble back within SPOOL_IO_RETRY_MAX_S goes on doubling.
            self._active, self._clear_since, self._errors = False, now, 0
            self._text, self._errno, self._where = "", None, ""
        log.info("spool I/O works again after %.0f s of %s (%d failed operation(s)): claiming resumed",
                 lasted, text, errors)  # fmt: skip

    @property
    def active(self) -> bool:
        return self._active

    def wait_seconds(self) -> float:
        """Seconds until the next try is due (0: due now, or no trouble)."""
        with self._lock:
            if not self._active:
                return 0.0
            return max(0.0, self._next_try - self._clock.monotonic())

    def since(self) -> float | None:
        """When the current trouble started (wall clock), or None."""
        with self._lock:
            return self._since_wall if self._active else None

    def text(self) -> str | None:
        """The kernel's text of the current trouble (``No space left on device``), or None."""
        with self._lock:
            return self._text if self._active else None

    def report(self) -> dict[str, Any] | None:
        """The condition for the runner's beacon (``status``, dashboard, metrics), or None."""
        with self._lock:
            if not self._active:
                return None
            return {
                "error": self._text,
                "errno": errno.errorcode.get(self._errno or 0),
                "where": self._where,
                "since": self._since_wall,
                "retry_seconds": next_delay(self._step),
                "failures": self._errors,
                "host": self._host,
            }

    def retry(self, op: Callable[[], T], where: str, *, give_up: Callable[[], bool]) -> T:
        """``op()``, tried again after each spool I/O error with the backoff until it works.

        Other errors propagate at once; so does a spool I/O error once ``give_up()`` is true
        (checked before each try and while waiting: a shutdown that cannot wait any longer).
        """
        while True:
            try:
                result = op()
            except OSError as exc:
                if not is_spool_io(exc) or give_up():
                    raise
                deadline = time.monotonic() + self.failed(exc, where)
                # Short steps: a shutdown must not wait out a whole delay.
                while not give_up() and (left := deadline - time.monotonic()) > 0:
                    time.sleep(min(left, _GIVE_UP_POLL_S))
                continue
            self.succeeded()
            return result


_GIVE_UP_POLL_S = 0.2
