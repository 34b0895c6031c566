"""How one run of a job ended: what the runner loop, its metrics and the live display read of it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RunEnd:
    """How a run ended: the job's new state, and what metrics count."""

    state: str  # done, failed, retry, or lost (taken over by another runner)
    outcome: str  # done, failed, retry, requeue, lost
    attempts: int | None
    duration: float | None
    error_kind: str | None = None  # the recorded error's kind (a run may end otherwise than asked)
    error_message: str | None = None  # and its message (the live display's last failures)
    warnings: tuple[str, ...] = ()  # what the run went ahead despite (records.WARNINGS_KEY)
