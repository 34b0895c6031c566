"""Waiting for a condition with a generous deadline, never for a fixed time."""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_for(predicate: Callable[[], bool], timeout: float = 60.0, interval: float = 0.05) -> None:
    """Until ``predicate()``; the deadline is generous (a loaded machine slows every step), as
    it costs nothing when the condition comes."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(interval)
    raise AssertionError(f"condition not met within {timeout} s")
