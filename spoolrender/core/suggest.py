"""Did-you-mean hints for names a person typed: commands, job fields, compositions, job ids.

The matching is the standard library's :func:`difflib.get_close_matches` (ratio of
matching characters), never a hand-written distance. A job id gets one more kind of
match: ids that contain what was typed (``intro`` -> ``intro-welcome``), because an id is
often shortened rather than misspelt, and a prefix of a long id scores below difflib's cutoff.
"""

from __future__ import annotations

import bisect
import difflib
from collections.abc import Iterable

SUGGESTIONS = 3  # at most this many names in one hint
CUTOFF = 0.6  # difflib's default: "stauts" -> "status", "prop" -> "props"
DIFFLIB_POOL = 2000  # at most this many names go through difflib for one hint (_bounded)


def close_matches(word: str, candidates: Iterable[str], *, contained: bool = False) -> list[str]:
    """The candidates closest to ``word``, best first (at most SUGGESTIONS; empty: none close).

    ``contained``: candidates that contain ``word`` come first (for shortened ids); when
    they fill the hint, difflib is not run at all.
    """
    pool = sorted(set(candidates) - {word})
    found: list[str] = []
    if contained and word:
        found = [c for c in pool if word in c]
        found.sort(key=lambda c: (not c.startswith(word), len(c), c))
        if len(found) >= SUGGESTIONS:
            return found[:SUGGESTIONS]
    for match in difflib.get_close_matches(word, _bounded(word, pool), n=SUGGESTIONS, cutoff=CUTOFF):
        if match not in found:
            found.append(match)
    return found[:SUGGESTIONS]


def _bounded(word: str, pool: list[str]) -> list[str]:
    """At most DIFFLIB_POOL of ``pool`` (sorted) for difflib: all of a small pool, else the
    names that share the longest prefix with ``word`` that leaves few enough.

    difflib compares ``word`` with every name (about 0.1 ms each for ids of one shape): over
    100,000 done jobs an unknown id took 13-16 s to be told so. A typo in the first
    characters of an id in such a spool then finds no hint; one past them still does.
    """
    if len(pool) <= DIFFLIB_POOL:
        return pool
    narrowed = pool
    for n in range(1, len(word) + 1):
        start = bisect.bisect_left(narrowed, word[:n])
        end = bisect.bisect_right(narrowed, word[:n] + "\U0010ffff")
        narrowed = narrowed[start:end]
        if len(narrowed) <= DIFFLIB_POOL:
            return narrowed
    return narrowed[:DIFFLIB_POOL]


def did_you_mean(word: str, candidates: Iterable[str], *, contained: bool = False) -> str:
    """``"did you mean 'props'?"`` (or ``'a' or 'b'``), or "" when nothing is close."""
    found = close_matches(word, candidates, contained=contained)
    if not found:
        return ""
    return "did you mean " + " or ".join(repr(m) for m in found) + "?"
