"""What a runner is doing now, for its live display (``run`` on a terminal): each slot's job,
progress and ETA, the run's totals and its last failures.

Read off the runner's own state: its active claims and the progress its renderers report
to the heartbeat (the same figures every heartbeat file and ``status`` carry); nothing
here is estimated beyond the ETA, computed as ``status`` computes it.
"""

from __future__ import annotations

from dataclasses import dataclass

RECENT_FAILURES_SHOWN = 5


def eta_seconds(elapsed: float, progress: float | None) -> float | None:
    """Time left at the pace so far (None before any progress, or when it is complete)."""
    if not progress or not 0 < progress < 1:
        return None
    return max(0.0, elapsed) * (1 - progress) / progress


@dataclass(frozen=True)
class SlotView:
    slot: int
    job_id: str | None  # None: idle
    run: int | None = None
    progress: float | None = None  # 0 to 1, as the renderer reported it
    stage: str | None = None
    elapsed: float | None = None
    eta: float | None = None

    def __post_init__(self) -> None:
        if self.progress is not None and not 0 <= self.progress <= 1:
            raise ValueError(f"progress must be from 0 to 1, got {self.progress}")


@dataclass(frozen=True)
class FailureView:
    job_id: str
    state: str  # "failed" (for good) or "retry" (another attempt later)
    kind: str | None
    message: str | None
    at: float  # wall clock


@dataclass(frozen=True)
class RunnerView:
    """One frame of the live display."""

    slots: tuple[SlotView, ...]
    claimed: int
    done: int
    failed: int
    retried: int
    requeued: int
    waiting: int  # jobs waiting in the spool at the last scan (incoming and due retries)
    drain: bool
    stopping: bool
    paused: bool
    failures: tuple[FailureView, ...]  # newest first

    @property
    def running(self) -> int:
        return sum(1 for s in self.slots if s.job_id is not None)
