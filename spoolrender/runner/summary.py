"""What a runner's runs came to: the counts ``Runner.run`` returns, the last failures the
live display shows and the warnings the beacon tells.

Slot threads record their runs' ends while the main loop and the display read: one lock
keeps each reader's copy whole.
"""

from __future__ import annotations

import collections
import dataclasses
import threading
import time
from dataclasses import dataclass

from spoolrender import defaults
from spoolrender.ops.runner_view import RECENT_FAILURES_SHOWN, FailureView
from spoolrender.run.run_end import RunEnd
from spoolrender.run.split_runs import CHUNK_OUTCOME_PREFIX


@dataclass
class RunSummary:
    claimed: int = 0
    done: int = 0
    failed: int = 0
    retried: int = 0
    lost: int = 0
    requeued: int = 0
    split: int = 0  # runs that split a job into chunks (or sent it back to wait for them)
    chunks: int = 0  # runs of chunks (spoolrender.chunks), whatever their outcome
    paused: bool = False
    blocked: bool = False  # this host was blocked for failing many jobs (hosts/health.py)
    # Why the run ended: "drained", "signal", "max-jobs", "max-runtime" or "spool-io" (a
    # drain that found the spool's filesystem failing: full, read-only...).
    stopped_by: str = "signal"

    def describe(self) -> str:
        """One line for people: ``drained: 48 claimed, 45 done, 1 to retry, 0 put back, 2 failed``."""
        text = (
            f"{self.stopped_by}: {self.claimed} claimed, {self.done} done, {self.retried} to retry, "
            f"{self.requeued} put back, {self.failed} failed"
        )
        extra = [f"{n} {what}" for n, what in ((self.lost, "lost to another runner"), (self.split, "split into chunks"),
                                                (self.chunks, "chunk runs")) if n]  # fmt: skip
        text += "".join(f", {e}" for e in extra)
        if self.paused:
            text += " (spool paused)"
        if self.blocked:
            text += " (this host blocked)"
        return text


class RunRecords:
    """The summary, the recent failures and the warnings of one runner's runs."""

    def __init__(self) -> None:
        self.summary = RunSummary()
        self._failures: collections.deque[FailureView] = collections.deque(maxlen=RECENT_FAILURES_SHOWN)
        # Each warning this runner's runs went ahead despite (mixed Remotion versions...),
        # with the job that last had it, newest last: told in the beacon for `status`.
        self._warnings: dict[str, str] = {}
        self._lock = threading.Lock()

    def record(self, job_id: str, end: RunEnd) -> None:
        """Count a run's end (any slot's thread)."""
        with self._lock:
            if end.state in ("failed", "retry") and not end.outcome.startswith(CHUNK_OUTCOME_PREFIX):
                self._failures.appendleft(
                    FailureView(job_id, end.state, end.error_kind, end.error_message, time.time())
                )
            field = {"retry": "retried", "requeue": "requeued"}.get(end.outcome, end.outcome)
            if end.outcome.startswith(CHUNK_OUTCOME_PREFIX):
                field = "chunks"
            setattr(self.summary, field, getattr(self.summary, field) + 1)
            for warning in end.warnings:
                self._warnings.pop(warning, None)
                self._warnings[warning] = job_id
            while len(self._warnings) > defaults.RUNNER_WARNINGS_SHOWN:
                del self._warnings[next(iter(self._warnings))]

    def snapshot(self) -> tuple[RunSummary, tuple[FailureView, ...]]:
        """A copy of the summary and the recent failures, newest first."""
        with self._lock:
            return dataclasses.replace(self.summary), tuple(self._failures)

    def warnings_report(self) -> list[dict[str, str]]:
        """The warnings, newest first, each with the job that last had it (the beacon's)."""
        with self._lock:
            return [{"message": message, "job": job} for message, job in reversed(self._warnings.items())]
