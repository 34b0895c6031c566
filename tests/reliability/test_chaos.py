"""Bounded chaos for CI: runners SIGKILLed at random while they render; the disk decides."""

from __future__ import annotations

from pathlib import Path

import pytest
from chaos import run_chaos


@pytest.mark.slow
def test_random_sigkills_lose_nothing_and_publish_once(tmp_path: Path) -> None:
    report = run_chaos(tmp_path, jobs=150, runners=3, kills=12, seed=20261130, timeout=300)
    assert report.audit.ok, report.audit.problems()
    assert report.kills == 12
    assert report.audit.states["done"] == 150
    assert report.renders >= 150
    assert report.alarms == [] and report.leftovers == []
    print(report.row())


@pytest.mark.slow
def test_random_kills_and_freezes_past_the_lease_lose_nothing(tmp_path: Path) -> None:
    """Issue 12: runners frozen past the lease (their jobs recovered meanwhile) wake up among
    SIGKILLs: no phantom in failed/, nothing lost or published twice, no ERROR logged, and
    no beacon or clock probe of a dead runner left behind."""
    report = run_chaos(tmp_path, jobs=150, runners=3, kills=8, freezes=6, seed=20261201, timeout=300)
    assert report.audit.ok, report.audit.problems()
    assert (report.kills, report.freezes) == (8, 6)
    assert report.audit.states["done"] == 150 and report.audit.states["failed"] == 0
    assert report.alarms == [] and report.leftovers == []
    print(report.row())


@pytest.mark.slow
def test_random_kills_and_freezes_among_split_jobs_lose_nothing_and_publish_once(tmp_path: Path) -> None:
    """Issue 14: jobs rendered in chunks (their chunks claimed by every runner, joined by
    one) among whole jobs, with SIGKILLs and freezes at random: every job published once
    with every frame in order, no chunk entry, ledger or chunk file left over."""
    report = run_chaos(tmp_path, jobs=40, split_jobs=10, runners=3, kills=8, freezes=3, seed=20261214, timeout=300)
    assert report.audit.ok, report.audit.problems()
    assert (report.kills, report.freezes) == (8, 3)
    assert report.audit.states["done"] == 50 and report.audit.states["failed"] == 0
    assert report.alarms == [] and report.leftovers == []
    print(report.row())
