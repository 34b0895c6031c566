"""Turning job bytes into a YAML mapping, refusing what a job file has no use for.

Refused: bytes that are not UTF-8 text, aliases (billion laughs), nesting past
``MAX_YAML_DEPTH`` (stack bombs), merge keys, duplicate keys at any depth (the later
value would silently win: ``id:`` twice changes the id), keys that YAML reads as booleans,
and any document that is not a mapping.

Job files stay YAML 1.1 (PyYAML's reading), unlike spoolrender.yaml
(:mod:`spoolrender.config.yaml_loader`): in a value, ``yes``/``no``/``on``/``off`` are booleans,
so ``rerun: yes``, ``cache: on`` and props such as ``loop: yes`` keep the meaning they
have had in every job written so far, and a job means the same whoever's spool reads it.
Keys are where 1.1 goes wrong silently: a props key ``on:`` or ``no:`` became the boolean
True or False, and JSON then handed the composition ``"true"``/``"false"``. A boolean key
(``on``, ``no``, ``true``...) is therefore refused with the way out: quote it (``'on':``).

The reasons never quote the file's content. A job file may be a hard link to a file
its submitter cannot read; whatever we write into failure.json, ``status`` and the
event stream would hand that content to them. Reasons give a line and column, a YAML
type and the parser's fixed wording, with anything quoted from the file left out.
"""

from __future__ import annotations

import re
from typing import Any

import yaml
from yaml.constructor import ConstructorError

from spoolrender import defaults
from spoolrender.errors import JobInvalid

_MERGE_TAG = "tag:yaml.org,2002:merge"
# Text the parser quotes from the file ('found character %r', the tag it cannot
# construct, int()'s "invalid literal ... 'abc'"): single characters (a tab, a
# stray '%') help to find a typo and reveal nothing; longer quotes are dropped.
_QUOTED = re.compile(r"'[^'\n]*'|\"[^\"\n]*\"")
_TYPE_NAMES = {
    dict: "mapping", list: "list", str: "string", int: "integer", float: "number", bool: "boolean",
    bytes: "binary", type(None): "null",
}  # fmt: skip


class _OwnWording(ConstructorError):
    """A refusal worded here, from nothing but types, positions and short keys: shown as is."""


def _tag_name(tag: str) -> str:
    return "!!" + tag.removeprefix("tag:yaml.org,2002:") if tag.startswith("tag:yaml.org,2002:") else "tagged"


class _JobLoader(yaml.CSafeLoader):
    """The C safe loader, plus duplicate-key and merge-key checks and value positions."""

    root_mark: yaml.Mark | None = None

    def construct_document(self, node: yaml.Node) -> Any:
        self.root_mark = node.start_mark
        return super().construct_document(node)

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep)
        except yaml.YAMLError:
            raise
        except Exception as exc:
            # Parsed, but a value cannot be built: an impossible date, `!!int abc`, and
            # PyYAML's own slips on odd tags (`!!bool x` is a KeyError, `!!int` with no
            # value an IndexError). Whatever a file holds must end as a reason, with the
            # value's position, which the Python exception does not have.
            why = f": {without_content(str(exc))}" if isinstance(exc, ValueError | OverflowError) else ""
            raise _OwnWording(
                None, None, f"cannot build this {_tag_name(node.tag)} value{why}", node.start_mark
            ) from exc

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        if isinstance(node, yaml.MappingNode):
            first: dict[Any, yaml.Mark] = {}
            for key_node, _ in node.value:
                if key_node.tag == _MERGE_TAG:
                    raise _OwnWording(None, None, "merge keys (<<) are not allowed", key_node.start_mark)
                key = self.construct_object(key_node, deep=True)  # cached: built once
                if isinstance(key, bool):
                    raise _OwnWording(None, None, _bool_key_reason(key_node.value, key), key_node.start_mark)
                try:
                    earlier = first.setdefault(key, key_node.start_mark)
                except TypeError:
                    continue  # an unhashable key: the base class reports it
                if earlier is not key_node.start_mark:
                    raise _OwnWording(
                        None,
                        None,
                        f"duplicate key {_key_text(key)} (first at line {earlier.line + 1})",
                        key_node.start_mark,
                    )
        return super().construct_mapping(node, deep)


def _bool_key_reason(word: str, key: bool) -> str:
    # `word` built a boolean, so it is one of YAML's few boolean words: quoting it reveals nothing.
    return (
        f"key {word!r} is read as the boolean {str(key).lower()} (YAML 1.1: yes, no, on, off, true, false); "
        f"quote it, '{word}':, to use it as a name"
    )


def _key_text(key: Any) -> str:
    # Keys are named (the whole point is saying which), but only short ones.
    if isinstance(key, str) and len(key) <= 60 and key.isprintable():
        return repr(key)
    return f"(a {type_name(key)} key)"


def type_name(value: Any) -> str:
    """A YAML-ish name for the type of a loaded value ("mapping", "list", "string"...)."""
    return _TYPE_NAMES.get(type(value), type(value).__name__)


def without_content(text: str) -> str:
    """``text`` (a library's message) with anything longer than a character it quotes left out."""

    def keep_single_characters(m: re.Match[str]) -> str:
        inner = m.group(0)[1:-1]
        short = len(inner) <= 1 or (inner.startswith("\\") and len(inner) <= 6)
        return m.group(0) if short else "(...)"

    return _QUOTED.sub(keep_single_characters, text.splitlines()[0] if text else text)


def _check_events(text: str) -> None:
    """One pass over the parser's events before anything is constructed: aliases can
    expand exponentially (billion laughs) once props are serialised, and deep nesting can
    exhaust the stack, so both are refused outright."""
    depth = 0
    for event in yaml.parse(text, Loader=yaml.CSafeLoader):
        if isinstance(event, yaml.AliasEvent):
            raise JobInvalid(["job file: YAML aliases (*name) are not allowed"])
        if isinstance(event, yaml.MappingStartEvent | yaml.SequenceStartEvent):
            depth += 1
            if depth > defaults.MAX_YAML_DEPTH:
                raise JobInvalid([f"job file: nested deeper than {defaults.MAX_YAML_DEPTH} levels"])
        elif isinstance(event, yaml.MappingEndEvent | yaml.SequenceEndEvent):
            depth -= 1


def load_yaml_mapping(data: bytes) -> dict[str, Any]:
    """Decode and parse job bytes into a mapping, refusing aliases and deep nesting."""
    if not data.strip():
        raise JobInvalid(["job file: empty, expected a YAML mapping"])
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise JobInvalid([f"job file: not valid UTF-8 (byte {exc.start})"]) from exc
    if "\x00" in text:
        raise JobInvalid(["job file: contains NUL bytes, expected YAML text"])
    loader = _JobLoader(text)
    try:
        _check_events(text)
        doc = loader.get_single_data()
    except yaml.YAMLError as exc:
        raise JobInvalid([f"job file: not valid YAML: {_yaml_reason(exc)}"]) from exc
    except RecursionError as exc:  # pragma: no cover - guarded by the depth check
        raise JobInvalid(["job file: nested too deeply"]) from exc
    finally:
        loader.dispose()
    if not isinstance(doc, dict):
        where = "" if loader.root_mark is None else f" at {_position(loader.root_mark)}"
        raise JobInvalid([f"job file: expected a YAML mapping at the top, got {type_name(doc)}{where}"])
    return doc


def _position(mark: yaml.Mark) -> str:
    return f"line {mark.line + 1}, column {mark.column + 1}"


def _yaml_reason(exc: yaml.YAMLError) -> str:
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc)
    if "could not determine a constructor for the tag" in problem:
        problem = "unsupported tag (a job file holds plain YAML or JSON data only)"
    elif not isinstance(exc, _OwnWording):
        problem = without_content(problem)
    if mark is not None:
        return f"{_position(mark)}: {problem}"
    return problem
