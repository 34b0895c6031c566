"""The small pieces of text that ``status``, ``show`` and ``list`` share: an age, a table,
a split job's chunk counts.
"""

from __future__ import annotations

from typing import Any


def short_age(seconds: float | None) -> str:
    """``45s``, ``12m``, ``3.5h``, ``2.0d`` (``-``: unknown): an age or a time left, signless."""
    if seconds is None:
        return "-"
    seconds = abs(seconds)
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    if seconds < 172800:
        return f"{seconds / 3600:.1f}h"
    return f"{seconds / 86400:.1f}d"


def table_lines(header: list[str], rows: list[list[str]], indent: str = "  ") -> list[str]:
    """``header`` and ``rows`` as lines of left-aligned columns, two spaces apart."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    fmt = indent + "  ".join(f"{{:<{w}}}" for w in widths)
    return [fmt.format(*header).rstrip(), *(fmt.format(*r).rstrip() for r in rows)]


def describe_chunks(c: dict[str, Any]) -> str:
    """``2/4 done, 1 running, 1 waiting`` for people."""
    text = f"{c['done']}/{c['count']} done, {c['running']} running, {c['waiting']} waiting"
    if c["failed"]:
        text += f", {c['failed']} failed"
    if c["missing"]:
        text += f", {c['missing']} to queue again"
    return text
