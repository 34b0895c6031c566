"""spoolrender.spool.indented_json writes what json.dumps(indent=2, sort_keys=True, default=str)
writes, byte for byte: the records on disk do not change (older runners, `cat`, schemas)."""

from __future__ import annotations

import enum
import json
import random
from pathlib import Path
from typing import Any

import pytest

from spoolrender.spool.durable import json_bytes
from spoolrender.spool.indented_json import dumps_indented
from spoolrender.spool.records import RunRecord

CORPUS = Path(__file__).resolve().parents[1] / "data" / "run_records.json"


def _reference(obj: Any) -> str:
    return json.dumps(obj, indent=2, sort_keys=True, default=str)


class Colour(enum.StrEnum):
    RED = "red"


class Level(enum.IntEnum):
    HIGH = 7


class Opaque:
    def __str__(self) -> str:
        return "opaque \u00e9"


EDGES: list[Any] = [
    {},
    [],
    (),
    "",
    "plain",
    0,
    -12345678901234567890,
    1.5,
    0.1 + 0.2,
    1e300,
    -0.0,
    float("nan"),
    float("inf"),
    float("-inf"),
    True,
    False,
    None,
    {"a": {}, "b": [], "c": [{}], "d": [[]], "e": {"f": {"g": []}}},
    {"unicode \u00e9\u4e2d\U0001f600": 'ctl \x00\x1f\t\n"\\ /'},
    {3: "int key", 2.5: "float key", float("inf"): "inf key"},
    {True: "true key", False: "false key"},
    {None: "null key"},
    {10: "x", 2: "y"},  # sorted as numbers before they become strings
    {"path": Path("/tmp/x y"), "obj": Opaque(), "nested": [Opaque(), (1, (2, ()))]},
    {"enum": Colour.RED, Colour.RED: Level.HIGH, "level": [Level.HIGH]},
    [1, "two", 3.0, None, True, {"k": [1, {"deep": [{"deeper": {}}]}]}],
    Opaque(),
]


@pytest.mark.parametrize("obj", EDGES, ids=lambda o: type(o).__name__)
def test_every_kind_of_value_encodes_as_json_dumps_does(obj: Any) -> None:
    assert dumps_indented(obj) == _reference(obj)


def test_the_records_corpus_is_written_byte_for_byte_as_before() -> None:
    corpus = json.loads(CORPUS.read_text())
    for name, record in corpus.items():
        assert json_bytes(record) == (_reference(record) + "\n").encode(), name
        if name.rsplit("/", 1)[-1].startswith("run-"):
            run = RunRecord.from_dict(record)
            assert run.to_json() == (_reference(record) + "\n").encode(), name


def test_random_nested_documents_encode_as_json_dumps_does() -> None:
    rng = random.Random(20)
    scalars = [None, True, False, 0, -7, 2**70, 0.5, -1e-9, "", "x", "\u00fc\n", Opaque()]

    def build(depth: int) -> Any:
        roll = rng.random()
        if depth > 4 or roll < 0.4:
            return rng.choice(scalars)
        if roll < 0.7:
            return [build(depth + 1) for _ in range(rng.randrange(4))]
        return {f"k{rng.randrange(30)}": build(depth + 1) for _ in range(rng.randrange(5))}

    for _ in range(300):
        doc = build(0)
        assert dumps_indented(doc) == _reference(doc)


def test_keys_json_cannot_write_fail_alike() -> None:
    with pytest.raises(TypeError):
        _reference({(1, 2): "tuple key"})
    with pytest.raises(TypeError):
        dumps_indented({(1, 2): "tuple key"})


def test_a_circular_reference_fails_as_json_dumps_fails_it() -> None:
    # json.dumps says ValueError("Circular reference detected"), at once; without its
    # markers the encoder recursed until RecursionError, which no caller expects.
    looped_list: list[Any] = [1]
    looped_list.append({"back": looped_list})
    looped_dict: dict[str, Any] = {"a": []}
    looped_dict["a"].append(looped_dict)
    for looped in (looped_list, looped_dict, {"deep": [looped_list]}):
        with pytest.raises(ValueError, match="Circular reference detected"):
            _reference(looped)
        with pytest.raises(ValueError, match="Circular reference detected"):
            dumps_indented(looped)
    shared: list[Any] = [1]
    twice = {"a": shared, "b": [shared, (shared,)]}  # the same list twice is no loop
    assert dumps_indented(twice) == _reference(twice)
