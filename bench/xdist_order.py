#!/usr/bin/env python3
"""How long the suite's pytest-xdist run takes with each order of work units, replayed from
the per-test times of a real run (issue 27: the whole suite <= 15 minutes on 2 cores).

Reads a JUnit XML of a whole run (``pytest --junitxml FILE``: each test's setup + call +
teardown), collects the suite here (its groups and marks as tests/conftest.py makes them),
and replays both orders through a model of pytest-xdist 3.8's loadgroup scheduler (a unit
goes to a worker while that worker has at most two tests pending): xdist's own order (units
sorted by their number of tests) and tests/conftest.py's ``longest_first``. Prints each
order's finish and every worker's busy time. A replay: the times of one loaded run, not a
measurement of the other order (compare with ``bench/suite_time.py`` runs side by side).

Reproduce:  .venv/bin/python bench/xdist_order.py ci.xml [--workers 4]
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import heapq
import io
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
from support.xdist_units import longest_first, unit_of  # noqa: E402  (tests/ is not a package)


class Collector:
    """The suite's items in collection order, with their groups (after conftest's hook)."""

    def __init__(self) -> None:
        self.items: list[pytest.Item] = []

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        self.items = list(items)


def junit_times(path: Path) -> dict[tuple[str, str], float]:
    """(classname, name without xdist's ``@group``) -> seconds."""
    times: dict[tuple[str, str], float] = {}
    for case in ET.parse(path).iter("testcase"):
        name = case.get("name", "")
        if name.rfind("@") > name.rfind("]"):
            name = name[: name.rfind("@")]
        times[(case.get("classname", ""), name)] = float(case.get("time", "0"))
    return times


def junit_key(nodeid: str) -> tuple[str, str]:
    path, _, rest = nodeid.partition("::")
    *classes, name = rest.split("::")
    return ".".join([path.removesuffix(".py").replace("/", "."), *classes]), name


def replay(units: list[list[str]], seconds: dict[str, float], workers: int) -> tuple[float, list[float]]:
    """pytest-xdist 3.8's LoadScopeScheduling: each worker gets a unit, then another while it
    has at most two tests pending; returns the finish and each worker's busy time."""
    queue = collections.deque(units)
    pending: list[collections.deque[str]] = [collections.deque() for _ in range(workers)]
    busy = [0.0] * workers

    def assign(worker: int) -> None:
        if queue:
            pending[worker].extend(queue.popleft())

    for worker in range(workers):
        assign(worker)
    for worker in range(workers):
        if len(pending[worker]) <= 2:
            assign(worker)
    running = [(seconds[pending[w][0]], w) for w in range(workers) if pending[w]]
    heapq.heapify(running)
    finish = 0.0
    while running:
        now, worker = heapq.heappop(running)
        busy[worker] += seconds[pending[worker].popleft()]
        finish = max(finish, now)
        if len(pending[worker]) <= 2:
            assign(worker)
        if pending[worker]:
            heapq.heappush(running, (now + seconds[pending[worker][0]], worker))
    return finish, busy


def units_in_order(items: list[pytest.Item], by_size: bool) -> list[list[str]]:
    units: dict[str, list[str]] = {}
    for item in items:
        units.setdefault(unit_of(item), []).append(item.nodeid)
    ordered = list(units.values())
    return sorted(ordered, key=lambda ids: -len(ids)) if by_size else ordered


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("junit", type=Path, help="JUnit XML of a whole run (pytest --junitxml)")
    parser.add_argument("--workers", type=int, default=4)
    args = parser.parse_args()
    collector = Collector()
    listing = io.StringIO()
    with contextlib.redirect_stdout(listing):  # the collected ids: only the errors matter
        status = pytest.main(
            ["--collect-only", "-q", "-p", "no:cacheprovider", str(REPO / "tests")], plugins=[collector]
        )
    if status:
        print(listing.getvalue())
        return 1
    times = junit_times(args.junit)
    seconds = {item.nodeid: times.get(junit_key(item.nodeid), 0.0) for item in collector.items}
    missing = sum(1 for item in collector.items if junit_key(item.nodeid) not in times)
    print(f"{args.junit}: {len(times)} tests, {sum(times.values()):.0f} s in all; "
          f"{missing} collected here had no time (0 s)")  # fmt: skip
    for label, units in (
        ("xdist's order (units by test count)", units_in_order(collector.items, by_size=True)),
        ("tests/conftest.py's longest_first", units_in_order(longest_first(collector.items), by_size=False)),
    ):
        finish, busy = replay(units, seconds, args.workers)
        print(f"{label}: finish {finish:.0f} s; workers busy {', '.join(f'{b:.0f}' for b in busy)} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
