"""Clocks: the host's wall and monotonic clocks behind one injectable interface.

Tests pass a :class:`ManualClock` to exercise backoff and lease timing without sleeping.
Liveness across hosts is judged on the observer's *monotonic* clock (how long it has seen
a heartbeat unchanged), never by comparing two hosts' wall clocks.

Due times (retry/ entry names, ``not_before``, backoff, retry-elsewhere) are on the spool
filesystem's clock, the one clock every host sharing a spool sees alike: a file's mtime,
stamped by the NFS or SFTP server on ``write()``. A host whose own wall clock is a day
ahead, or is stepped mid-backoff, then neither runs a retry early nor starves it.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
import uuid
from pathlib import Path
from typing import Protocol

from spoolrender.defaults import SPOOL_CLOCK_REUSE_SECONDS


class Clock(Protocol):
    def wall(self) -> float:
        """Seconds since the epoch, for records (due times are on the spool's clock: spool_now)."""
        ...

    def monotonic(self) -> float:
        """Seconds on a clock that never jumps, for intervals and leases."""
        ...


class SystemClock:
    def wall(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()


class ManualClock:
    """A clock that moves only when told to (tests)."""

    def __init__(self, wall: float = 1_800_000_000.0, monotonic: float = 1000.0) -> None:
        self._wall = wall
        self._mono = monotonic
        self._lock = threading.Lock()

    def wall(self) -> float:
        with self._lock:
            return self._wall

    def monotonic(self) -> float:
        with self._lock:
            return self._mono

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._wall += seconds
            self._mono += seconds

    def jump_wall(self, seconds: float) -> None:
        """The wall clock is set (NTP step, an operator): the monotonic clock does not move."""
        with self._lock:
            self._wall += seconds


def spool_now(probe: Path) -> float | None:
    """The spool filesystem's idea of "now", as a file mtime; None if it cannot be read.

    On NFS a write() stamps mtime with the *server's* clock. Comparing other files' mtimes
    with this probe's (both server stamps) gives ages that do not depend on this host's
    clock agreeing with the server's.
    """
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            # A real write (not utime): utime would stamp our clock, write the server's.
            os.write(fd, b"x")
        finally:
            os.close(fd)
        return os.stat(probe).st_mtime
    except OSError:
        # Not this host's clock instead: callers that can do without the spool's clock fall
        # back themselves, and SpoolClock keeps its last offset rather than record ~0.
        return None


# A run record's ``details`` key: its decider's wall clock minus the spool's, seconds.
CLOCK_OFFSET_KEY = "clock_offset_seconds"


class SpoolClock:
    """The spool filesystem's clock by one runner's probe file, and how far this host's
    wall clock was from it at the last measurement (recorded with every decision, so a
    record's wall times can be read on the spool's clock)."""

    def __init__(self, probe: Path, clock: Clock, *, reuse_seconds: float = SPOOL_CLOCK_REUSE_SECONDS) -> None:
        self._probe = probe
        self._clock = clock
        self._offset: float | None = None
        self._reuse_seconds = reuse_seconds
        self._lock = threading.Lock()
        self._measured: tuple[float, float] | None = None  # (the spool's time, time.monotonic() then)

    def now(self) -> float | None:
        """The spool's "now": measured by the probe at most every ``reuse_seconds``, and in
        between the last measurement moved on by the seconds passed since (time.monotonic,
        the real clock even under a test's manual clock: the filesystem's time is real).

        The runner's loop asks once per pass, and with short jobs a pass follows every job:
        a probe write each time was an open, a truncating write, a close and a stat per job
        (bench/README.md, "P2 queue overhead"). Within ``reuse_seconds`` only a step of the
        filesystem's clock goes unseen, which the next measurement then shows; None (the
        probe cannot be written) is never reused.
        """
        with self._lock:
            last = self._measured
        if last is not None and 0 <= (since := time.monotonic() - last[1]) < self._reuse_seconds:
            return last[0] + since
        measured = spool_now(self._probe)
        # After the probe: the stamp is from before this, so the estimate never runs ahead.
        taken = time.monotonic()
        with self._lock:
            if measured is None:
                self._measured = None
            else:
                self._measured = (measured, taken)
                self._offset = self._clock.wall() - measured
        return measured

    def offset(self) -> float | None:
        """This host's wall clock minus the spool's, seconds (None: never measured)."""
        return self._offset


def spool_time(directory: Path, label: str) -> float:
    """The spool filesystem's "now" by a throwaway probe in ``directory`` (this host's
    clock if the probe cannot be written), for one-off commands (status, retry, purge)."""
    probe = directory / f"clock-{label}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    measured = spool_now(probe)
    with contextlib.suppress(OSError):
        probe.unlink()
    return measured if measured is not None else time.time()
