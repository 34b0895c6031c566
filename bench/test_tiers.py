#!/usr/bin/env python3
"""The unit tier alone (issue 27 item 5: tests by level): its wall time, serially and on
pytest-xdist workers, and which of the package's modules it does not import.

Goals (issue 27): ``pytest tests/unit`` takes <= 60 s on 2 cores, and the unit tier alone
imports every module of the package. Modules are counted two ways:

* imported: in ``sys.modules`` at the end of a serial run of the tier (collection and the
  tests, lazy imports included; a module imported by another one counts), which is the
  issue's measure;
* named: imported by name in a file of tests/unit or of the tests/support modules those
  import (read from the source, as tests/unit/test_import_graph.py reads the package): what
  the tier's tests use directly.
* named by no test: imported by name in no file of tests/ at all (any tier, any helper):
  the modules only other modules' tests reach.

A ``__main__`` module is counted apart: importing it runs the program, which exits, so it
never stays in ``sys.modules`` (tests/unit runs ``spoolrender.cli.__main__`` in-process).

Runs ``python -m pytest -p no:cacheprovider -q tests/unit`` once per worker count given
(0: one process; N: ``-n N --dist loadgroup``, as scripts/test.sh does), ``--runs`` times
each, alternating, and prints each run's wall time, the median per count, pytest's closing
line and the load average before and after (a loaded machine stretches every figure).

Reproduce:  .venv/bin/python bench/test_tiers.py [--workers 0 2] [--runs 3]
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))

from goals import goal  # noqa: E402

PACKAGE = REPO / "spoolrender"
UNIT = "tests/unit"
UNIT_GOAL_S = 60.0  # issue 27: the unit tier on 2 cores
# Run in the child: the tier in this process, then the package's modules it imported.
IMPORTED = """
import json, sys
import pytest
status = pytest.main(["-p", "no:cacheprovider", "-q", "-n", "0", {unit!r}])
names = sorted(m for m in sys.modules if m == "spoolrender" or m.startswith("spoolrender."))
with open({out!r}, "w") as fh:
    json.dump({{"status": int(status), "modules": names}}, fh)
"""


def package_modules() -> set[str]:
    names = set()
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(REPO).with_suffix("").parts
        names.add(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def named_in(paths: list[Path], modules: set[str]) -> set[str]:
    """The package's modules that the files at ``paths`` import by name, anywhere in them."""
    found: set[str] = set()
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names if alias.name in modules)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                submodules = {f"{node.module}.{alias.name}" for alias in node.names} & modules
                found |= submodules
                if node.module in modules and len(submodules) < len(node.names):
                    found.add(node.module)
    return found


def helpers_of(paths: list[Path]) -> list[Path]:
    """The tests/support modules that the files at ``paths`` import (``from support.X``)."""
    found = set()
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("support."):
                found.add(REPO / "tests" / Path(*node.module.split(".")).with_suffix(".py"))
    return sorted(found)


def imported_by_tier() -> tuple[int, set[str]]:
    """pytest's exit status and the package's modules in sys.modules after the tier ran."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "modules.json"
        code = IMPORTED.format(unit=UNIT, out=str(out))
        subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, check=False)
        data = json.loads(out.read_text())
    return data["status"], set(data["modules"])


def pytest_argv(workers: int) -> list[str]:
    argv = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q"]
    if workers > 0:
        argv += ["-n", str(workers), "--dist", "loadgroup"]
    return [*argv, UNIT]


def load() -> str:
    return " ".join(f"{value:.1f}" for value in os.getloadavg())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[0, 2], help="worker counts (0: serial)")
    parser.add_argument("--runs", type=int, default=3, help="runs per worker count, the median is the figure (0: none)")
    args = parser.parse_args()
    print(f"cores: {os.cpu_count()}")
    modules = package_modules()
    status, imported = imported_by_tier()
    unit_files = sorted((REPO / UNIT).rglob("*.py"))
    unit_files += helpers_of(unit_files)
    named = named_in(unit_files, modules)
    programs = sorted(m for m in modules if m.endswith(".__main__"))
    modules -= set(programs)
    missing = sorted(modules - imported)
    print(f"package modules: {len(modules)} (and {len(programs)} program: {', '.join(programs)})")
    print(f"imported by the unit tier (sys.modules after a serial run, exit {status}): {len(imported & modules)}")
    print(f"named by an import in {UNIT}/ or the tests/support modules it uses: {len(named)}")
    unnamed = sorted(modules - named_in(sorted((REPO / "tests").rglob("*.py")), modules))
    print(f"named by no test at all ({len(unnamed)}): {', '.join(unnamed)}")
    print(f"not imported by the unit tier ({len(missing)}):")
    for name in missing:
        print(f"  {name}")
    walls: dict[int, list[float]] = {w: [] for w in args.workers}
    for run in range(args.runs):
        for workers in args.workers:
            argv = pytest_argv(workers)
            before = load()
            start = time.monotonic()
            proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, check=False)
            wall = time.monotonic() - start
            walls[workers].append(wall)
            lines = proc.stdout.strip().splitlines()
            closing = lines[-1] if lines else "(no output)"
            print(f"run {run + 1}, workers {workers}: {wall:.1f} s wall, exit {proc.returncode}: {closing}")
            print(f"  load average (1/5/15 min) before: {before}, after: {load()}")
            status = status or proc.returncode
    for workers, times in walls.items():
        if not times:
            continue  # --runs 0: the modules only
        print(f"command: {' '.join(pytest_argv(workers))}")
        print(f"  workers {workers}: median {statistics.median(times):.1f} s of {len(times)} runs")
    if walls.get(2):
        median = statistics.median(walls[2])
        print(goal(f"unit tier <= {UNIT_GOAL_S:.0f} s on 2 workers", f"{median:.1f} s", median <= UNIT_GOAL_S))
    covered = len(imported & modules)
    print(goal("the unit tier imports every package module", f"{covered} of {len(modules)}", not missing))
    print("reproduce: .venv/bin/python bench/test_tiers.py " + " ".join(
        ["--workers", *map(str, args.workers), "--runs", str(args.runs)]))  # fmt: skip
    return status


if __name__ == "__main__":
    sys.exit(main())
