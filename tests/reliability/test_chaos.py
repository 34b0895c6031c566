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
    print(report.row())
