"""When a runner stops claiming and why: signals, ``--max-jobs`` and ``--max-runtime``.

The first SIGTERM/SIGINT (or :meth:`StopControl.request`) stops claiming and gives running
jobs ``grace_seconds`` to finish; then they are cancelled and go back to retry/ without
using an attempt (runner/running_jobs.py). A second signal (or ``force``) cancels at once.
Limits, for workers that a supervisor recycles: ``max_jobs`` stops claiming after that
many claims and ends the run once those jobs have finished (never cutting one short);
``max_runtime`` stops like a SIGTERM once that much time has passed, so the runner's life
is bounded by ``max_runtime + grace_seconds``. ``RunSummary.stopped_by`` says which ended
the run.

Separate from the loop (runner/loop.py) because it is one decision with its own state (the
two events, the limits, the start time) that the loop only asks: whether to claim, whether
to end, how long it may wait. The loop's claims, slots and upkeep know nothing of signals.
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable
from types import FrameType

from spoolrender.errors import SpoolrenderError
from spoolrender.runner.summary import RunSummary
from spoolrender.spool.clock import Clock


class StopControl:
    """A runner's stop requests (``requested``: claim no more; ``forced``: cancel running
    jobs now) and its limits, which it checks against the summary's claims."""

    def __init__(
        self,
        summary: RunSummary,
        clock: Clock,
        wake: threading.Event,
        log: logging.Logger,
        *,
        max_jobs: int | None,
        max_runtime: float | None,
    ) -> None:
        if max_jobs is not None and max_jobs < 1:
            raise SpoolrenderError(f"max_jobs must be at least 1, got {max_jobs}")
        if max_runtime is not None and not max_runtime > 0:
            raise SpoolrenderError(f"max_runtime must be more than 0 seconds, got {max_runtime}")
        self.max_jobs = max_jobs
        self.max_runtime = max_runtime
        self.requested = threading.Event()
        self.forced = threading.Event()
        self._summary = summary
        self._clock = clock
        self._wake = wake  # set on a request: the loop must see it now, not at its next pass
        # The runner's logger: these lines have always named the runner's loop.
        self._log = log
        self._started = clock.monotonic()

    def start(self) -> None:
        """The runner's loop begins: --max-runtime counts from now."""
        if self.max_jobs is not None or self.max_runtime is not None:
            self._log.info(
                "limits: %s, %s",
                "no job limit" if self.max_jobs is None else f"at most {self.max_jobs} job(s)",
                "no runtime limit" if self.max_runtime is None else f"at most {self.max_runtime:g} s of claiming",
            )
        self._started = self._clock.monotonic()

    def request(self, *, force: bool = False) -> None:
        """Stop claiming; with ``force`` (or a second request), cancel running jobs now."""
        if self.requested.is_set() or force:
            self.forced.set()
        if not self.requested.is_set():
            self._summary.stopped_by = "signal"
        self.requested.set()
        self._wake.set()

    def install_signal_handlers(self) -> None:
        def handler(signum: int, frame: FrameType | None) -> None:
            self._log.info(
                "received %s: %s",
                signal.Signals(signum).name,
                "cancelling running jobs" if self.requested.is_set() else "stopping after running jobs",
            )
            self.request()

        signal.signal(signal.SIGTERM, handler)
        signal.signal(signal.SIGINT, handler)

    def max_jobs_reached(self) -> bool:
        return self.max_jobs is not None and self._summary.claimed >= self.max_jobs

    def limit_reached(self, now: float, idle: Callable[[], bool]) -> bool:
        """Whether --max-runtime has passed, or --max-jobs was reached and every claimed
        job finished (``idle``: asked only then)."""
        if self.max_runtime is not None and now - self._started >= self.max_runtime:
            self._log.info("--max-runtime %g s reached: stopping like on SIGTERM", self.max_runtime)
            self.request()
            self._summary.stopped_by = "max-runtime"
            return True
        if self.max_jobs_reached() and idle():
            self._log.info("--max-jobs %d reached and every claimed job finished: exiting", self.max_jobs)
            self._summary.stopped_by = "max-jobs"
            return True
        return False

    def runtime_left(self, now: float) -> float | None:
        """Seconds until --max-runtime ends the run, or None without one."""
        return None if self.max_runtime is None else self._started + self.max_runtime - now
