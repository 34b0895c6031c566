"""Clocks: the host's wall and monotonic clocks behind one injectable interface.

Tests pass a :class:`ManualClock` to exercise backoff and lease timing without sleeping.
Liveness across hosts is judged on the observer's *monotonic* clock (how long it has seen
a heartbeat unchanged), never by comparing two hosts' wall clocks.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from pathlib import Path
from typing import Protocol


class Clock(Protocol):
    def wall(self) -> float:
        """Seconds since the epoch, for records and due times."""
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
        with contextlib.suppress(OSError):
            return time.time()
        return None
