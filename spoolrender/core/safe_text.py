"""Spool text made safe to show a person: control characters escaped, long text cut.

Job ids are checked, but much of what the human-readable outputs echo is not: incoming
file names, render errors (a renderer's last stderr line), pause reasons, host names and
paths. A name such as ``"\\x1b]0;pwned\\x07x.yaml"`` must not retitle the operator's
terminal, and a newline inside a reason must not forge a line of ``status``. Everything a
command prints for people goes through :func:`printable`; JSON output needs nothing
(``json.dumps`` escapes control characters itself).
"""

from __future__ import annotations

import re
import unicodedata

# C0 and C1 controls and DEL (Cc: the terminal escapes ESC and CSI are among them),
# line/paragraph separators (Zl, Zp: newlines to some terminals and viewers), format
# characters such as the bidi overrides (Cf: text that displays in another order than it
# reads) and lone surrogates (Cs: undecodable bytes of a file name, which would make
# print() raise on a UTF-8 stdout).
_UNSAFE_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t", "\\": "\\\\"}
ELLIPSIS = "…"


def _escape(char: str) -> str:
    if char in _NAMED:  # (a backslash reaches here only when it is to be doubled)
        return _NAMED[char]
    code = ord(char)
    if 0xDC80 <= code <= 0xDCFF:  # os.fsdecode's surrogateescape: show the original byte
        return f"\\x{code - 0xDC00:02x}"
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def printable(text: object, *, double_backslashes: bool = True) -> str:
    """``text`` (``str()`` of it) with every control character shown as an escape.

    A backslash is doubled, so an escape in the output always means the character was
    there, never that the text spelt one out. Logs keep single backslashes
    (``double_backslashes=False``): their fields are often JSON-quoted already, and an
    escape spelt out in a log line can no longer do harm.
    """
    s = str(text)
    doubled = double_backslashes and "\\" in s
    if s.isprintable() and not doubled:  # the common case, in C
        return s
    return "".join(
        _escape(c) if (c == "\\" and double_backslashes) or unicodedata.category(c) in _UNSAFE_CATEGORIES else c
        for c in s
    )


def has_control_characters(text: str) -> bool:
    """True if :func:`printable` would escape something other than a backslash."""
    return not text.isprintable() and any(unicodedata.category(c) in _UNSAFE_CATEGORIES for c in text)


_SPACE = re.compile(r"\s+")


def shorten(text: str, width: int) -> str:
    """The first line of ``text``, cut at a word boundary to ``width`` with an ellipsis.

    A single word longer than ``width`` is cut inside it (there is no better place), and
    a reason with more lines than one gets the ellipsis too, so nothing is cut silently.
    """
    lines = text.strip().splitlines() or [""]
    first = _SPACE.sub(" ", lines[0]).strip()
    cut = len(lines) > 1
    if len(first) > width:
        head = first[: width - len(ELLIPSIS) + 1]
        space = head.rfind(" ")
        first = (head[:space] if space > width // 3 else head[: width - len(ELLIPSIS)]).rstrip(" ,;:.-")
        cut = True
    return first + ELLIPSIS if cut else first
