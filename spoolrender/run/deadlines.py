"""Job timeouts: one thread of the process calls each due function, instead of a thread per run.

A ``threading.Timer`` per run started a thread (a ``clone``, a stack, the start handshake)
and ended it again for every job, most of which finish long before their timeout: with
no-op jobs, one thread of the two started per job (bench/README.md, "P2 queue overhead").
Here arming a deadline is a heap push under a lock, and cancelling one marks it; the
thread is woken only when a new deadline is earlier than every armed one.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import os
import threading
import time
from collections.abc import Callable

log = logging.getLogger(__name__)

_CANCELLED_KEPT = 1000  # cancelled entries left in the heap before a sweep (bounded memory)
_LONGEST_WAIT_S = 86400.0  # one wait of the thread at most (below threading.TIMEOUT_MAX)


class Deadline:
    """One armed call (:meth:`Deadlines.call_after`); :meth:`cancel` before it is due stops it."""

    __slots__ = ("_owner", "cancelled", "fn")

    def __init__(self, owner: Deadlines, fn: Callable[[], object]) -> None:
        self._owner = owner
        self.fn = fn
        self.cancelled = False

    def cancel(self) -> None:
        self._owner._cancel(self)


class Deadlines:
    """Calls each armed function once its time (``time.monotonic``) has come, on one daemon
    thread started at the first :meth:`call_after`, in the order of their times.

    Like ``threading.Timer``, the function runs on that thread: it must be short (a cancel
    token's ``cancel``). Cancelled entries leave the heap when it holds more than
    ``_CANCELLED_KEPT`` of them and more of them than of armed ones, so a long-running
    runner's heap does not grow with its jobs.
    """

    def __init__(self, name: str = "deadlines") -> None:
        self._name = name
        self._cond = threading.Condition(threading.Lock())
        self._heap: list[tuple[float, int, Deadline]] = []
        self._order = itertools.count()  # ties in time: the earlier armed first, never comparing Deadlines
        self._cancelled = 0
        self._thread: threading.Thread | None = None

    def _forked(self) -> None:
        # A forked child has no copy of the thread: it starts its own at its first deadline.
        self._cond = threading.Condition(threading.Lock())
        self._heap, self._cancelled, self._thread = [], 0, None

    def call_after(self, seconds: float, fn: Callable[[], object]) -> Deadline:
        deadline = Deadline(self, fn)
        when = time.monotonic() + seconds
        with self._cond:
            earliest = self._heap[0][0] if self._heap else None
            heapq.heappush(self._heap, (when, next(self._order), deadline))
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name=self._name, daemon=True)
                self._thread.start()
            elif earliest is None or when < earliest:
                self._cond.notify()  # the thread sleeps until a later time than this one
        return deadline

    def _cancel(self, deadline: Deadline) -> None:
        with self._cond:
            if deadline.cancelled:
                return
            deadline.cancelled = True
            self._cancelled += 1
            # No wake-up: the thread finds the entry cancelled when its time comes. Nor is
            # it taken out now: with every run's timeout alike, the cancelled earliest entry
            # keeps the thread asleep past each new one, and arming needs no notify (an
            # empty heap would need one per run). Swept out once they are many.
            if self._cancelled > _CANCELLED_KEPT and self._cancelled * 2 > len(self._heap):
                self._heap = [entry for entry in self._heap if not entry[2].cancelled]
                heapq.heapify(self._heap)
                self._cancelled = 0

    def _loop(self) -> None:
        while True:
            with self._cond:
                while True:
                    if not self._heap:
                        self._cond.wait()
                        continue
                    delay = self._heap[0][0] - time.monotonic()
                    if delay <= 0:
                        break
                    # At most a day per wait, looked at again after: a longer timeout (a
                    # job's "never", 1e10 s) overflows the wait, and the OverflowError ended
                    # this thread, so that no run of the process ever timed out again.
                    self._cond.wait(min(delay, _LONGEST_WAIT_S))
                _, _, deadline = heapq.heappop(self._heap)
                if deadline.cancelled:
                    self._cancelled -= 1
                    continue
                deadline.cancelled = True  # called: a cancel() from now on does nothing
            try:
                deadline.fn()
            except Exception:
                log.exception("a deadline's call failed")


# The process's one timeout thread, shared by every runner and executor in it.
DEADLINES = Deadlines()
os.register_at_fork(after_in_child=DEADLINES._forked)
