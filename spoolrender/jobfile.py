"""Job files: reading them safely and validating them into a frozen :class:`JobSpec`.

A job file is a YAML mapping (JSON is YAML too). Everything that can be wrong with one
is reported at once, one line per problem (field, what was expected, what was found),
as a :class:`~spoolrender.errors.JobInvalid`: the runner writes those lines into the
job's failure record, so the author can fix the file without reading any log.
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from pathlib import Path, PurePosixPath
from typing import Any

import yaml

from spoolrender import defaults
from spoolrender.config import SpoolConfig
from spoolrender.errors import JobInvalid

ID_PATTERN = re.compile(rf"[A-Za-z0-9][A-Za-z0-9._-]{{0,{defaults.MAX_ID_LENGTH - 1}}}")
RENDERERS = ("remotion", "command")
# Render settings a job may give per renderer, with a check returning a problem or None.
REMOTION_CODECS = ("h264", "h265", "vp8", "vp9", "prores", "gif")
KNOWN_FIELDS = (
    "id", "renderer", "composition", "command", "props", "output", "max_attempts",
    "timeout", "priority", "not_before", "rerun", "settings", "fallback",
)  # fmt: skip


def _describe(value: Any) -> str:
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{type(value).__name__} {text}"


def is_candidate_name(name: str) -> bool:
    """False for names that mark an upload in progress (``.x``, ``x.part``, ``x.tmp``, ``x~``)."""
    return not (name.startswith(defaults.IGNORED_PREFIXES) or name.endswith(defaults.IGNORED_SUFFIXES))


def id_from_filename(name: str) -> str:
    """The default job id: the file name without its job suffix, made filesystem-safe."""
    stem = name
    for suffix in defaults.JOB_SUFFIXES:
        if stem.endswith(suffix):
            stem = stem[: -len(suffix)]
            break
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", stem).lstrip("._-")
    return safe[: defaults.MAX_ID_LENGTH] or "job"


@dataclass(frozen=True)
class JobSpec:
    """A validated job. Built only through :func:`parse_job` (or tests, with valid values)."""

    id: str
    renderer: str = defaults.DEFAULT_RENDERER
    composition: str | None = None
    command: str | None = None
    props: dict[str, Any] = field(default_factory=dict)
    output: PurePosixPath = field(default_factory=lambda: PurePosixPath("out.mp4"))
    max_attempts: int = defaults.DEFAULT_MAX_ATTEMPTS
    timeout: float = defaults.DEFAULT_TIMEOUT_S
    priority: int = defaults.DEFAULT_PRIORITY
    not_before: float | None = None  # epoch seconds
    rerun: bool = False
    settings: dict[str, Any] = field(default_factory=dict)
    fallback: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # The invariants the rest of the code relies on; parse_job reports them nicely.
        if not ID_PATTERN.fullmatch(self.id):
            raise ValueError(f"invalid job id {self.id!r}")
        if self.renderer not in RENDERERS:
            raise ValueError(f"invalid renderer {self.renderer!r}")
        if output_path_problem(str(self.output)) is not None:
            raise ValueError(f"invalid output {self.output!r}")

    def settings_for_attempt(self, attempt: int) -> tuple[dict[str, Any], dict[str, Any], bool]:
        """(props, settings, fallback_used) for ``attempt``.

        ``fallback`` is merged in on the last attempt of several (a job with one attempt
        has nothing to fall back from).
        """
        if self.fallback and attempt >= self.max_attempts and self.max_attempts > 1:
            props = {**self.props, **self.fallback.get("props", {})}
            settings = {**self.settings, **self.fallback.get("settings", {})}
            return props, settings, True
        return dict(self.props), dict(self.settings), False


def output_path_problem(text: str) -> str | None:
    """Why ``text`` cannot be an output path under the output root, or None if it can."""
    if not text or "\x00" in text:
        return "expected a relative file path, got an empty or NUL-containing string"
    if text.startswith("/") or "\\" in text:
        return f"expected a path relative to the output root, got {text!r}"
    parts = text.split("/")
    for part in parts:
        if part in ("", ".", ".."):
            return f"'.', '..' and empty components are not allowed, got {text!r}"
        if part.startswith("."):
            return f"hidden names (starting with '.') are reserved, got {text!r}"
        if len(part.encode("utf-8", "surrogateescape")) > 255:
            return f"a path component is longer than 255 bytes in {text[:60]!r}..."
    if len(text) > 1024:
        return "expected a path of at most 1024 characters"
    return None


def read_job_bytes(path: Path, max_bytes: int) -> bytes:
    """Read a claimed job file without following links or blocking on FIFOs."""
    try:
        # O_NOFOLLOW: a symlink dropped into incoming/ must not make us read (and echo
        # into records) some other file. O_NONBLOCK: opening a FIFO must not hang.
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        try:
            kind = _file_kind(os.lstat(path).st_mode)
        except OSError:
            kind = None
        if kind is not None and kind != "regular file":
            raise JobInvalid([f"job file: expected a regular file, got a {kind}"]) from exc
        raise JobInvalid([f"job file: cannot open: {exc.strerror}"]) from exc
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise JobInvalid([f"job file: expected a regular file, got a {_file_kind(st.st_mode)}"])
        if st.st_size > max_bytes:
            raise JobInvalid([f"job file: {st.st_size} bytes is over the limit of {max_bytes} (max_job_bytes)"])
        with os.fdopen(fd, "rb", closefd=False) as fh:
            data = fh.read(max_bytes + 1)
        if len(data) > max_bytes:  # grew after fstat
            raise JobInvalid([f"job file: over the limit of {max_bytes} bytes (max_job_bytes)"])
        return data
    finally:
        os.close(fd)


def _file_kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "symlink"
    if stat.S_ISDIR(mode):
        return "directory"
    if stat.S_ISFIFO(mode):
        return "FIFO"
    if stat.S_ISSOCK(mode):
        return "socket"
    if stat.S_ISREG(mode):
        return "regular file"
    return "special file"


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
    try:
        # One pass over the parser's events before constructing anything: aliases can
        # expand exponentially (billion laughs) once props are serialised, and deep
        # nesting can exhaust the stack, so both are refused outright.
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
        doc = yaml.load(text, Loader=yaml.CSafeLoader)
    except yaml.YAMLError as exc:
        raise JobInvalid([f"job file: not valid YAML: {_yaml_reason(exc)}"]) from exc
    except (ValueError, TypeError, OverflowError) as exc:
        # Parsed, but a value cannot be built: an impossible date, `!!int abc`, ...
        raise JobInvalid([f"job file: not valid YAML: {exc}"]) from exc
    except RecursionError as exc:  # pragma: no cover - guarded by the depth check
        raise JobInvalid(["job file: nested too deeply"]) from exc
    if not isinstance(doc, dict):
        raise JobInvalid([f"job file: expected a YAML mapping at the top, got {_describe(doc)}"])
    return doc


def _yaml_reason(exc: yaml.YAMLError) -> str:
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    if mark is not None:
        return f"line {mark.line + 1}, column {mark.column + 1}: {problem}"
    return str(problem)


def _check_settings(where: str, value: Any, renderer: str, problems: list[str]) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        problems.append(f"field '{where}': expected a mapping, got {_describe(value)}")
        return {}
    if renderer != "remotion":
        if value:
            problems.append(f"field '{where}': the {renderer} renderer takes no settings")
        return {}
    out: dict[str, Any] = {}
    for key, v in value.items():
        name = f"{where}.{key}"
        if key == "codec":
            if v not in REMOTION_CODECS:
                problems.append(f"field '{name}': expected one of {', '.join(REMOTION_CODECS)}, got {_describe(v)}")
                continue
        elif key == "scale":
            if isinstance(v, bool) or not isinstance(v, int | float) or not 0 < v <= 16:
                problems.append(f"field '{name}': expected a number in (0, 16], got {_describe(v)}")
                continue
        elif key == "crf":
            if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= 63:
                problems.append(f"field '{name}': expected a whole number 0-63, got {_describe(v)}")
                continue
        else:
            problems.append(f"field '{name}': unknown setting (known: codec, scale, crf)")
            continue
        out[str(key)] = v
    return out


def _check_json(where: str, value: dict[str, Any], problems: list[str]) -> None:
    """Props travel to renderers as JSON: YAML dates, sets, binary or NaN cannot."""
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as exc:
        problems.append(
            f"field '{where}': values must be JSON data (strings, numbers, true/false, null, lists, mappings); {exc}"
        )


def _epoch(value: Any) -> float | None:
    if isinstance(value, datetime):
        dt = value
    elif isinstance(value, date):
        dt = datetime(value.year, value.month, value.day)
    elif isinstance(value, str):
        try:
            dt = datetime.fromisoformat(value)
        except ValueError:
            return None
    else:
        return None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)  # documented: a time without a zone is UTC
    return dt.timestamp()


def parse_job(data: bytes, filename: str, config: SpoolConfig) -> JobSpec:
    """Validate job bytes into a :class:`JobSpec`, or raise JobInvalid listing every problem."""
    doc = load_yaml_mapping(data)
    problems: list[str] = []

    unknown = [k for k in doc if k not in KNOWN_FIELDS]
    for key in unknown:
        problems.append(f"field {str(key)[:60]!r}: unknown field (known: {', '.join(KNOWN_FIELDS)})")

    job_id = doc.get("id")
    if job_id is None:
        job_id = id_from_filename(filename)
    elif not isinstance(job_id, str) or not ID_PATTERN.fullmatch(job_id):
        problems.append(
            "field 'id': expected 1-128 characters of A-Z a-z 0-9 . _ - starting with a letter "
            f"or digit, got {_describe(job_id)}"
        )
        job_id = id_from_filename(filename)

    renderer = doc.get("renderer", defaults.DEFAULT_RENDERER)
    if renderer not in RENDERERS:
        problems.append(f"field 'renderer': expected one of {', '.join(RENDERERS)}, got {_describe(renderer)}")
        renderer = defaults.DEFAULT_RENDERER

    composition = doc.get("composition")
    command = doc.get("command")
    if renderer == "remotion":
        if composition is None:
            problems.append("field 'composition': required for the remotion renderer (a composition id)")
        elif not isinstance(composition, str) or not composition:
            problems.append(f"field 'composition': expected a composition id string, got {_describe(composition)}")
            composition = None
        if command is not None:
            problems.append("field 'command': only for renderer: command")
    else:
        allowed = sorted(config.commands)
        if command is None:
            problems.append(
                "field 'command': required for the command renderer "
                f"(one of the spool config's commands: {', '.join(allowed) or 'none configured'})"
            )
        elif not isinstance(command, str) or command not in config.commands:
            problems.append(
                f"field 'command': expected one of the spool config's commands "
                f"({', '.join(allowed) or 'none configured'}), got {_describe(command)}"
            )
            command = None
        if composition is not None:
            problems.append("field 'composition': only for renderer: remotion")

    props = doc.get("props", {})
    if props is None:
        props = {}
    if not isinstance(props, dict) or not all(isinstance(k, str) for k in props):
        problems.append(f"field 'props': expected a mapping with string keys, got {_describe(props)}")
        props = {}
    else:
        _check_json("props", props, problems)

    output_text = doc.get("output")
    if output_text is None:
        output_text = job_id + defaults.DEFAULT_OUTPUT_SUFFIX
    if not isinstance(output_text, str):
        problems.append(f"field 'output': expected a relative file path, got {_describe(output_text)}")
        output_text = job_id + defaults.DEFAULT_OUTPUT_SUFFIX
    else:
        why = output_path_problem(output_text)
        if why is not None:
            problems.append(f"field 'output': {why}")
            output_text = job_id + defaults.DEFAULT_OUTPUT_SUFFIX

    max_attempts = doc.get("max_attempts", config.max_attempts)
    if (
        isinstance(max_attempts, bool)
        or not isinstance(max_attempts, int)
        or not (1 <= max_attempts <= defaults.MAX_MAX_ATTEMPTS)
    ):
        problems.append(
            f"field 'max_attempts': expected a whole number 1-{defaults.MAX_MAX_ATTEMPTS}, "
            f"got {_describe(max_attempts)}"
        )
        max_attempts = config.max_attempts

    timeout = doc.get("timeout", config.timeout_seconds)
    if (
        isinstance(timeout, bool)
        or not isinstance(timeout, int | float)
        or (isinstance(timeout, float) and not math.isfinite(timeout))
        or not 0 < timeout <= defaults.MAX_TIMEOUT_S
    ):
        problems.append(
            f"field 'timeout': expected seconds > 0 and <= {defaults.MAX_TIMEOUT_S:.0f}, got {_describe(timeout)}"
        )
        timeout = config.timeout_seconds

    priority = doc.get("priority", defaults.DEFAULT_PRIORITY)
    if (
        isinstance(priority, bool)
        or not isinstance(priority, int)
        or not (defaults.PRIORITY_MIN <= priority <= defaults.PRIORITY_MAX)
    ):
        problems.append(
            f"field 'priority': expected a whole number {defaults.PRIORITY_MIN} to "
            f"{defaults.PRIORITY_MAX} (higher runs first), got {_describe(priority)}"
        )
        priority = defaults.DEFAULT_PRIORITY

    not_before_raw = doc.get("not_before")
    not_before = None
    if not_before_raw is not None:
        not_before = _epoch(not_before_raw)
        if not_before is None:
            problems.append(
                "field 'not_before': expected an ISO 8601 time such as 2026-12-01T09:00:00Z, "
                f"got {_describe(not_before_raw)}"
            )

    rerun = doc.get("rerun", False)
    if not isinstance(rerun, bool):
        problems.append(f"field 'rerun': expected true or false, got {_describe(rerun)}")
        rerun = False

    settings = _check_settings("settings", doc.get("settings"), renderer, problems)
    fallback_raw = doc.get("fallback")
    fallback: dict[str, Any] = {}
    if fallback_raw is not None:
        if not isinstance(fallback_raw, dict):
            problems.append(f"field 'fallback': expected a mapping, got {_describe(fallback_raw)}")
        else:
            for key in fallback_raw:
                if key not in ("props", "settings"):
                    problems.append(f"field 'fallback.{key}': unknown (known: props, settings)")
            fb_props = fallback_raw.get("props", {})
            if isinstance(fb_props, dict):
                _check_json("fallback.props", fb_props, problems)
            if not isinstance(fb_props, dict):
                problems.append(f"field 'fallback.props': expected a mapping, got {_describe(fb_props)}")
                fb_props = {}
            fallback = {
                "props": fb_props,
                "settings": _check_settings("fallback.settings", fallback_raw.get("settings"), renderer, problems),
            }

    if problems:
        raise JobInvalid(problems)
    return JobSpec(
        id=job_id,
        renderer=renderer,
        composition=composition,
        command=command,
        props=props,
        output=PurePosixPath(output_text),
        max_attempts=max_attempts,
        timeout=float(timeout),
        priority=priority,
        not_before=not_before,
        rerun=rerun,
        settings=settings,
        fallback=fallback,
    )
