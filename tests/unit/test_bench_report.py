"""bench/README.md's goals table is what bench/report.py builds from the recorded blocks.

Blocks measured in different branches merge as text; the table built in each branch does
not (a merge once left a blank line that split the table, and its last rows fell out of
it). `bench/report.py --table` rebuilds it without running anything.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

BENCH = Path(__file__).resolve().parents[2] / "bench"


def load_report() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_report", BENCH / "report.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while building
    spec.loader.exec_module(module)
    return module


def test_the_goals_table_is_built_from_every_benchmarks_recorded_goal_lines() -> None:
    report = load_report()
    text = (BENCH / "README.md").read_text()
    start, stop = report.block(text, "goals")
    assert text[start:stop] == report.goals_table(text), "run: .venv/bin/python bench/report.py --table"
    rows = text[start:stop].splitlines()
    recorded = 0
    for bench in report.BENCHMARKS:
        b_start, b_stop = report.block(text, bench.name)  # every benchmark has its block
        recorded += len(report.GOAL.findall(text[b_start:b_stop]))
    assert len(rows) == 2 + recorded and all(row.startswith("|") for row in rows)
    assert any(row.startswith("| Dashboard paging at scale |") for row in rows)
    assert any(row.startswith("| Upload intake |") for row in rows)
