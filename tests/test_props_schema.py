"""The submit-time props check against the JSON Schemas zod 4 emits.

Every case is also judged by the ``jsonschema`` library (a test dependency): our
validator must agree with it on whether props are valid, and say where they are not.
"""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest

from spoolrender.props_schema import props_problems

# What zod 4's toJSONSchema() gives for DataRecap's schema in remotion/src (and a few more
# shapes zod emits: optional props, enums, unions, nullable, records, tuples, $defs).
RECAP: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "properties": {
        "title": {"type": "string", "minLength": 1},
        "items": {
            "type": "array",
            "minItems": 1,
            "maxItems": 3,
            "items": {
                "type": "object",
                "properties": {"label": {"type": "string"}, "value": {"type": "number", "minimum": 0}},
                "required": ["label", "value"],
                "additionalProperties": False,
            },
        },
        "mode": {"type": "string", "enum": ["light", "dark"]},
        "size": {"anyOf": [{"type": "integer", "exclusiveMinimum": 0}, {"type": "null"}]},
        "tags": {"type": "object", "propertyNames": {"type": "string"}, "additionalProperties": {"type": "boolean"}},
        "pair": {"type": "array", "prefixItems": [{"type": "string"}, {"type": "number"}], "items": False},
        "color": {"type": "string", "pattern": "^#[0-9a-f]{6}$"},
        "step": {"type": "number", "multipleOf": 0.5, "maximum": 10},
        "node": {"$ref": "#/$defs/Node"},
    },
    "required": ["title", "items"],
    "additionalProperties": False,
    "$defs": {"Node": {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}},
}

VALID = [
    {"title": "a", "items": [{"label": "x", "value": 1}]},
    {"title": "a", "items": [{"label": "x", "value": 0.5}], "mode": "dark", "size": None},
    {"title": "a", "items": [{"label": "x", "value": 1}], "size": 3, "tags": {"k": True}, "pair": ["a", 1]},
    {"title": "a", "items": [{"label": "x", "value": 1}], "color": "#00ff00", "step": 2.5, "node": {"name": "n"}},
    {"title": "a", "items": [{"label": "x", "value": 1}], "size": 2.0},
]
INVALID = [
    ({"items": [{"label": "x", "value": 1}]}, "props.title: required"),
    ({"title": "", "items": [{"label": "x", "value": 1}]}, "props.title: at least 1 characters"),
    ({"title": 1, "items": [{"label": "x", "value": 1}]}, "props.title: must be string, not integer"),
    ({"title": "a", "items": []}, "props.items: at least 1 items, not 0"),
    ({"title": "a", "items": [{"label": "x", "value": -1}]}, "props.items[0].value: must be at least 0"),
    ({"title": "a", "items": [{"label": "x", "value": "1"}]}, "props.items[0].value: must be number, not string"),
    ({"title": "a", "items": [{"label": "x", "value": 1, "extra": 2}]}, "props.items[0].extra: not a prop"),
    ({"title": "a", "items": [{"label": "x", "value": 1}] * 4}, "props.items: at most 3 items"),
    ({"title": "a", "items": [{"label": "x", "value": 1}], "mode": "dim"}, "props.mode: must be one of 'light'"),
    ({"title": "a", "items": [{"label": "x", "value": 1}], "size": 0}, "props.size: matches none"),
    ({"title": "a", "items": [{"label": "x", "value": 1}], "size": True}, "props.size: matches none"),
    ({"title": "a", "items": [{"label": "x", "value": 1}], "tags": {"k": 1}}, "props.tags.k: must be boolean"),
    ({"title": "a", "items": [{"label": "x", "value": 1}], "pair": ["a", 1, 2]}, "props.pair[2]: at most 2 items"),
    ({"title": "a", "items": [{"label": "x", "value": 1}], "color": "red"}, "props.color: must match"),
    ({"title": "a", "items": [{"label": "x", "value": 1}], "step": 0.3}, "props.step: must be a multiple of 0.5"),
    ({"title": "a", "items": [{"label": "x", "value": 1}], "node": {}}, "props.node.name: required"),
    ({"title": "a", "items": [{"label": "x", "value": 1}], "titel": "typo"}, "props.titel: not a prop of this"),
    ("not an object", "props: must be object, not string"),
]


@pytest.mark.parametrize("props", VALID)
def test_valid_props_pass_as_jsonschema_agrees(props: dict[str, Any]) -> None:
    jsonschema.Draft202012Validator(RECAP).validate(props)
    assert props_problems(RECAP, props) == []


@pytest.mark.parametrize(("props", "expected"), INVALID)
def test_invalid_props_are_named_where_jsonschema_also_refuses(props: Any, expected: str) -> None:
    assert list(jsonschema.Draft202012Validator(RECAP).iter_errors(props)), "the case must be invalid"
    problems = props_problems(RECAP, props)
    assert any(p.startswith(expected) for p in problems), problems


def test_every_problem_is_reported_once_and_the_list_is_bounded() -> None:
    props = {"title": 1, "items": [{"label": 2, "value": -1}], "x": 1, "y": 2}
    problems = props_problems(RECAP, props)
    assert len(problems) == len(set(problems)) == 5, problems
    many = {"title": "a", "items": [{"label": i, "value": -1} for i in range(30)]}
    assert (
        len(
            props_problems(
                {
                    **RECAP,
                    "properties": {
                        **RECAP["properties"],
                        "items": {"type": "array", "items": RECAP["properties"]["items"]["items"]},
                    },
                },
                many,
            )
        )
        == 20
    )


def test_unknown_keywords_and_foreign_patterns_never_refuse() -> None:
    schema = {"type": "string", "format": "email", "pattern": "(?<name>\\p{L}+)", "x-custom": 1}
    assert props_problems(schema, "not an email") == []
    assert props_problems({"$ref": "https://example.com/remote.json"}, 1) == []
    assert props_problems(True, {"any": "thing"}) == []  # type: ignore[arg-type]
    assert props_problems({"not": {"type": "string"}}, "s") == ["props: is a value that is not allowed"]
    assert props_problems(False, 1) == ["props: not allowed"]  # type: ignore[arg-type]
