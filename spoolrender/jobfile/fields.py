"""The fields of a job file: one table of field specs, each with the check that turns
the file's value into the job's value.

A check gets the raw value (``MISSING`` when the field is absent) and the parse's
:class:`Fields` context; it returns the value to use and records each problem with
:meth:`Fields.problem`, falling back to the default so that later checks still run and
every problem is reported at once. Checks run in table order, so a check may read the
fields above it (``output`` defaults from ``id``; ``command`` depends on ``renderer``).
A new field is one check function, one row and one JobSpec attribute.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from pathlib import PurePosixPath
from typing import Any, Final

from spoolrender import defaults
from spoolrender.config.queues import name_problem
from spoolrender.config.spool_config import SpoolConfig
from spoolrender.core.suggest import did_you_mean
from spoolrender.jobfile.media import CODECS, check_still, combination_problems, default_suffix, setting_problem
from spoolrender.jobfile.naming import ID_PATTERN, ID_RULE, filename_origin, id_from_filename, output_path_problem

RENDERERS = ("remotion", "command")
REMOTION_CODECS = CODECS
ID_FIELD_ORIGIN = "field 'id'"


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


MISSING: Final = _Missing()


def describe(value: Any) -> str:
    """A value of a known field as reasons show it: its type and a short repr."""
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{type(value).__name__} {text}"


@dataclass
class Fields:
    """One parse in progress: the document, where it came from, what is known so far."""

    doc: Mapping[Any, Any]
    filename: str
    config: SpoolConfig
    problems: list[str] = field(default_factory=list)
    values: dict[str, Any] = field(default_factory=dict)
    id_origin: str = ID_FIELD_ORIGIN

    def problem(self, name: str, text: str) -> None:
        # Names may come from the file (unknown keys): escaped, so a reason stays one line.
        shown = name if name.isprintable() else name.encode("unicode_escape").decode("ascii")
        self.problems.append(f"field '{shown}': {text}")


Check = Callable[[Any, Fields], Any]


def _id(value: Any, f: Fields) -> str:
    if value is None or value is MISSING:
        f.id_origin = filename_origin(f.filename)
        return id_from_filename(f.filename)
    if not isinstance(value, str) or not ID_PATTERN.fullmatch(value):
        f.problem("id", f"expected {ID_RULE}, got {describe(value)}")
        f.id_origin = filename_origin(f.filename)
        return id_from_filename(f.filename)
    return value


def _renderer(value: Any, f: Fields) -> str:
    if value is MISSING:
        return defaults.DEFAULT_RENDERER
    if value not in RENDERERS:
        f.problem("renderer", f"expected one of {', '.join(RENDERERS)}, got {describe(value)}")
        return defaults.DEFAULT_RENDERER
    return str(value)


def _composition(value: Any, f: Fields) -> str | None:
    composition = None if value is MISSING else value
    if f.values["renderer"] != "remotion":
        if composition is not None:
            f.problem("composition", "only for renderer: remotion")
        return None
    if composition is None:
        f.problem("composition", "required for the remotion renderer (a composition id)")
        return None
    if not isinstance(composition, str) or not composition:
        f.problem("composition", f"expected a composition id string, got {describe(composition)}")
        return None
    return composition


def _command(value: Any, f: Fields) -> str | None:
    command = None if value is MISSING else value
    if f.values["renderer"] != "command":
        if command is not None:
            f.problem("command", "only for renderer: command")
        return None
    allowed = ", ".join(sorted(f.config.commands)) or "none configured"
    if command is None:
        f.problem("command", f"required for the command renderer (one of the spool config's commands: {allowed})")
        return None
    if not isinstance(command, str) or command not in f.config.commands:
        f.problem("command", f"expected one of the spool config's commands ({allowed}), got {describe(command)}")
        return None
    return command


def _project(value: Any, f: Fields) -> str | None:
    """Which of the spool's Remotion projects renders the job (absent: ``remotion_project``)."""
    if value is MISSING or value is None:
        return None
    if f.values["renderer"] != "remotion":
        f.problem("project", "only for renderer: remotion")
        return None
    if not isinstance(value, str) or value not in f.config.projects:
        known = ", ".join(sorted(f.config.projects)) or "none: spoolrender.yaml has no projects"
        f.problem("project", f"expected one of the spool config's projects ({known}), got {describe(value)}")
        return None
    return value


def _json_problem(value: dict[str, Any]) -> str | None:
    """Props travel to renderers as JSON: YAML dates, sets, binary or NaN cannot."""
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as exc:
        return f"values must be JSON data (strings, numbers, true/false, null, lists, mappings); {exc}"
    return None


def _props(value: Any, f: Fields) -> dict[str, Any]:
    if value is None or value is MISSING:
        return {}
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        f.problem("props", f"expected a mapping with string keys, got {describe(value)}")
        return {}
    why = _json_problem(value)
    if why is not None:
        f.problem("props", why)
    return value


def _output(value: Any, f: Fields) -> str | None:
    # None: not given; _media gives it the default name once the codec or still is known.
    if value is None or value is MISSING:
        return None
    if not isinstance(value, str):
        f.problem("output", f"expected a relative file path, got {describe(value)}")
        return None
    why = output_path_problem(value)
    if why is not None:
        f.problem("output", why)
        return None
    return value


def _whole_number(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _max_attempts(value: Any, f: Fields) -> int:
    cap = f.config.job_attempts_limit
    if value is MISSING:
        return f.config.max_attempts
    if not _whole_number(value) or value < 1:
        f.problem("max_attempts", f"expected a whole number 1-{cap}, got {describe(value)}")
        return f.config.max_attempts
    if value > cap:
        f.problem("max_attempts", f"{value} is over this spool's limit of {cap} (max_job_attempts)")
        return f.config.max_attempts
    return int(value)


def _timeout(value: Any, f: Fields) -> float:
    cap = f.config.job_timeout_limit
    if value is MISSING:
        return f.config.timeout_seconds
    finite = _whole_number(value) or (isinstance(value, float) and math.isfinite(value))
    if not finite or not value > 0:
        f.problem("timeout", f"expected seconds > 0 and <= {cap:g}, got {describe(value)}")
        return f.config.timeout_seconds
    if value > cap:
        # A huge integer is shown by size: its digits say nothing and could be many.
        shown = f"{value:g}" if isinstance(value, float) or value < 10**15 else "a number"
        f.problem("timeout", f"{shown} s is over this spool's limit of {cap:g} s (max_job_timeout_seconds)")
        return f.config.timeout_seconds
    return float(value)


def _priority(value: Any, f: Fields) -> int:
    if value is MISSING:
        return defaults.DEFAULT_PRIORITY
    if not _whole_number(value) or not defaults.PRIORITY_MIN <= value <= defaults.PRIORITY_MAX:
        f.problem(
            "priority",
            f"expected a whole number {defaults.PRIORITY_MIN} to {defaults.PRIORITY_MAX} (higher runs first), "
            f"got {describe(value)}",
        )
        return defaults.DEFAULT_PRIORITY
    return int(value)


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


def _not_before(value: Any, f: Fields) -> float | None:
    if value is None or value is MISSING:
        return None
    epoch = _epoch(value)
    if epoch is None:
        f.problem("not_before", f"expected an ISO 8601 time such as 2026-12-01T09:00:00Z, got {describe(value)}")
    return epoch


def _rerun(value: Any, f: Fields) -> bool:
    if value is MISSING:
        return False
    if not isinstance(value, bool):
        f.problem("rerun", f"expected true or false, got {describe(value)}")
        return False
    return value


def _checked_settings(where: str, value: Any, f: Fields) -> dict[str, Any]:
    if value is None or value is MISSING:
        return {}
    if not isinstance(value, dict):
        f.problem(where, f"expected a mapping, got {describe(value)}")
        return {}
    renderer = f.values["renderer"]
    if renderer != "remotion":
        if value:
            f.problem(where, f"the {renderer} renderer takes no settings")
        return {}
    out: dict[str, Any] = {}
    for key, v in value.items():
        why = setting_problem(key, v)
        if why is None:
            out[str(key)] = v
        else:
            f.problem(f"{where}.{str(key)[:60]}", why)
    return out


def _settings(value: Any, f: Fields) -> dict[str, Any]:
    return _checked_settings("settings", value, f)


def _fallback(value: Any, f: Fields) -> dict[str, Any]:
    if value is None or value is MISSING:
        return {}
    if not isinstance(value, dict):
        f.problem("fallback", f"expected a mapping, got {describe(value)}")
        return {}
    for key in value:
        if key not in ("props", "settings"):
            f.problem(f"fallback.{str(key)[:60]}", "unknown (known: props, settings)")
    props = value.get("props", {})
    if isinstance(props, dict):
        why = _json_problem(props)
        if why is not None:
            f.problem("fallback.props", why)
    else:
        f.problem("fallback.props", f"expected a mapping, got {describe(props)}")
        props = {}
    return {"props": props, "settings": _checked_settings("fallback.settings", value.get("settings"), f)}


def _queue(value: Any, f: Fields) -> str | None:
    if value is MISSING or value is None:
        return None
    why = name_problem("queue", value)
    if why is not None:
        f.problem("queue", why)
        return None
    return str(value)


def _requires(value: Any, f: Fields) -> tuple[str, ...]:
    if value is MISSING or value is None:
        return ()
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or len(value) > 32:
        f.problem("requires", f"expected a list of runner tags (at most 32), got {describe(value)}")
        return ()
    for tag in value:
        why = name_problem("tag", tag)
        if why is not None:
            f.problem("requires", why)
            return ()
    return tuple(sorted(set(value)))


def _still(value: Any, f: Fields) -> dict[str, Any] | None:
    if value is not MISSING and value not in (None, False) and f.values["renderer"] != "remotion":
        f.problem("still", "only for renderer: remotion")
        return None
    still, problems = check_still(None if value is MISSING else value)
    for text in problems:
        f.problem("still", text)
    return None if problems else still


def _cache(value: Any, f: Fields) -> bool | None:
    """``cache: true`` asks for the render cache, ``false`` opts out; absent: the spool's
    ``render_cache`` decides."""
    if value is MISSING or value is None:
        return None
    if not isinstance(value, bool):
        f.problem("cache", f"expected true or false, got {describe(value)}")
        return None
    return value


def _chunks(value: Any, f: Fields) -> int | None:
    if value is MISSING or value is None:
        return None
    if not _whole_number(value) or not 1 <= value <= defaults.MAX_CHUNKS:
        f.problem(
            "chunks",
            f"expected a whole number 1-{defaults.MAX_CHUNKS} (1: never split), got {describe(value)}",
        )
        return None
    return int(value)


def _chunk_frames(value: Any, f: Fields) -> int | None:
    if value is MISSING or value is None:
        return None
    if not _whole_number(value) or value < defaults.MIN_CHUNK_FRAMES:
        f.problem(
            "chunk_frames",
            f"expected a whole number of frames >= {defaults.MIN_CHUNK_FRAMES} "
            f"(shorter chunks cannot be joined seamlessly), got {describe(value)}",
        )
        return None
    if f.values["chunks"] is not None:
        f.problem("chunk_frames", "set chunks or chunk_frames, not both")
        return None
    return int(value)


# Order matters: a check may read the values of the fields above it.
FIELD_CHECKS: dict[str, Check] = {
    "id": _id,
    "renderer": _renderer,
    "composition": _composition,
    "project": _project,
    "command": _command,
    "props": _props,
    "output": _output,
    "max_attempts": _max_attempts,
    "timeout": _timeout,
    "priority": _priority,
    "not_before": _not_before,
    "rerun": _rerun,
    "settings": _settings,
    "fallback": _fallback,
    "queue": _queue,
    "requires": _requires,
    "still": _still,
    "cache": _cache,
    "chunks": _chunks,
    "chunk_frames": _chunk_frames,
}
KNOWN_FIELDS = tuple(FIELD_CHECKS)


def _media(f: Fields) -> None:
    """The output's default name, and the rules across settings, still and output: run
    for the settings of every attempt (the last one's include ``fallback.settings``)."""
    settings: dict[str, Any] = f.values["settings"]
    still = f.values["still"]
    output = f.values["output"]
    if output is None:
        output = str(f.values["id"]) + (default_suffix(settings, still) or defaults.DEFAULT_OUTPUT_SUFFIX)
        f.values["output"] = output
    if f.values["renderer"] != "remotion" or any(p.startswith(("field 'settings", "field 'fallback", "field 'still"))
                                                 for p in f.problems):  # fmt: skip
        return  # a setting that is itself wrong was reported; its combinations say nothing more
    where = "still" if still is not None else "settings"
    first = combination_problems(settings, still, PurePosixPath(output))
    for text in first:
        f.problem(where, text)
    extra = f.values["fallback"].get("settings")
    if extra:
        for text in combination_problems({**settings, **extra}, still, PurePosixPath(output)):
            if text not in first:
                f.problem("fallback.settings", text)


def check_fields(f: Fields) -> None:
    """Run every field's check over ``f.doc``, filling ``f.values`` and ``f.problems``."""
    for key in f.doc:
        if key not in FIELD_CHECKS:
            # The name of a field the file should not have: shown cut short, as it is
            # content of the file rather than something the schema knows.
            hint = did_you_mean(str(key), KNOWN_FIELDS) if isinstance(key, str) else ""
            known = f"unknown field (known: {', '.join(KNOWN_FIELDS)})"
            f.problem(str(key)[:60], f"{known}; {hint}" if hint else known)
    for name, check in FIELD_CHECKS.items():
        f.values[name] = check(f.doc.get(name, MISSING), f)
    _media(f)
