"""The unit tier's guards on every test of tests/unit: a test that starts a process, or
leaves a thread running, fails (tests/support/unit_guard.py says why and what to do)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from support.unit_guard import ProcessGuard, UnitTierViolation, no_lingering_threads, no_processes


@pytest.fixture(autouse=True)
def process_guard() -> Iterator[ProcessGuard]:
    """Every unit test's: a process it tried to start fails it, even if it caught the refusal."""
    with no_lingering_threads(), no_processes() as guard:
        yield guard
    if guard.attempts:
        raise UnitTierViolation(f"a unit test tried to start processes: {guard.attempts}")
