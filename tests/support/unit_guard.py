"""What keeps tests/unit a unit tier: no subprocess, and no thread that outlives its test.

tests/unit/conftest.py applies both to every unit test (an autouse fixture); the unit
tier's own tests (tests/unit/test_tier_guard.py) check that each guard fails when it
should. A test that needs a process or a runner thread belongs outside tests/unit (issue
27's levels: integration, a Runner over a temp spool, and up).
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

# A thread a test started may still be ending when the test returns (a cancelled
# threading.Timer wakes, sees the cancel and exits): it gets this long, on a loaded host.
THREAD_GRACE_S = 5.0


class UnitTierViolation(AssertionError):
    """A unit test started a process, or left a thread running."""


class ProcessGuard:
    """Refuses every way this package starts a process (see :func:`no_processes`), and
    remembers each attempt: a test that catches the refusal still fails at its end."""

    def __init__(self) -> None:
        self.attempts: list[str] = []

    def refuse(self, *args: Any, **kwargs: Any) -> Any:
        # A bound method on Popen too: its first argument is the argv, not the Popen.
        first = args[0] if args else "fork"
        what = " ".join(map(str, first)) if isinstance(first, list | tuple) else str(first)
        self.attempts.append(what)
        raise UnitTierViolation(
            f"a unit test started a process ({what}): test the code without it, or move the test out of tests/unit"
        )


@contextmanager
def no_processes() -> Iterator[ProcessGuard]:
    """Inside the block, every way this package starts a process raises UnitTierViolation:
    ``subprocess`` (Popen, run, check_output... all end in ``Popen._execute_child``),
    ``os.system``, ``os.posix_spawn[p]`` and ``os.fork``."""
    guard = ProcessGuard()
    saved = {
        (subprocess.Popen, "_execute_child"): subprocess.Popen._execute_child,  # type: ignore[attr-defined]
        (os, "system"): os.system,
        (os, "posix_spawn"): os.posix_spawn,
        (os, "posix_spawnp"): os.posix_spawnp,
        (os, "fork"): os.fork,
    }
    for owner, name in saved:
        setattr(owner, name, guard.refuse)
    try:
        yield guard
    finally:
        for (owner, name), original in saved.items():
            setattr(owner, name, original)


def leftover_threads(before: set[threading.Thread], grace: float = THREAD_GRACE_S) -> list[str]:
    """The names of threads alive now that were not in ``before``, once each has had up to
    ``grace`` seconds (in all) to end."""
    deadline = time.monotonic() + grace
    left = []
    for thread in threading.enumerate():
        if thread in before or thread is threading.current_thread():
            continue
        thread.join(max(0.0, deadline - time.monotonic()))
        if thread.is_alive():
            left.append(thread.name)
    return sorted(left)


@contextmanager
def no_lingering_threads(grace: float = THREAD_GRACE_S) -> Iterator[None]:
    """Raise UnitTierViolation when the block leaves a thread running (see leftover_threads)."""
    before = set(threading.enumerate())
    yield
    left = leftover_threads(before, grace)
    if left:
        raise UnitTierViolation(
            f"a unit test left threads running: {', '.join(left)} (stop them in the test, "
            "or move the test out of tests/unit)"
        )
