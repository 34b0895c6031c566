"""One rule for how long to wait before trying again, for everything spoolrender retries.

A job's failed attempt (``backoff_base_seconds``/``backoff_cap_seconds``: executor,
recovery), a hook's failed delivery (its ``backoff_seconds``: hooks/dispatcher.py), a claim that
failed (intake/scan.py's blocked entries) and a write the spool's filesystem refused
(spool/io_trouble.py) all wait by one :class:`RetryPolicy`: the base doubled per failure after the
first, capped, with or without "equal jitter". procrastinate's ``RetryStrategy`` is the
model: one frozen object says both whether to try again (``max_attempts``) and when
(:meth:`RetryPolicy.retry_in`). The named policies are in spoolrender.defaults.

This module imports nothing from the package, so any module may import it.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, replace


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff: ``min(cap, base * 2 ** (failures - 1))`` seconds after the
    ``failures``-th failure in a row, halved and topped up by a random half when jittered.

    ``jitter`` ("equal jitter"): half the wait fixed, half random. The fixed half keeps
    retries from hammering a broken dependency; the random half spreads out the jobs that
    all failed at the same moment (a browser crash, a full disk). ``max_attempts``: tries in
    all, the first included (None: the policy sets no limit; its user stops by itself).
    """

    base_seconds: float
    cap_seconds: float
    jitter: bool = False
    max_attempts: int | None = None

    def __post_init__(self) -> None:
        for name in ("base_seconds", "cap_seconds"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
                raise ValueError(f"RetryPolicy.{name}: expected seconds >= 0, got {value!r}")
        if self.cap_seconds < self.base_seconds:
            raise ValueError(
                f"RetryPolicy: cap_seconds {self.cap_seconds!r} is below base_seconds {self.base_seconds!r}"
            )
        if not isinstance(self.jitter, bool):
            raise ValueError(f"RetryPolicy.jitter: expected True or False, got {self.jitter!r}")
        attempts = self.max_attempts
        if attempts is not None and (isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 1):
            raise ValueError(f"RetryPolicy.max_attempts: expected a whole number >= 1 or None, got {attempts!r}")

    def delay(self, failures: int, rng: random.Random | None = None) -> float:
        """The wait in seconds after the ``failures``-th failure in a row (1: the first).

        A jittered policy draws one ``rng.random()`` per call (and needs ``rng``); an
        unjittered one draws nothing. Any number of failures gives at most the cap: the
        doubling is a float ``ldexp`` (exactly ``base * 2 ** n`` wherever that is finite),
        so a condition that lasts thousands of tries never overflows.
        """
        try:
            doubled = math.ldexp(self.base_seconds, max(0, failures - 1))
        except OverflowError:
            doubled = math.inf
        wait = min(self.cap_seconds, doubled)
        if not self.jitter:
            return float(wait)
        if rng is None:
            raise ValueError("a jittered RetryPolicy needs an rng")
        return float(wait / 2 + rng.random() * wait / 2)

    def attempts_left(self, failures: int) -> bool:
        """Whether another try may follow ``failures`` failed ones."""
        return self.max_attempts is None or failures < self.max_attempts

    def retry_in(self, failures: int, rng: random.Random | None = None) -> float | None:
        """procrastinate's ``get_schedule_in``: the wait before the next try after the
        ``failures``-th failed one, or None when no attempt is left (``rng`` untouched then)."""
        if not self.attempts_left(failures):
            return None
        return self.delay(failures, rng)

    def with_attempts(self, max_attempts: int | None) -> RetryPolicy:
        """This policy for a user whose own limit applies (a job's ``max_attempts``)."""
        return replace(self, max_attempts=max_attempts)
