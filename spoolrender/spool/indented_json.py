"""The spool's JSON records as ``json.dumps(obj, indent=2, sort_keys=True, default=str)``
writes them, byte for byte, without the standard library's pure-Python encoder.

CPython's json module encodes in C only when ``indent`` is None: with an indent it runs its
generator-based Python encoder, which was a tenth of the runner's time per no-op job (P2 in
bench/README.md). The records stay indented (operators read them with ``cat``; older
runners read either form): this builds the same text with one recursive function, the C
string escaper and the same number formatting. tests/unit/test_indented_json.py compares
it with ``json.dumps`` on the records corpus and on every kind of value json handles.
"""

from __future__ import annotations

from json.encoder import encode_basestring_ascii
from typing import Any

_INFINITY = float("inf")


def dumps_indented(obj: Any) -> str:
    """``json.dumps(obj, indent=2, sort_keys=True, default=str)``, the same string."""
    if isinstance(obj, str):
        return encode_basestring_ascii(obj)
    parts: list[str] = []
    _encode(obj, parts, "\n", set())
    return "".join(parts)


def _float(value: float) -> str:
    # json.encoder's floatstr with allow_nan=True.
    if value != value:
        return "NaN"
    if value == _INFINITY:
        return "Infinity"
    if value == -_INFINITY:
        return "-Infinity"
    return float.__repr__(value)


def _key(key: Any) -> str:
    # json.encoder's order of key conversions (skipkeys=False).
    if isinstance(key, str):
        return key
    if isinstance(key, float):
        return _float(key)
    if key is True:
        return "true"
    if key is False:
        return "false"
    if key is None:
        return "null"
    if isinstance(key, int):
        return int.__repr__(key)
    raise TypeError(f"keys must be str, int, float, bool or None, not {key.__class__.__name__}")


def _enter(value: Any, markers: set[int]) -> int:
    # json.encoder's check_circular: a container inside itself fails as json.dumps fails it
    # (ValueError, at once), not by recursing until RecursionError.
    marker = id(value)
    if marker in markers:
        raise ValueError("Circular reference detected")
    markers.add(marker)
    return marker


def _encode(value: Any, out: list[str], newline: str, markers: set[int]) -> None:
    """Append ``value``'s text to ``out``; ``newline``: a line break and the indent of the
    level ``value`` is on (json.encoder's _iterencode, in its order of type checks);
    ``markers``: the ids of the containers ``value`` is inside."""
    if isinstance(value, str):
        out.append(encode_basestring_ascii(value))
    elif value is None:
        out.append("null")
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif isinstance(value, int):
        out.append(int.__repr__(value))
    elif isinstance(value, float):
        out.append(_float(value))
    elif isinstance(value, list | tuple):
        if not value:
            out.append("[]")
            return
        marker = _enter(value, markers)
        inner = newline + "  "
        separator = "[" + inner
        for item in value:
            out.append(separator)
            _encode(item, out, inner, markers)
            separator = "," + inner
        out.append(newline + "]")
        markers.discard(marker)
    elif isinstance(value, dict):
        if not value:
            out.append("{}")
            return
        marker = _enter(value, markers)
        inner = newline + "  "
        separator = "{" + inner
        for key, item in sorted(value.items()):
            out.append(separator)
            out.append(encode_basestring_ascii(_key(key)))
            out.append(": ")
            _encode(item, out, inner, markers)
            separator = "," + inner
        out.append(newline + "}")
        markers.discard(marker)
    else:
        _encode(str(value), out, newline, markers)  # default=str
