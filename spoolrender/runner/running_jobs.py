"""The jobs a runner runs now, by slot: a claim handed to a free slot's thread, runs that
ended reaped (their slots free again), and at the end the shutdown's grace, then cancel.

Separate from the loop (runner/loop.py) because it is the one table of which claim runs
where, with the one lock that guards it: the loop's thread hands and reaps, the slots'
threads only set their run's ``done``, and the display and the beacon read counts. The
loop decides what to claim and when; this table knows nothing of scans or the spool.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

from spoolrender.core.vocabulary import CancelReason
from spoolrender.intake.claim import Claim
from spoolrender.ops.metrics import RunnerMetrics
from spoolrender.runner.slot_threads import SlotThread
from spoolrender.spool.clock import Clock


@dataclass
class _Active:
    claim: Claim
    done: threading.Event  # set by the slot's thread once the run has ended (SlotThread)
    slot: int


class RunningJobs:
    """``slots`` slots, each a kept thread that calls ``run(slot, claim)`` for each claim
    handed to it and then ``finished()``; the busy count goes to ``metrics``."""

    def __init__(
        self,
        slots: int,
        run: Callable[[int, Claim], None],
        finished: Callable[[], None],
        metrics: RunnerMetrics,
        log: logging.Logger,
    ) -> None:
        self._threads = [
            SlotThread[Claim](f"slot-{slot}", functools.partial(run, slot), finished) for slot in range(slots)
        ]
        self._free = list(range(slots))
        self._active: dict[str, _Active] = {}
        self._metrics = metrics
        self._lock = threading.Lock()
        # The runner's logger: the shutdown's line has always named the runner's loop.
        self._log = log

    def has_free_slot(self) -> bool:
        return bool(self._free)

    def idle(self) -> bool:
        """Whether no job runs in any slot."""
        with self._lock:
            return not self._active

    def count(self) -> int:
        with self._lock:
            return len(self._active)

    def keys(self) -> set[str]:
        """The running claims' keys (recovery leaves them alone)."""
        with self._lock:
            return set(self._active)

    def by_slot(self) -> dict[int, Claim]:
        with self._lock:
            return {a.slot: a.claim for a in self._active.values()}

    def hand(self, claimed: Claim) -> int:
        """Run ``claimed`` in the first free slot (there must be one, :meth:`has_free_slot`);
        that slot's number. From the loop's thread only."""
        slot = self._free.pop(0)
        done = threading.Event()
        with self._lock:
            self._active[claimed.key] = _Active(claimed, done, slot)
            self._metrics.set_busy(len(self._active))
        self._threads[slot].hand(claimed, done)
        return slot

    def reap(self) -> None:
        """Free the slots whose runs have ended. From the loop's thread only."""
        with self._lock:
            finished = [key for key, a in self._active.items() if a.done.is_set()]
            for key in finished:
                active = self._active.pop(key)
                self._free.append(active.slot)
            self._metrics.set_busy(len(self._active))

    def end_all(self, grace_seconds: float, forced: threading.Event, clock: Clock) -> None:
        """Give running jobs ``grace_seconds`` to finish (none once ``forced`` is set),
        cancel those still running (they go back without using an attempt), wait for them."""
        with self._lock:
            active = list(self._active.values())
        if not active:
            return
        if not forced.is_set():
            self._log.info("waiting up to %g s for %d running job(s)", grace_seconds, len(active))
            deadline = clock.monotonic() + grace_seconds
            for a in active:
                while not a.done.is_set() and not forced.is_set():
                    remaining = deadline - clock.monotonic()
                    if remaining <= 0:
                        break
                    a.done.wait(min(remaining, 0.2))
        for a in active:
            if not a.done.is_set():
                a.claim.cancel.cancel(CancelReason.SHUTDOWN)
        for a in active:
            a.done.wait()
        self.reap()

    def stop_threads(self) -> None:
        """End every slot's thread (after :meth:`end_all`: none has a job left)."""
        for thread in self._threads:
            thread.stop()

    def threads_alive(self) -> dict[str, bool | None]:
        """Each slot's thread and whether it runs (None: not started, no job yet)."""
        return {thread.name: thread.running() for thread in self._threads}
