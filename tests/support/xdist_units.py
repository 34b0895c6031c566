"""The work units pytest-xdist's loadgroup scheduler hands out, and the order
tests/conftest.py gives them (the longest first)."""

from __future__ import annotations

import pytest


def longest_first(items: list[pytest.Item]) -> list[pytest.Item]:
    """``items`` with the work units (an ``xdist_group``, else a test) likely to take longest
    first: those with a test marked ``slow``, then those with one marked ``remotion``, then the
    others; within a rank the units of more tests first, then collection order (a unit's
    tests keep theirs). A worker that draws a long unit late ends the run alone
    (pytest-xdist gives each worker up to three units ahead, in this order). Only on xdist
    workers: a run in one process keeps pytest's order, so that a module's tests stay
    together around its module fixtures."""
    ranks: dict[str, int] = {}
    sizes: dict[str, int] = {}
    for item in items:
        unit = unit_of(item)
        rank = 0 if item.get_closest_marker("slow") else 1 if item.get_closest_marker("remotion") else 2
        ranks[unit] = min(rank, ranks.get(unit, rank))
        sizes[unit] = sizes.get(unit, 0) + 1
    return sorted(items, key=lambda item: (ranks[unit_of(item)], -sizes[unit_of(item)]))  # stable


def unit_of(item: pytest.Item) -> str:
    """The work unit pytest-xdist's loadgroup scheduler sees: the test's xdist_group, else the test."""
    mark = item.get_closest_marker("xdist_group")
    if mark is None:
        return item.nodeid
    return str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))
