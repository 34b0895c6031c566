"""Reading spoolrender.yaml (and ``SPOOLRENDER_*`` / ``--set`` values) as people type it.

PyYAML reads YAML 1.1, where ``on``, ``off``, ``yes``, ``no`` (any case of each) are
booleans: the documented hook ``chat: {on: [failed], url: ...}`` had the key True, and
``watch: no`` the value False. The spool config is read with YAML 1.2's core schema
instead, as ruamel.yaml and yamllint's ``truthy`` rule do: only ``true``/``True``/``TRUE``
and ``false``/``False``/``FALSE`` are booleans, every other word is a string. Settings
that are booleans still take the 1.1 words (:func:`yaml11_bool`), so a spool written
for the old reading keeps its meaning.

Every mapping the loader builds remembers the text each key was typed as
(:class:`KeyedMapping`), so an unknown key is named as typed (``'1'``, ``'null'``,
``'True'``), with a did-you-mean for near misses (:func:`describe_unknown`). A key given
twice is refused: YAML 1.2 requires unique keys, and the later value silently winning
hides the line the operator meant.

Job files are not read here: see :mod:`spoolrender.jobfile.loading` for why they stay 1.1.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import yaml
from yaml.constructor import ConstructorError

_BOOL_TAG = "tag:yaml.org,2002:bool"
_MAP_TAG = "tag:yaml.org,2002:map"
_MERGE_TAG = "tag:yaml.org,2002:merge"
# The spellings YAML 1.1 (and so PyYAML) resolves as booleans.
_YAML11_TRUE = frozenset(w for base in ("yes", "true", "on") for w in (base, base.title(), base.upper()))
_YAML11_FALSE = frozenset(w for base in ("no", "false", "off") for w in (base, base.title(), base.upper()))


class KeyedMapping(dict[Any, Any]):
    """A loaded mapping that knows how each of its keys was typed (``key_text``)."""

    key_text: dict[Any, str]

    def __init__(self) -> None:
        super().__init__()
        self.key_text = {}


class ConfigLoader(yaml.CSafeLoader):
    """The C safe loader with YAML 1.2 core-schema booleans, typed key names and no
    duplicate keys. Only resolution and construction change (both run in Python for the
    C loader too); parsing stays in C."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        if isinstance(node, yaml.MappingNode):
            first: dict[Any, yaml.Mark] = {}
            for key_node, _ in node.value:
                if key_node.tag == _MERGE_TAG:
                    continue  # `<<: *base`: merged keys may be overridden, as YAML intends
                key = self.construct_object(key_node, deep=True)  # cached: built once
                try:
                    earlier = first.setdefault(key, key_node.start_mark)
                except TypeError:
                    continue  # an unhashable key: the base class reports it
                if earlier is not key_node.start_mark:
                    raise ConstructorError(
                        None, None, f"duplicate key {key_node.value!r} (first at line {earlier.line + 1})",
                        key_node.start_mark,
                    )  # fmt: skip
        return super().construct_mapping(node, deep)

    def construct_keyed_map(self, node: yaml.MappingNode) -> Iterator[KeyedMapping]:
        data = KeyedMapping()
        yield data  # first, as PyYAML's own map constructor does, for recursive structures
        data.update(self.construct_mapping(node))
        for key_node, _ in node.value:  # after construct_mapping: merged keys are in node.value
            if isinstance(key_node, yaml.ScalarNode):
                data.key_text[self.construct_object(key_node)] = key_node.value


# YAML 1.1's bool resolver out, the 1.2 core one in: a copy, so PyYAML's loaders keep theirs.
ConfigLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != _BOOL_TAG]
    for first, resolvers in yaml.CSafeLoader.yaml_implicit_resolvers.items()
}
ConfigLoader.add_implicit_resolver(_BOOL_TAG, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF"))
ConfigLoader.add_constructor(_MAP_TAG, ConfigLoader.construct_keyed_map)


def load_config_text(text: str) -> Any:
    """``text`` as YAML 1.2 core-schema data (raises yaml.YAMLError and what PyYAML's
    constructors raise: ValueError, TypeError, OverflowError)."""
    return yaml.load(text, Loader=ConfigLoader)


def typed_key(mapping: Mapping[Any, Any], key: Any) -> str:
    """``key`` of ``mapping`` as the user typed it (its own text for keys given in code)."""
    text = mapping.key_text.get(key) if isinstance(mapping, KeyedMapping) else None
    if text is not None:
        return text
    return key if isinstance(key, str) else repr(key)


def describe_unknown(typed: Sequence[str], known: Sequence[str], noun: str = "key") -> str:
    """``unknown key 'slot' (did you mean 'slots'?), 'x'`` for the names ``typed``, followed
    by the ``known`` names unless every one has a suggestion (difflib's near misses)."""
    folded = {name.lower(): name for name in known}
    parts = []
    unmatched = False
    for name in typed:
        # A near miss, or the name without its unit (`lease` for lease_seconds).
        close = (
            difflib.get_close_matches(name.lower(), folded, n=1)
            or [k for k in folded if k.startswith(name.lower() + "_")][:1]
        )
        unmatched = unmatched or not close
        parts.append(f"{name!r} (did you mean {folded[close[0]]!r}?)" if close else repr(name))
    plural = "" if len(parts) == 1 else "s"
    return f"unknown {noun}{plural} " + ", ".join(parts) + (f" (known: {', '.join(known)})" if unmatched else "")


def yaml11_bool(value: Any) -> bool | None:
    """A boolean setting's value: a bool, or a word YAML 1.1 reads as one (``yes``,
    ``off``...), so configs written for PyYAML's reading keep their meaning; else None."""
    if isinstance(value, bool):
        return value
    if not isinstance(value, str):
        return None
    if value in _YAML11_TRUE:
        return True
    if value in _YAML11_FALSE:
        return False
    return None
