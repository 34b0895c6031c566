"""The unit tier's guards on every test of tests/unit: a test that starts a process, or
leaves a thread running, fails (tests/support/unit_guard.py says why and what to do)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from support.unit_guard import ProcessGuard, UnitTierViolation, no_lingering_threads, no_processes

from spoolrender.run.deadlines import DEADLINES


@pytest.fixture(autouse=True, scope="session")
def process_timeout_thread() -> None:
    """The process's one timeout thread (spoolrender.run.deadlines) is started at the first
    deadline armed and lives as long as the process, by design: started here, before any
    test's guard looks, so that the first test to run a job is not charged with it (it was:
    "left threads running: deadlines", and a 5 s wait for it to end)."""
    DEADLINES.call_after(0, lambda: None)


@pytest.fixture(autouse=True)
def process_guard(process_timeout_thread: None) -> Iterator[ProcessGuard]:
    """Every unit test's: a process it tried to start fails it, even if it caught the refusal."""
    with no_lingering_threads(), no_processes() as guard:
        yield guard
    if guard.attempts:
        raise UnitTierViolation(f"a unit test tried to start processes: {guard.attempts}")
