"""Job files: safe reading, YAML loading and validation into a JobSpec."""

from __future__ import annotations

import json
import math
import os
import threading
import time
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta, timezone
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
import yaml

from spoolrender import defaults
from spoolrender.config.spool_config import SpoolConfig, load_config
from spoolrender.errors import ConfigError, JobInvalid
from spoolrender.jobfile import (
    ID_PATTERN,
    KNOWN_FIELDS,
    JobSpec,
    id_from_filename,
    is_candidate_name,
    load_yaml_mapping,
    output_path_problem,
    parse_job,
    read_job_bytes,
    render_size_problem,
)
from spoolrender.jobfile.media import CODECS, SETTINGS


def dump(doc: dict[str, Any]) -> bytes:
    return yaml.safe_dump(doc, sort_keys=False).encode("utf-8")


def problems_of(data: bytes, config: SpoolConfig, filename: str = "job.yaml") -> list[str]:
    with pytest.raises(JobInvalid) as info:
        parse_job(data, filename, config)
    return info.value.problems


def single_problem(data: bytes, config: SpoolConfig) -> str:
    problems = problems_of(data, config)
    assert len(problems) == 1, problems
    assert "\n" not in problems[0]
    return problems[0]


def load_problem(data: bytes) -> str:
    with pytest.raises(JobInvalid) as info:
        load_yaml_mapping(data)
    assert len(info.value.problems) == 1, info.value.problems
    assert "\n" not in info.value.problems[0]
    return info.value.problems[0]


@pytest.fixture
def non_utc_local_time(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Run with a local time zone 5:30 east of UTC, so a naive time read as local time shows."""
    monkeypatch.setenv("TZ", "XST-05:30")
    time.tzset()
    assert time.timezone != 0
    yield
    monkeypatch.undo()
    time.tzset()


# --- full jobs and defaults ------------------------------------------------------------


def test_full_remotion_job_every_field(config: SpoolConfig) -> None:
    text = b"""\
id: promo-2026.v2
renderer: remotion
composition: Promo
props: {title: Hello, count: 3, nested: {list: [1, 2]}}
output: campaigns/2026/promo.mp4
max_attempts: 5
timeout: 120.5
priority: 10
not_before: "2026-12-01T09:00:00Z"
rerun: true
settings: {codec: h265, scale: 0.5, crf: 20}
fallback:
  props: {title: Fallback}
  settings: {scale: 0.25}
"""
    spec = parse_job(text, "ignored-name.yaml", config)
    assert spec == JobSpec(
        id="promo-2026.v2",
        renderer="remotion",
        composition="Promo",
        command=None,
        props={"title": "Hello", "count": 3, "nested": {"list": [1, 2]}},
        output=PurePosixPath("campaigns/2026/promo.mp4"),
        max_attempts=5,
        timeout=120.5,
        priority=10,
        not_before=datetime(2026, 12, 1, 9, 0, tzinfo=UTC).timestamp(),
        rerun=True,
        settings={"codec": "h265", "scale": 0.5, "crf": 20},
        fallback={"props": {"title": "Fallback"}, "settings": {"scale": 0.25}},
    )
    assert isinstance(spec.timeout, float)


def test_full_command_job(config: SpoolConfig) -> None:
    spec = parse_job(
        dump({"id": "slate1", "renderer": "command", "command": "props", "props": {"x": 1}, "timeout": 30}),
        "slate1.yaml",
        config,
    )
    assert spec.renderer == "command"
    assert spec.command == "props"
    assert spec.composition is None
    assert spec.props == {"x": 1}
    assert spec.timeout == 30.0
    assert isinstance(spec.timeout, float)


def test_defaults_come_from_filename_and_config(config: SpoolConfig) -> None:
    cfg = load_config(config.spool, overrides={"max_attempts": 7, "timeout_seconds": 42}, environ={})
    spec = parse_job(b"composition: Main\n", "my-clip.yaml", cfg)
    assert spec.id == "my-clip"
    assert spec.output == PurePosixPath("my-clip.mp4")
    assert spec.max_attempts == 7
    assert spec.timeout == 42.0
    assert spec.renderer == defaults.DEFAULT_RENDERER == "remotion"
    assert spec.priority == defaults.DEFAULT_PRIORITY
    assert spec.props == {}
    assert spec.settings == {}
    assert spec.fallback == {}
    assert spec.not_before is None
    assert spec.rerun is False


def test_default_output_follows_explicit_id(config: SpoolConfig) -> None:
    spec = parse_job(b"id: chosen\ncomposition: Main\n", "file-name.yaml", config)
    assert spec.id == "chosen"
    assert spec.output == PurePosixPath("chosen.mp4")


def test_null_props_means_empty(config: SpoolConfig) -> None:
    spec = parse_job(b"composition: Main\nprops: null\nsettings: null\nfallback: null\n", "a.yaml", config)
    assert spec.props == {}
    assert spec.settings == {}
    assert spec.fallback == {}


def test_json_job_is_accepted(config: SpoolConfig) -> None:
    data = json.dumps({"composition": "Main", "props": {"a": [1, 2]}, "priority": -5}).encode()
    spec = parse_job(data, "x.json", config)
    assert spec.id == "x"
    assert spec.props == {"a": [1, 2]}
    assert spec.priority == -5


def test_utf8_bom_is_accepted(config: SpoolConfig) -> None:
    spec = parse_job(b"\xef\xbb\xbfcomposition: Main\n", "bom.yaml", config)
    assert spec.composition == "Main"


# --- not_before ------------------------------------------------------------------------

DEC_1_9H_UTC = datetime(2026, 12, 1, 9, 0, tzinfo=UTC).timestamp()


@pytest.mark.usefixtures("non_utc_local_time")
@pytest.mark.parametrize(
    ("yaml_value", "expected"),
    [
        pytest.param('"2026-12-01T09:00:00Z"', DEC_1_9H_UTC, id="iso-string-Z"),
        pytest.param("2026-12-01T09:00:00Z", DEC_1_9H_UTC, id="yaml-timestamp-Z"),
        pytest.param('"2026-12-01T09:00:00"', DEC_1_9H_UTC, id="naive-iso-string-is-utc"),
        pytest.param("2026-12-01 09:00:00", DEC_1_9H_UTC, id="naive-yaml-timestamp-is-utc"),
        pytest.param('"2026-12-01T11:00:00+02:00"', DEC_1_9H_UTC, id="iso-string-offset"),
        pytest.param("2026-12-01T04:00:00-05:00", DEC_1_9H_UTC, id="yaml-timestamp-offset"),
        pytest.param("2026-12-01", DEC_1_9H_UTC - 9 * 3600, id="yaml-date-is-utc-midnight"),
        pytest.param('"2026-12-01"', DEC_1_9H_UTC - 9 * 3600, id="date-string-is-utc-midnight"),
    ],
)
def test_not_before_forms(yaml_value: str, expected: float, config: SpoolConfig) -> None:
    spec = parse_job(f"composition: Main\nnot_before: {yaml_value}\n".encode(), "t.yaml", config)
    assert spec.not_before == pytest.approx(expected, abs=1e-6)


@pytest.mark.usefixtures("non_utc_local_time")
def test_not_before_python_values_via_safe_dump(config: SpoolConfig) -> None:
    aware = datetime(2026, 12, 1, 10, 0, tzinfo=timezone(timedelta(hours=1)))
    spec = parse_job(dump({"composition": "Main", "not_before": aware}), "t.yaml", config)
    assert spec.not_before == pytest.approx(DEC_1_9H_UTC)
    naive = datetime(2026, 12, 1, 9, 0)
    spec = parse_job(dump({"composition": "Main", "not_before": naive}), "t.yaml", config)
    assert spec.not_before == pytest.approx(DEC_1_9H_UTC)
    spec = parse_job(dump({"composition": "Main", "not_before": date(2026, 12, 1)}), "t.yaml", config)
    assert spec.not_before == pytest.approx(DEC_1_9H_UTC - 9 * 3600)


# --- every problem at once -------------------------------------------------------------


def test_every_problem_reported_at_once_one_line_each(config: SpoolConfig) -> None:
    text = b"""\
colour: red
id: "bad id!"
renderer: blender
composition: 5
props: [1, 2]
output: ../x
max_attempts: 0
timeout: abc
priority: 5000
not_before: tomorrow
rerun: "yes"
settings: {codec: mp4, scale: 0, crf: 64, fps: 30}
fallback: {props: 3, extra: 1}
"""
    problems = problems_of(text, config)
    # (field, what was expected, what was got), in the order the fields are checked.
    expected = [
        ("colour", "unknown field (known: " + ", ".join(KNOWN_FIELDS) + ")", ""),
        ("id", "expected 1-128 characters of A-Z a-z 0-9 . _ -", "got str 'bad id!'"),
        ("renderer", "expected one of remotion, command", "got str 'blender'"),
        ("composition", "expected a composition id string", "got int 5"),
        ("props", "expected a mapping with string keys", "got list [1, 2]"),
        ("output", "'.', '..' and empty components are not allowed", "got '../x'"),
        ("max_attempts", "expected a whole number 1-10", "got int 0"),
        ("timeout", "expected seconds > 0 and <= 21600", "got str 'abc'"),
        ("priority", "expected a whole number -1000 to 1000", "got int 5000"),
        ("not_before", "expected an ISO 8601 time", "got str 'tomorrow'"),
        ("rerun", "expected true or false", "got str 'yes'"),
        ("settings.codec", "expected one of " + ", ".join(CODECS), "got str 'mp4'"),
        ("settings.scale", "expected a number in (0, 16]", "got int 0"),
        ("settings.crf", "expected a whole number 0-63", "got int 64"),
        ("settings.fps", "unknown setting (known: " + ", ".join(SETTINGS) + ")", ""),
        ("fallback.extra", "unknown (known: props, settings)", ""),
        ("fallback.props", "expected a mapping", "got int 3"),
    ]
    assert len(problems) == len(expected), problems
    for line, (name, want, got) in zip(problems, expected, strict=True):
        assert "\n" not in line
        assert line.startswith(f"field '{name}': "), line
        assert want in line, line
        assert got in line, line


def test_job_invalid_message_joins_problems(config: SpoolConfig) -> None:
    with pytest.raises(JobInvalid) as info:
        parse_job(b"composition: Main\ntimeout: abc\npriority: x\n", "j.yaml", config)
    assert len(info.value.problems) == 2
    assert str(info.value) == "; ".join(info.value.problems)


def test_long_values_are_truncated_in_problems(config: SpoolConfig) -> None:
    line = single_problem(dump({"composition": "Main", "timeout": "x" * 500}), config)
    assert line.startswith("field 'timeout': ")
    assert "got str 'xxxx" in line
    assert line.endswith("...")
    assert len(line) < 200


# --- wrong types, field by field -------------------------------------------------------

BASE: dict[str, Any] = {"composition": "Main"}


@pytest.mark.parametrize(
    ("field", "value", "want"),
    [
        ("id", 42, "got int 42"),
        ("id", "", "got str ''"),
        ("id", "-leading-dash", "got str '-leading-dash'"),
        ("id", "a/b", "got str 'a/b'"),
        ("id", "x" * 129, "got str 'xxx"),
        ("id", True, "got bool True"),
        ("id", ["a"], "got list ['a']"),
        ("renderer", 3, "got int 3"),
        ("renderer", "Remotion", "got str 'Remotion'"),
        ("renderer", ["remotion"], "got list ['remotion']"),
        ("composition", 7, "got int 7"),
        ("composition", "", "got str ''"),
        ("composition", {"a": 1}, "got dict {'a': 1}"),
        ("props", "title=x", "got str 'title=x'"),
        ("props", [1], "got list [1]"),
        ("props", {1: "x"}, "got dict {1: 'x'}"),
        ("output", 5, "got int 5"),
        ("output", ["a.mp4"], "got list ['a.mp4']"),
        ("max_attempts", "3", "got str '3'"),
        ("max_attempts", 2.0, "got float 2.0"),
        ("max_attempts", True, "got bool True"),
        ("max_attempts", 0, "got int 0"),
        ("timeout", "abc", "got str 'abc'"),
        ("timeout", True, "got bool True"),
        ("timeout", 0, "got int 0"),
        ("timeout", -1.5, "got float -1.5"),
        ("timeout", math.nan, "got float nan"),
        ("timeout", math.inf, "got float inf"),
        ("timeout", -math.inf, "got float -inf"),
        ("timeout", [60], "got list [60]"),
        ("priority", "high", "got str 'high'"),
        ("priority", 1.5, "got float 1.5"),
        ("priority", False, "got bool False"),
        ("priority", -1001, "got int -1001"),
        ("priority", 1001, "got int 1001"),
        ("not_before", "tomorrow", "got str 'tomorrow'"),
        ("not_before", 1767225600, "got int 1767225600"),
        ("not_before", True, "got bool True"),
        ("not_before", ["2026-01-01"], "got list ['2026-01-01']"),
        ("rerun", "yes", "got str 'yes'"),
        ("rerun", 1, "got int 1"),
        ("rerun", [True], "got list [True]"),
        ("settings", "fast", "got str 'fast'"),
        ("settings", [1], "got list [1]"),
        ("fallback", "lower", "got str 'lower'"),
        ("fallback", [1], "got list [1]"),
    ],
)
def test_wrong_type_for_each_field(field: str, value: Any, want: str, config: SpoolConfig) -> None:
    line = single_problem(dump({**BASE, field: value}), config)
    assert line.startswith(f"field '{field}': expected "), line
    assert want in line, line


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("max_attempts", 1),
        ("max_attempts", defaults.MAX_JOB_ATTEMPTS),
        ("timeout", 0.001),
        ("timeout", defaults.MAX_JOB_TIMEOUT_S),
        ("priority", -1000),
        ("priority", 1000),
        ("id", "A" * 128),
        ("id", "9.a_b-c"),
    ],
)
def test_boundary_values_are_accepted(field: str, value: Any, config: SpoolConfig) -> None:
    spec = parse_job(dump({**BASE, field: value}), "j.yaml", config)
    assert getattr(spec, field) == value


def test_unknown_fields_are_each_reported(config: SpoolConfig) -> None:
    problems = problems_of(dump({**BASE, "colour": "red", "Output": "x.mp4"}), config)
    assert len(problems) == 2
    assert problems[0].startswith("field 'colour': unknown field (known: id, renderer, composition")
    assert problems[1].startswith("field 'Output': unknown field")


def test_unknown_field_name_is_truncated(config: SpoolConfig) -> None:
    line = single_problem(dump({**BASE, "k" * 500: 1}), config)
    assert line.startswith("field '" + "k" * 60 + "': unknown field")


def test_bad_id_still_reports_other_problems_with_default_id(config: SpoolConfig) -> None:
    problems = problems_of(dump({"id": 5, "composition": "Main", "output": "/abs.mp4"}), config)
    assert [p.split(":")[0] for p in problems] == ["field 'id'", "field 'output'"]


# --- renderers -------------------------------------------------------------------------


def test_remotion_requires_composition(config: SpoolConfig) -> None:
    line = single_problem(b"props: {a: 1}\n", config)
    assert line == "field 'composition': required for the remotion renderer (a composition id)"


def test_remotion_refuses_command(config: SpoolConfig) -> None:
    line = single_problem(dump({**BASE, "command": "props"}), config)
    assert line == "field 'command': only for renderer: command"


def test_command_renderer_requires_command(config: SpoolConfig) -> None:
    line = single_problem(b"renderer: command\n", config)
    assert line == ("field 'command': required for the command renderer (one of the spool config's commands: props)")


def test_command_renderer_refuses_unconfigured_command_listing_allowed(config: SpoolConfig) -> None:
    commands = {"slate": ["ffmpeg", "{output}"], "props": ["python3", "{output}"]}
    cfg = load_config(config.spool, overrides={"commands": commands}, environ={})
    line = single_problem(b"renderer: command\ncommand: rm\n", cfg)
    assert line == "field 'command': expected one of the spool config's commands (props, slate), got str 'rm'"


def test_command_renderer_refuses_non_string_command(config: SpoolConfig) -> None:
    line = single_problem(b"renderer: command\ncommand: [props]\n", config)
    assert line.startswith("field 'command': expected one of the spool config's commands (props)")
    assert line.endswith("got list ['props']")


def test_command_renderer_without_configured_commands(config: SpoolConfig) -> None:
    cfg = load_config(config.spool, overrides={"commands": {}}, environ={})
    line = single_problem(b"renderer: command\ncommand: props\n", cfg)
    assert "(none configured)" in line
    line = single_problem(b"renderer: command\n", cfg)
    assert line.endswith("(one of the spool config's commands: none configured)")


def test_command_renderer_refuses_composition_and_settings(config: SpoolConfig) -> None:
    problems = problems_of(
        dump({"renderer": "command", "command": "props", "composition": "Main", "settings": {"crf": 20}}),
        config,
    )
    assert problems == [
        "field 'composition': only for renderer: remotion",
        "field 'settings': the command renderer takes no settings",
    ]


def test_command_renderer_accepts_empty_settings(config: SpoolConfig) -> None:
    spec = parse_job(dump({"renderer": "command", "command": "props", "settings": {}}), "c.yaml", config)
    assert spec.settings == {}


# --- remotion settings -----------------------------------------------------------------


@pytest.mark.parametrize(
    "settings",
    [
        {"codec": "h264"},
        {"codec": "h265"},
        {"codec": "vp8"},
        {"codec": "vp9"},
        {"codec": "prores"},
        {"codec": "gif"},
        {"scale": 16},
        {"scale": 0.01},
        {"scale": 1},
        {"crf": 0},
        {"crf": 63},
        {"codec": "vp9", "scale": 2.5, "crf": 30},
    ],
)
def test_valid_remotion_settings(settings: dict[str, Any], config: SpoolConfig) -> None:
    spec = parse_job(dump({**BASE, "settings": settings}), "j.yaml", config)
    assert spec.settings == settings


@pytest.mark.parametrize(
    ("key", "value", "want"),
    [
        ("codec", "mp4", "expected one of " + ", ".join(CODECS) + ", got str 'mp4'"),
        ("codec", "H264", "got str 'H264'"),
        ("codec", 264, "got int 264"),
        ("scale", 0, "expected a number in (0, 16], got int 0"),
        ("scale", -1, "got int -1"),
        ("scale", 16.5, "got float 16.5"),
        ("scale", "2", "got str '2'"),
        ("scale", True, "got bool True"),
        ("scale", math.nan, "got float nan"),
        ("scale", math.inf, "got float inf"),
        ("crf", -1, "expected a whole number 0-63, got int -1"),
        ("crf", 64, "got int 64"),
        ("crf", 18.5, "got float 18.5"),
        ("crf", True, "got bool True"),
        ("crf", "18", "got str '18'"),
    ],
)
def test_invalid_remotion_settings(key: str, value: Any, want: str, config: SpoolConfig) -> None:
    line = single_problem(dump({**BASE, "settings": {key: value}}), config)
    assert line.startswith(f"field 'settings.{key}': expected "), line
    assert want in line, line


def test_unknown_remotion_setting(config: SpoolConfig) -> None:
    line = single_problem(dump({**BASE, "settings": {"fps": 30}}), config)
    assert line == "field 'settings.fps': unknown setting (known: " + ", ".join(SETTINGS) + ")"


def test_fallback_settings_are_checked_too(config: SpoolConfig) -> None:
    problems = problems_of(dump({**BASE, "fallback": {"settings": {"crf": 99, "bitrate": 1}}}), config)
    assert len(problems) == 2
    assert problems[0].startswith("field 'fallback.settings.crf': expected a whole number 0-63, got int 99")
    assert problems[1] == "field 'fallback.settings.bitrate': unknown setting (known: " + ", ".join(SETTINGS) + ")"


def test_fallback_settings_not_a_mapping(config: SpoolConfig) -> None:
    line = single_problem(dump({**BASE, "fallback": {"settings": "low"}}), config)
    assert line == "field 'fallback.settings': expected a mapping, got str 'low'"


# --- fallback on the last attempt ------------------------------------------------------


def test_fallback_applies_only_on_last_attempt(config: SpoolConfig) -> None:
    spec = parse_job(
        dump(
            {
                **BASE,
                "max_attempts": 3,
                "props": {"a": 1, "b": 2},
                "settings": {"codec": "h264", "crf": 18},
                "fallback": {"props": {"b": 3}, "settings": {"scale": 0.5}},
            }
        ),
        "j.yaml",
        config,
    )
    for attempt in (1, 2):
        assert spec.settings_for_attempt(attempt) == (
            {"a": 1, "b": 2},
            {"codec": "h264", "crf": 18},
            False,
        )
    props, settings, used = spec.settings_for_attempt(3)
    assert used is True
    assert props == {"a": 1, "b": 3}
    assert settings == {"codec": "h264", "crf": 18, "scale": 0.5}


def test_fallback_with_only_props(config: SpoolConfig) -> None:
    spec = parse_job(dump({**BASE, "max_attempts": 2, "fallback": {"props": {"q": "low"}}}), "j.yaml", config)
    assert spec.settings_for_attempt(1) == ({}, {}, False)
    assert spec.settings_for_attempt(2) == ({"q": "low"}, {}, True)


def test_no_fallback_means_never_used(config: SpoolConfig) -> None:
    spec = parse_job(dump({**BASE, "max_attempts": 2, "props": {"a": 1}}), "j.yaml", config)
    assert spec.settings_for_attempt(1) == ({"a": 1}, {}, False)
    assert spec.settings_for_attempt(2) == ({"a": 1}, {}, False)


def test_fallback_not_used_when_single_attempt(config: SpoolConfig) -> None:
    # With max_attempts 1 there is no earlier attempt to fall back from: the job runs as written.
    spec = parse_job(dump({**BASE, "max_attempts": 1, "fallback": {"props": {"a": 2}}}), "j.yaml", config)
    assert spec.settings_for_attempt(1) == ({}, {}, False)


def test_settings_for_attempt_returns_copies(config: SpoolConfig) -> None:
    spec = parse_job(
        dump({**BASE, "max_attempts": 2, "props": {"a": 1}, "fallback": {"props": {"b": 2}}}),
        "j.yaml",
        config,
    )
    for attempt in (1, 2):
        props, settings, _ = spec.settings_for_attempt(attempt)
        props["mutated"] = True
        settings["mutated"] = True
    assert spec.props == {"a": 1}
    assert spec.settings == {}
    assert spec.fallback == {"props": {"b": 2}, "settings": {}}


# --- hostile outputs -------------------------------------------------------------------

HOSTILE_OUTPUTS = [
    pytest.param("../x", "'.', '..' and empty components are not allowed", id="dotdot"),
    pytest.param("/abs", "expected a path relative to the output root", id="absolute"),
    pytest.param("/etc/passwd", "expected a path relative to the output root", id="absolute-etc"),
    pytest.param("a/../b", "'.', '..' and empty components are not allowed", id="inner-dotdot"),
    pytest.param("a//b", "'.', '..' and empty components are not allowed", id="double-slash"),
    pytest.param("a/./b", "'.', '..' and empty components are not allowed", id="dot"),
    pytest.param("a/", "'.', '..' and empty components are not allowed", id="trailing-slash"),
    pytest.param(".", "'.', '..' and empty components are not allowed", id="just-dot"),
    pytest.param(".hidden", "hidden names (starting with '.') are reserved", id="hidden"),
    pytest.param("a/.hidden/b.mp4", "hidden names (starting with '.') are reserved", id="hidden-dir"),
    pytest.param(".spoolrender-tmp/x.mp4", "hidden names", id="scratch-dir"),
    pytest.param("a\\b.mp4", "expected a path relative to the output root", id="backslash"),
    pytest.param("..\\x", "expected a path relative to the output root", id="backslash-dotdot"),
    pytest.param("a\x00b", "got an empty or NUL-containing string", id="nul"),
    pytest.param("", "got an empty or NUL-containing string", id="empty"),
    pytest.param("a" * 300, "a path component is longer than 255 bytes", id="300-byte-component"),
    pytest.param("d/" + "é" * 150, "a path component is longer than 255 bytes", id="300-byte-utf8"),
    pytest.param("/".join(["d" * 100] * 11), "expected a path of at most 1024 characters", id="too-long"),
]


@pytest.mark.parametrize(("text", "want"), HOSTILE_OUTPUTS)
def test_output_path_problem_hostile(text: str, want: str) -> None:
    why = output_path_problem(text)
    assert why is not None
    assert want in why
    assert "\n" not in why


@pytest.mark.parametrize(("text", "want"), HOSTILE_OUTPUTS)
def test_parse_job_refuses_hostile_output(text: str, want: str, config: SpoolConfig) -> None:
    line = single_problem(dump({**BASE, "output": text}), config)
    assert line.startswith("field 'output': ")
    assert want in line


@pytest.mark.parametrize(
    "text",
    ["clip.mp4", "clip", "a/b/c.mp4", "a.b/c..d.mp4", "x" * 255, "é" * 125 + ".mp4", "with space.mp4"],
)
def test_output_path_problem_accepts(text: str, config: SpoolConfig) -> None:
    assert output_path_problem(text) is None
    spec = parse_job(dump({**BASE, "output": text}), "j.yaml", config)
    assert spec.output == PurePosixPath(text)


def test_jobspec_refuses_invalid_values_directly() -> None:
    with pytest.raises(ValueError, match="invalid job id"):
        JobSpec(id="../x")
    with pytest.raises(ValueError, match="invalid renderer"):
        JobSpec(id="x", renderer="blender")
    with pytest.raises(ValueError, match="invalid output"):
        JobSpec(id="x", output=PurePosixPath("/etc/passwd"))


# --- YAML loading ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "want"),
    [
        pytest.param(b"", "job file: empty, expected a YAML mapping", id="empty"),
        pytest.param(b"  \n\t\r\n  ", "job file: empty, expected a YAML mapping", id="whitespace"),
        pytest.param(
            b"- a\n- b\n", "job file: expected a YAML mapping at the top, got list at line 1, column 1", id="list"
        ),
        pytest.param(
            b"hello\n", "job file: expected a YAML mapping at the top, got string at line 1, column 1", id="scalar"
        ),
        pytest.param(
            b"\n\n  42\n", "job file: expected a YAML mapping at the top, got integer at line 3, column 3", id="int"
        ),
        pytest.param(
            b"--- 1.5\n", "job file: expected a YAML mapping at the top, got number at line 1, column 5", id="float"
        ),
        pytest.param(b"# only a comment\n", "job file: expected a YAML mapping at the top, got null", id="comment"),
        pytest.param(b"a: \xff\xfe\n", "job file: not valid UTF-8 (byte 3)", id="bad-utf8"),
        pytest.param(b"a: b\x00\n", "job file: contains NUL bytes, expected YAML text", id="nul"),
    ],
)
def test_load_yaml_mapping_refuses(data: bytes, want: str) -> None:
    assert load_problem(data) == want


def test_invalid_yaml_names_line_and_column() -> None:
    line = load_problem(b"a: b\nc: d: e\n")
    assert line.startswith("job file: not valid YAML: line 2, column 5: ")
    assert "mapping values are not allowed" in line


def test_unclosed_flow_sequence_names_line_and_column() -> None:
    line = load_problem(b"a: [1, 2\nb: c\n")
    assert line.startswith("job file: not valid YAML: line 2, column 2: ")


def test_multiple_documents_refused() -> None:
    line = load_problem(b"a: 1\n---\nb: 2\n")
    assert line.startswith("job file: not valid YAML: line 2, column 1: ")
    assert "another document" in line


def test_python_tags_refused() -> None:
    line = load_problem(b"a: !!python/object/apply:os.system [echo hi]\n")
    assert line.startswith("job file: not valid YAML: ")


def test_simple_alias_refused() -> None:
    assert load_problem(b"a: &x [1]\nb: *x\n") == "job file: YAML aliases (*name) are not allowed"


def test_billion_laughs_refused_quickly() -> None:
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i, name in enumerate("bcdefghi"):
        prev = "abcdefghi"[i]
        lines.append(f"{name}: &{name} [{','.join(['*' + prev] * 9)}]")
    lines.append("props: *i")
    data = ("\n".join(lines) + "\n").encode()
    started = time.monotonic()
    line = load_problem(data)
    assert time.monotonic() - started < 5
    assert "aliases" in line


def test_nesting_at_limit_accepted_beyond_refused() -> None:
    # The top mapping is level 1: 31 sequences inside it make 32 levels.
    ok = b"a: " + b"[" * 31 + b"]" * 31 + b"\n"
    assert isinstance(load_yaml_mapping(ok), dict)
    too_deep = b"a: " + b"[" * 32 + b"]" * 32 + b"\n"
    assert load_problem(too_deep) == "job file: nested deeper than 32 levels"


def test_stack_bomb_refused() -> None:
    data = b"a: " + b"[" * 50_000 + b"]" * 50_000 + b"\n"
    # Refused by our depth check, or earlier by PyYAML >= 6.0.4's own scanner limit
    # ("exceeded maximum nesting depth"); either way one line about the nesting.
    assert load_problem(data) in (
        "job file: nested deeper than 32 levels",
        "job file: not valid YAML: line 1, column 1003: exceeded maximum nesting depth",
    )


def test_block_nesting_counts_mappings() -> None:
    text = "".join("  " * i + f"k{i}:\n" for i in range(33)) + "  " * 33 + "leaf\n"
    assert load_problem(text.encode()) == "job file: nested deeper than 32 levels"


def test_parse_job_passes_load_errors_through(config: SpoolConfig) -> None:
    assert single_problem(b"- a\n", config).startswith("job file: expected a YAML mapping at the top")


# --- YAML that the loader cannot construct ---------------------------------------------


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(b"composition: Main\nnot_before: 2026-13-45\n", id="impossible-date"),
        pytest.param(b"composition: Main\ntimeout: !!int abc\n", id="bad-int-tag"),
    ],
)
def test_unconstructible_yaml_is_job_invalid(data: bytes, config: SpoolConfig) -> None:
    with pytest.raises(JobInvalid):
        parse_job(data, "j.yaml", config)


def test_huge_integer_timeout_is_job_invalid(config: SpoolConfig) -> None:
    data = b"composition: Main\ntimeout: 1" + b"0" * 400 + b"\n"
    with pytest.raises(JobInvalid) as info:
        parse_job(data, "j.yaml", config)
    assert info.value.problems[0].startswith("field 'timeout': ")


def test_props_are_json_serialisable_or_refused(config: SpoolConfig) -> None:
    data = b"renderer: command\ncommand: props\nprops: {day: 2026-01-01, tags: !!set {a: null}}\n"
    try:
        spec = parse_job(data, "j.yaml", config)
    except JobInvalid as exc:
        assert any(p.startswith("field 'props") for p in exc.problems)
        return
    json.dumps(spec.props)
    json.dumps(spec.fallback.get("props", {}))


# --- reading job files safely ----------------------------------------------------------


def read_problem(path: Path, max_bytes: int = 1024) -> str:
    with pytest.raises(JobInvalid) as info:
        read_job_bytes(path, max_bytes)
    assert len(info.value.problems) == 1
    assert "\n" not in info.value.problems[0]
    return info.value.problems[0]


def test_read_regular_file(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_bytes(b"composition: Main\n")
    assert read_job_bytes(path, 1024) == b"composition: Main\n"


def test_read_file_exactly_at_limit(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_bytes(b"x" * 10)
    assert read_job_bytes(path, 10) == b"x" * 10


def test_read_file_over_limit(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_bytes(b"x" * 11)
    assert read_problem(path, 10) == "job file: 11 bytes is over the limit of 10 (max_job_bytes)"


def test_read_symlink_refused(tmp_path: Path) -> None:
    target = tmp_path / "secret"
    target.write_bytes(b"composition: Secret\n")
    link = tmp_path / "job.yaml"
    link.symlink_to(target)
    assert read_problem(link) == "job file: expected a regular file, got a symlink"


def test_read_dangling_symlink_refused(tmp_path: Path) -> None:
    link = tmp_path / "job.yaml"
    link.symlink_to(tmp_path / "nowhere")
    assert read_problem(link) == "job file: expected a regular file, got a symlink"


def test_read_directory_refused(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.mkdir()
    assert read_problem(path) == "job file: expected a regular file, got a directory"


def test_read_fifo_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "job.yaml"
    os.mkfifo(fifo)
    outcome: list[BaseException | bytes] = []

    def attempt() -> None:
        try:
            outcome.append(read_job_bytes(fifo, 1024))
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=attempt, daemon=True)
    thread.start()
    thread.join(timeout=10)
    if thread.is_alive():
        # Unblock the reader (an open for writing completes its open) before failing.
        fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        os.close(fd)
        thread.join(timeout=10)
        pytest.fail("read_job_bytes blocked on a FIFO")
    assert len(outcome) == 1
    exc = outcome[0]
    assert isinstance(exc, JobInvalid), exc
    assert exc.problems == ["job file: expected a regular file, got a FIFO"]


def test_read_empty_file_then_load_reports_empty(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_bytes(b"")
    assert read_job_bytes(path, 1024) == b""
    assert load_problem(b"") == "job file: empty, expected a YAML mapping"


# --- upload names and ids from file names ----------------------------------------------


@pytest.mark.parametrize("name", [".x", ".job.yaml", "x.part", "job.yaml.part", "x.tmp", "x~", "job.yaml~"])
def test_ignored_upload_names(name: str) -> None:
    assert is_candidate_name(name) is False


@pytest.mark.parametrize("name", ["x", "job.yaml", "job.json", "x.partial", "x.tmpl", "a~b", "x.part.yaml"])
def test_candidate_names(name: str) -> None:
    assert is_candidate_name(name) is True


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("clip.yaml", "clip"),
        ("clip.yml", "clip"),
        ("clip.json", "clip"),
        ("clip.final.yaml", "clip.final"),
        ("clip.txt", "clip.txt"),
        ("clip", "clip"),
        ("x" * 128 + ".yaml", "x" * 128),
    ],
)
def test_id_from_filename_keeps_a_valid_stem(name: str, expected: str) -> None:
    assert id_from_filename(name) == expected


@pytest.mark.parametrize(
    ("name", "prefix"),
    [
        ("my clip.yaml", "my_clip"),
        ("vidéo.yaml", "vid_o"),
        ("a\nb.yaml", "a_b"),
        ("tab\there.yml", "tab_here"),
        ("日本語.yaml", "job"),
        ("___x.yaml", "x"),
        ("-dash.yaml", "dash"),
        (".yaml", "job"),
        ("a/b.yaml", "a_b"),
        ("a  !! b.yaml", "a_b"),
        ("x" * 200 + ".yaml", "x" * 115),
    ],
)
def test_id_from_filename_cleans_up_and_adds_a_hash_of_the_name(name: str, prefix: str) -> None:
    job_id = id_from_filename(name)
    assert job_id.startswith(prefix + "-"), job_id
    assert len(job_id) == len(prefix) + 1 + 12
    assert ID_PATTERN.fullmatch(job_id)


def test_default_ids_are_unique_across_names_that_clean_up_alike() -> None:
    # Issue 12 item 11: every all-non-ASCII name became "job", long names with a common
    # prefix collided. Names that differ must get different ids.
    names = ["レポート.yaml", "請求書.yaml", "日本語.yaml", "日本語.yml", "🎬.yaml", "ü.yaml", "é.yaml", ".yaml"]
    names += ["a b.yaml", "a!b.yaml", "a?b.yaml", "a_b.yaml", "a\udcffb.yaml", "a\udcfeb.yaml"]
    prefix = "quarterly-report-for-the-board-of-directors-" * 4
    names += [f"{prefix}{i}.yaml" for i in range(50)]
    names += [f"{prefix}{i} copy.yaml" for i in range(50)]
    ids = [id_from_filename(n) for n in names]
    assert len(set(ids)) == len(names), [i for i in ids if ids.count(i) > 1]
    for job_id in ids:
        assert ID_PATTERN.fullmatch(job_id)
        # A retry stands in the id for the file name (intake/claim.py): it must give the same id.
        assert id_from_filename(f"{job_id}.yaml") == job_id


def test_id_origin_says_where_the_id_came_from(config: SpoolConfig) -> None:
    declared = parse_job(b"id: recap\ncomposition: Main\n", "レポート.yaml", config)
    assert declared.id_origin == "field 'id'"
    derived = parse_job(b"composition: Main\n", "レポート.yaml", config)
    assert derived.id.startswith("job-")
    assert derived.id_origin == "id from the file name 'レポート.yaml'"
    # A bad `id:` is reported against the field; the job is then known by its file name.
    with pytest.raises(JobInvalid) as info:
        parse_job(b"id: 'a b'\ncomposition: Main\n", "clip.yaml", config)
    assert info.value.problems[0].startswith("field 'id': ")
    assert info.value.job_id == "clip"


def test_job_invalid_carries_the_declared_id_when_readable(config: SpoolConfig) -> None:
    # Issue 13 item 8: a job that fails validation is filed under its `id:`.
    with pytest.raises(JobInvalid) as info:
        parse_job(b"id: tester-typo\ncomposition: Main\ntimout: 5\n", "upload-1.yaml", config)
    assert info.value.job_id == "tester-typo"
    with pytest.raises(JobInvalid) as info:
        parse_job(b"- not a mapping\n", "upload-1.yaml", config)
    assert info.value.job_id is None  # unreadable: the caller files it under the file name


@pytest.mark.parametrize("name", ["my clip.yaml", "vidéo 🎬.yaml", "line\nbreak.yaml", "\x00.yaml", "ä" * 300])
def test_parse_job_default_id_from_hostile_names_is_valid(name: str, config: SpoolConfig) -> None:
    spec = parse_job(b"composition: Main\n", name, config)
    assert ID_PATTERN.fullmatch(spec.id)
    assert spec.output == PurePosixPath(spec.id + ".mp4")
    assert output_path_problem(str(spec.output)) is None


# --- duplicate keys, and reasons that never quote the file (issue 12 items 11, 14) -----


@pytest.mark.parametrize(
    ("data", "want"),
    [
        (b"id: a\ncomposition: Main\nid: b\n", "line 3, column 1: duplicate key 'id' (first at line 1)"),
        (b"props:\n  a: 1\n  b:\n    - {x: 1, y: 2, x: 3}\n", "line 4, column 20: duplicate key 'x' (first at line 4)"),
        (
            b"settings: {crf: 1}\nfallback:\n  settings:\n    crf: 2\n    crf: 3\n",
            "line 5, column 5: duplicate key 'crf' (first at line 4)",
        ),
        (b'"id": a\nid: b\n', "line 2, column 1: duplicate key 'id' (first at line 1)"),
        (b"1: a\n0x1: b\n", "line 2, column 1: duplicate key (a integer key) (first at line 1)"),
        (b"props: {<<: {a: 1}}\n", "line 1, column 9: merge keys (<<) are not allowed"),
    ],
)
def test_duplicate_and_merge_keys_are_refused_with_lines(data: bytes, want: str) -> None:
    assert load_problem(data) == f"job file: not valid YAML: {want}"


@pytest.mark.parametrize(
    ("data", "want"),
    [
        (b"composition: Main\nprops:\n  on: 1\n", "line 3, column 3: key 'on' is read as the boolean true"),
        (b"props:\n  scene: [{title: a, no: 2}]\n", "line 2, column 22: key 'no' is read as the boolean false"),
        (b"composition: Main\nOff: 3\n", "line 2, column 1: key 'Off' is read as the boolean false"),
    ],
)
def test_a_key_yaml_reads_as_a_boolean_is_refused_with_the_way_out(data: bytes, want: str) -> None:
    # On main, a nested `on:` reached the composition as the JSON key "true".
    message = load_problem(data)
    assert message.startswith(f"job file: not valid YAML: {want} (YAML 1.1: ")
    assert message.endswith("; quote it, '" + want.split("'")[1] + "':, to use it as a name")
    assert load_yaml_mapping(b"props:\n  'on': 1\n") == {"props": {"on": 1}}


def test_job_file_values_stay_yaml_1_1(config: SpoolConfig) -> None:
    # A decision (jobfile.loading): `rerun: yes` and props `loop: on` mean what they always did.
    spec = parse_job(b"composition: Main\nrerun: yes\nprops: {loop: on, label: no}\n", "a.yaml", config)
    assert spec.rerun is True
    assert spec.props == {"loop": True, "label": False}


def test_distinct_keys_at_different_depths_are_fine() -> None:
    doc = load_yaml_mapping(b"id: a\nprops: {id: b, scene: {id: c}}\nsettings: {}\n")
    assert doc == {"id": "a", "props": {"id": "b", "scene": {"id": "c"}}, "settings": {}}


SECRET = "hunter2-do-not-echo-9f3"


@pytest.mark.parametrize(
    "data",
    [
        f"{SECRET}:x:0:0:root:/root:/bin/bash\n".encode(),
        f"- {SECRET}\n".encode(),
        f"{{a: 1}} {SECRET}\n".encode(),
        f"a: b\n{SECRET}: [x\n".encode(),
        f"a: '{SECRET}\n".encode(),
        f'a: "{SECRET}\\q"\n'.encode(),
        f"a: !{SECRET} x\n".encode(),
        f"a: !!int {SECRET}\n".encode(),
        f"a: !!float {SECRET}\n".encode(),
        f"a: !!bool {SECRET}\n".encode(),
        f"a: !!timestamp {SECRET}\n".encode(),
        f"a: !!binary {SECRET}\n".encode(),
        f"a: !<tag:{SECRET}> x\n".encode(),
        f"%YAML 9.9 {SECRET}\n---\na: 1\n".encode(),
        f"%TAG !x! tag:x,2000:\n---\na: !x!{SECRET} 1\n".encode(),
        f"a: 1\n--- {SECRET}\n".encode(),
        f"a:\n  - b\n  {SECRET}\n".encode(),
        f"&{SECRET} a: 1\nb: *{SECRET}\n".encode(),
        f"a: *{SECRET}\n".encode(),
    ],
)
def test_load_reasons_never_quote_the_file(data: bytes) -> None:
    line = load_problem(data)
    assert SECRET not in line and SECRET.lower() not in line.lower(), line
    assert "line " in line or "aliases" in line, line  # a position instead


def test_single_characters_the_parser_quotes_are_kept() -> None:
    line = load_problem(b"a: b\n\tc: d\n")
    assert line.startswith("job file: not valid YAML: line 2, column 1: "), line


# --- spool caps (issue 12 item 15) -------------------------------------------------------


def test_timeout_and_attempts_over_the_spools_caps_are_refused(config: SpoolConfig) -> None:
    line = single_problem(dump({**BASE, "timeout": 21601}), config)
    assert line == "field 'timeout': 21601 s is over this spool's limit of 21600 s (max_job_timeout_seconds)"
    line = single_problem(dump({**BASE, "max_attempts": 11}), config)
    assert line == "field 'max_attempts': 11 is over this spool's limit of 10 (max_job_attempts)"


def test_caps_follow_the_spool_config(spool: Any) -> None:
    config = load_config(spool.root, overrides={"max_job_timeout_seconds": "60", "max_job_attempts": "2",
                                                "max_attempts": "1", "timeout_seconds": "30"}, environ={})  # fmt: skip
    assert parse_job(dump({**BASE, "timeout": 60, "max_attempts": 2}), "j.yaml", config).timeout == 60
    problems = problems_of(dump({**BASE, "timeout": 61, "max_attempts": 3}), config)
    assert problems == [
        "field 'max_attempts': 3 is over this spool's limit of 2 (max_job_attempts)",
        "field 'timeout': 61 s is over this spool's limit of 60 s (max_job_timeout_seconds)",
    ]


@pytest.mark.parametrize(
    ("overrides", "want"),
    [
        ({"max_attempts": "11", "max_job_attempts": "10"}, "max_attempts (11) is over max_job_attempts (10)"),
        (
            {"timeout_seconds": "90000", "max_job_timeout_seconds": "21600"},
            "timeout_seconds (90000) is over max_job_timeout_seconds (21600)",
        ),
        ({"max_job_frame_pixels": "0"}, "max_job_frame_pixels: expected a whole number >= 1"),
        ({"max_job_frames": "many"}, "max_job_frames: expected a whole number >= 1"),
    ],
)
def test_spool_defaults_must_fit_the_caps(spool: Any, overrides: dict[str, str], want: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(spool.root, overrides=overrides, environ={})
    assert want in str(info.value)


def test_auto_caps_never_refuse_the_spools_own_defaults(spool: Any) -> None:
    config = load_config(spool.root, overrides={"max_attempts": "50", "timeout_seconds": "86400"}, environ={})
    assert (config.job_attempts_limit, config.job_timeout_limit) == (50, 86400)
    assert parse_job(dump({**BASE, "max_attempts": 50, "timeout": 86400}), "j.yaml", config).max_attempts == 50
    assert single_problem(dump({**BASE, "max_attempts": 51}), config).endswith("limit of 50 (max_job_attempts)")


def test_frame_pixel_budget_derives_from_memory_per_job(spool: Any) -> None:
    config = load_config(spool.root, environ={})
    assert config.max_job_frame_pixels is None
    assert config.frame_pixel_limit == 1024 * 1024 * 1024 // defaults.BYTES_PER_FRAME_PIXEL
    assert render_size_problem(config, 3840, 2160, 300, 1) is None  # 4K UHD fits 1 GiB
    bigger = load_config(spool.root, overrides={"memory_per_job_mb": "2048"}, environ={})
    assert bigger.frame_pixel_limit == 2 * config.frame_pixel_limit
    assert render_size_problem(bigger, 7680, 4320, 300, 1) is None  # 8K needs 2 GiB
    why = render_size_problem(config, 1280, 720, 30, 16)
    assert why == (
        "a frame of 20480x11520 pixels (the composition's 1280x720 at scale 16) is 235,929,600 pixels, over this "
        "spool's limit of 16,777,216 (max_job_frame_pixels, derived from memory_per_job_mb 1024); lower "
        "settings.scale or the composition's size"
    )
    assert render_size_problem(config, 160, 90, 10**9, 1) == (
        "the render has 1,000,000,000 frames, over this spool's limit of 108,000 (max_job_frames)"
    )
    assert render_size_problem(config, 160, 90, 108_000, 1) is None


# --- output suffix (issue 12 item 16) ------------------------------------------------------


@pytest.mark.parametrize(
    "output",
    ["x.mp4;id;touch y;:", "x.mp4 $(id)", "a/b.mp4`id`", "clip.", "clip.mp 4", "clip.m\u200bp4", "clip.mp4\n",
     "c.mp4'", "c.mp4|sh", "c.-x", "c." + "a" * 17, "c.mp4&", "c.\uff4d\uff504"],
)  # fmt: skip
def test_output_suffix_must_be_letters_and_digits(output: str, config: SpoolConfig) -> None:
    line = single_problem(dump({**BASE, "output": output}), config)
    assert line.startswith("field 'output': ")
    assert "suffix must be 1-16 letters or digits" in line or "hidden" in line, line


@pytest.mark.parametrize("output", ["clip", "a b;c/$(x)/clip.mkv", "x/y.tar.gz", "c.M4V", "c." + "a" * 16])
def test_output_suffix_rule_leaves_directories_and_plain_names(output: str, config: SpoolConfig) -> None:
    spec = parse_job(dump({**BASE, "output": output}), "j.yaml", config)
    assert str(spec.output) == output
    suffix = spec.output.suffix
    assert suffix == "" or (suffix[1:].isascii() and suffix[1:].isalnum())


@pytest.mark.parametrize("output", ["/" + "a" * 5000, "a/../" + "b" * 5000, ".h" + "c" * 5000, "x." + "d" * 5000])
def test_long_outputs_are_quoted_cut_short(output: str, config: SpoolConfig) -> None:
    line = single_problem(dump({**BASE, "output": output}), config)
    assert line.startswith("field 'output': ") and len(line) < 200, line
