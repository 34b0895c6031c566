"""One wording for every benchmark's goal line, so `bench/report.py` and readers can find them.

A goal line is ``goal <what> <bound>: <measured> -> met`` (or ``-> MISSED``); a script
prints one per goal of its issue, computed from the figures it just measured.
"""

from __future__ import annotations


def goal(what: str, measured: str, ok: bool) -> str:
    return f"goal {what}: {measured} -> {'met' if ok else 'MISSED'}"
