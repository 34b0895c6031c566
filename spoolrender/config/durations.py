"""Durations as people type them: a number and a unit (``90s``, ``15m``, ``12h``, ``30d``, ``2w``).

The unit is required wherever a duration is typed: ``purge --older-than 30`` once meant 30
seconds to the program and 30 days to the person typing it, and purged everything. A bare
number is accepted only where the name says the unit (a ``SECONDS`` flag, a setting
named ``*_seconds``), and there it is seconds.
"""

from __future__ import annotations

import math
import re

from spoolrender.errors import SpoolrenderError

UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
EXAMPLES = "90s, 15m, 12h, 30d, 2w"
DURATION = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*")


def parse_duration(text: str, *, bare_seconds: bool = False) -> float:
    """``text`` as seconds; a bare number only with ``bare_seconds`` (the name says seconds)."""
    m = DURATION.fullmatch(text)
    if m is None:
        form = "a number of seconds (2, 0.5) or " if bare_seconds else ""
        raise SpoolrenderError(f"invalid duration {text!r}: use {form}a number and a unit, e.g. {EXAMPLES}")
    if not m.group(2) and not bare_seconds:
        raise SpoolrenderError(
            f"duration {text!r} has no unit: write {m.group(1)}s, {m.group(1)}m, {m.group(1)}h or {m.group(1)}d "
            f"(s, m, h, d, w: seconds to weeks)"
        )
    seconds = float(m.group(1)) * UNITS[m.group(2) or "s"]
    if not math.isfinite(seconds):
        raise SpoolrenderError(f"duration {text!r} is too long")
    return seconds
