"""The unit tier stays one: its conftest refuses processes, and a thread left running
fails the test that left it (support/unit_guard.py)."""

from __future__ import annotations

import os
import subprocess
import threading

import pytest
from support.unit_guard import ProcessGuard, UnitTierViolation, leftover_threads, no_lingering_threads, no_processes


def test_every_unit_test_runs_with_processes_refused(process_guard: ProcessGuard) -> None:
    # No no_processes() here: tests/unit/conftest.py's autouse fixture is what refuses.
    with pytest.raises(UnitTierViolation, match="a unit test started a process"):
        subprocess.run(["true"], check=False)
    with pytest.raises(UnitTierViolation):
        subprocess.check_output(["echo", "hi"])
    with pytest.raises(UnitTierViolation):
        os.system("true")
    with pytest.raises(UnitTierViolation):
        os.posix_spawn("/bin/true", ["true"], {})
    with pytest.raises(UnitTierViolation):
        os.fork()
    # Each attempt is remembered: caught or not, it fails the test at its end (conftest).
    assert process_guard.attempts == ["true", "echo hi", "true", "/bin/true", "fork"]
    process_guard.attempts.clear()  # this test's attempts were the point


def test_the_process_guard_puts_back_what_it_replaced(monkeypatch: pytest.MonkeyPatch) -> None:
    def system(command: str) -> int:
        return 0

    monkeypatch.setattr(os, "system", system)
    with no_processes():
        assert os.system is not system
        with pytest.raises(UnitTierViolation):
            os.system("true")
    assert os.system is system


def test_a_thread_that_outlives_its_block_is_named() -> None:
    release = threading.Event()
    before = set(threading.enumerate())
    lingering = threading.Thread(target=release.wait, name="unit-lingering", daemon=True)
    quick = threading.Thread(target=lambda: None, name="unit-quick", daemon=True)
    lingering.start()
    quick.start()
    try:
        assert leftover_threads(before, grace=0.05) == ["unit-lingering"]  # the quick one had its grace
        # unit-lingering was there before the block: not the block's.
        with pytest.raises(UnitTierViolation, match=r"left threads running: unit-inner \("), no_lingering_threads(0.05):
            threading.Thread(target=release.wait, name="unit-inner", daemon=True).start()
    finally:
        release.set()
    assert leftover_threads(before) == []
