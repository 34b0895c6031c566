#!/usr/bin/env python3
"""The wall time of the whole pytest suite, serially and on pytest-xdist workers (issue 27:
the whole suite <= 15 minutes on an idle 2-core machine).

Runs ``python -m pytest -p no:cacheprovider -q`` once per worker count given (0: one process,
no xdist; N: ``-n N --dist loadgroup``, as scripts/test.sh does), one after the other, and
prints for each the command, its wall time, pytest's closing line and the load average
before and after (a loaded machine stretches every figure: compare runs made side by side).
Extra arguments after ``--`` go to pytest (``-- -m "not remotion"``, ``-- tests/e2e/test_cli.py``).

Reproduce:  .venv/bin/python bench/suite_time.py [--workers 0 4] [-- PYTEST_ARGS...]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def pytest_argv(workers: int, extra: list[str]) -> list[str]:
    argv = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q"]
    if workers > 0:
        argv += ["-n", str(workers), "--dist", "loadgroup"]
    return argv + extra


def load() -> str:
    return " ".join(f"{value:.1f}" for value in os.getloadavg())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[0, 4], help="worker counts (0: serial)")
    parser.add_argument("pytest_args", nargs="*", help="after --: passed to pytest")
    args = parser.parse_args()
    print(f"cores: {os.cpu_count()}")
    status = 0
    for workers in args.workers:
        argv = pytest_argv(workers, args.pytest_args)
        before = load()
        start = time.monotonic()
        proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, check=False)
        wall = time.monotonic() - start
        lines = proc.stdout.strip().splitlines()
        closing = lines[-1] if lines else "(no output)"
        print(f"command: {' '.join(argv)}")
        print(f"  workers {workers}: {wall:.0f} s wall, exit {proc.returncode}: {closing}")
        print(f"  load average (1/5/15 min) before: {before}, after: {load()}")
        status = status or proc.returncode
    return status


if __name__ == "__main__":
    sys.exit(main())
