"""Check a job's props against a composition's props JSON Schema (what zod 4 emits).

The keywords zod's ``toJSONSchema()`` produces are checked: type, enum, const,
properties, required, additionalProperties, items/prefixItems, the size and range
bounds, pattern, multipleOf, anyOf/oneOf/allOf/not and local ``$ref``. Others (format,
descriptions, defaults) are annotations here, as in JSON Schema's own default. The
submit-time check only helps the person submitting; the composition's own validation in
the render stays the authority, so an unknown keyword never refuses a job.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

_TYPES: dict[str, Callable[[Any], bool]] = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "integer": lambda v: (
        (isinstance(v, int) and not isinstance(v, bool))
        or (isinstance(v, float) and math.isfinite(v) and v.is_integer())
    ),
}
MAX_PROBLEMS = 20


def props_problems(schema: dict[str, Any], props: Any) -> list[str]:
    """Every way ``props`` breaks ``schema``, as ``path: reason`` lines (at most 20)."""
    problems: list[str] = []
    _check(schema, props, "props", schema, problems)
    return problems[:MAX_PROBLEMS]


def _where(path: str, key: str | int) -> str:
    return f"{path}[{key}]" if isinstance(key, int) else f"{path}.{key}"


def _resolve(ref: str, root: dict[str, Any]) -> dict[str, Any] | None:
    if not ref.startswith("#"):
        return None  # a remote reference: nothing we may fetch
    node: Any = root
    for part in (p for p in ref[1:].split("/") if p):
        part = part.replace("~1", "/").replace("~0", "~")
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node if isinstance(node, dict) else None


def _check(schema: Any, value: Any, path: str, root: dict[str, Any], out: list[str]) -> None:
    if schema is False:
        out.append(f"{path}: not allowed")
        return
    if not isinstance(schema, dict):
        return  # true, or not a schema at all: nothing to check
    if isinstance(schema.get("$ref"), str):
        target = _resolve(schema["$ref"], root)
        if target is not None:
            _check(target, value, path, root, out)
    if not _check_type(schema, value, path, out):
        return
    if "enum" in schema and isinstance(schema["enum"], list) and not any(_same(value, e) for e in schema["enum"]):
        out.append(f"{path}: must be one of {', '.join(_show(e) for e in schema['enum'])}, not {_show(value)}")
    if "const" in schema and not _same(value, schema["const"]):
        out.append(f"{path}: must be {_show(schema['const'])}, not {_show(value)}")
    _check_combinators(schema, value, path, root, out)
    if isinstance(value, dict):
        _check_object(schema, value, path, root, out)
    elif isinstance(value, list):
        _check_array(schema, value, path, root, out)
    elif isinstance(value, str):
        _check_string(schema, value, path, out)
    elif _TYPES["number"](value):
        _check_number(schema, value, path, out)


def _check_type(schema: dict[str, Any], value: Any, path: str, out: list[str]) -> bool:
    wanted = schema.get("type")
    if wanted is None:
        return True
    names = [wanted] if isinstance(wanted, str) else [t for t in wanted if isinstance(t, str)]
    if any(_TYPES.get(name, lambda _v: True)(value) for name in names):
        return True
    out.append(f"{path}: must be {' or '.join(names)}, not {_type_name(value)}")
    return False


def _check_combinators(schema: dict[str, Any], value: Any, path: str, root: dict[str, Any], out: list[str]) -> None:
    for sub in schema.get("allOf") or []:
        _check(sub, value, path, root, out)
    for key in ("anyOf", "oneOf"):
        options = schema.get(key)
        if not isinstance(options, list) or not options:
            continue
        passing = sum(1 for sub in options if not _errors(sub, value, path, root))
        if passing == 0:
            reasons = "; or ".join("; ".join(_errors(sub, value, path, root)[:2]) for sub in options[:3])
            out.append(f"{path}: matches none of the allowed forms ({reasons})")
        elif key == "oneOf" and passing > 1:
            out.append(f"{path}: matches more than one of the allowed forms")
    if "not" in schema and not _errors(schema["not"], value, path, root):
        out.append(f"{path}: is a value that is not allowed")


def _check_object(
    schema: dict[str, Any], value: dict[str, Any], path: str, root: dict[str, Any], out: list[str]
) -> None:
    found = schema.get("properties")
    properties: dict[str, Any] = found if isinstance(found, dict) else {}
    for name in schema.get("required") or []:
        if name not in value:
            out.append(f"{_where(path, name)}: required")
    extra = schema.get("additionalProperties", True)
    for name, item in value.items():
        if name in properties:
            _check(properties[name], item, _where(path, name), root, out)
        elif extra is False:
            known = ", ".join(sorted(properties)) or "none"
            out.append(f"{_where(path, name)}: not a prop of this composition (known: {known})")
        elif isinstance(extra, dict):
            _check(extra, item, _where(path, name), root, out)


def _check_array(schema: dict[str, Any], value: list[Any], path: str, root: dict[str, Any], out: list[str]) -> None:
    found = schema.get("prefixItems")
    prefix: list[Any] = found if isinstance(found, list) else []
    for i, item in enumerate(value):
        sub = prefix[i] if i < len(prefix) else schema.get("items")
        if sub is False and i >= len(prefix):
            out.append(f"{_where(path, i)}: at most {len(prefix)} items allowed")
            break
        if sub is not None:
            _check(sub, item, _where(path, i), root, out)
    if isinstance(schema.get("minItems"), int) and len(value) < schema["minItems"]:
        out.append(f"{path}: at least {schema['minItems']} items, not {len(value)}")
    if isinstance(schema.get("maxItems"), int) and len(value) > schema["maxItems"]:
        out.append(f"{path}: at most {schema['maxItems']} items, not {len(value)}")


def _check_string(schema: dict[str, Any], value: str, path: str, out: list[str]) -> None:
    if isinstance(schema.get("minLength"), int) and len(value) < schema["minLength"]:
        out.append(f"{path}: at least {schema['minLength']} characters, not {len(value)}")
    if isinstance(schema.get("maxLength"), int) and len(value) > schema["maxLength"]:
        out.append(f"{path}: at most {schema['maxLength']} characters, not {len(value)}")
    pattern = schema.get("pattern")
    if isinstance(pattern, str):
        try:
            matched = re.search(pattern, value) is not None
        except re.error:
            return  # an ECMAScript pattern Python cannot read: the render's check decides
        if not matched:
            out.append(f"{path}: must match /{pattern}/, not {_show(value)}")


def _check_number(schema: dict[str, Any], value: float, path: str, out: list[str]) -> None:
    bounds: tuple[tuple[str, Callable[[float], bool], str], ...] = (
        ("minimum", lambda limit: value >= limit, "at least"),
        ("maximum", lambda limit: value <= limit, "at most"),
        ("exclusiveMinimum", lambda limit: value > limit, "greater than"),
        ("exclusiveMaximum", lambda limit: value < limit, "less than"),
    )
    for key, holds, words in bounds:
        limit: Any = schema.get(key)
        if _TYPES["number"](limit) and not holds(limit):
            out.append(f"{path}: must be {words} {limit}, not {_show(value)}")
    step: Any = schema.get("multipleOf")
    if not (_TYPES["number"](step) and step > 0):
        return
    if not math.isclose(value / step, round(value / step), abs_tol=1e-9):
        out.append(f"{path}: must be a multiple of {step}, not {_show(value)}")


def _errors(schema: Any, value: Any, path: str, root: dict[str, Any]) -> list[str]:
    found: list[str] = []
    _check(schema, value, path, root, found)
    return found


def _same(a: Any, b: Any) -> bool:
    """JSON equality: 1 == 1.0, but True is not 1."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def _type_name(value: Any) -> str:
    for name in ("null", "boolean", "integer", "number", "string", "array", "object"):
        if _TYPES[name](value):
            return name
    return type(value).__name__


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
