"""The checks of spoolrender.yaml's values: each takes (setting name, value) and returns
the value as the config holds it, or raises ConfigError naming the setting.

:mod:`spoolrender.config.settings` pairs each setting with its check.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from spoolrender.config.durations import DURATION, parse_duration
from spoolrender.config.queues import ALL_QUEUES, name_problem
from spoolrender.config.yaml_loader import yaml11_bool
from spoolrender.errors import ConfigError, SpoolrenderError

WATCH_MODES = ("auto", "inotify", "polling")
# Kept here (not imported from the command renderer) so config stays import-light.
COMMAND_PLACEHOLDERS = ("output", "job_file", "props_file", "work_dir", "threads", "job_id", "attempt")
PROJECT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


def positive_number(name: str, value: Any) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or (isinstance(value, float) and not math.isfinite(value))
    ):
        unit = " of seconds, without a unit (the name says seconds)" if _has_a_unit(value) else ""
        raise ConfigError(f"{name}: expected a number{unit}, got {type(value).__name__} {value!r}")
    if value <= 0:
        raise ConfigError(f"{name}: expected a number > 0, got {value!r}")
    try:
        return float(value)
    except OverflowError as exc:
        raise ConfigError(f"{name}: {str(value)[:20]}... is too large") from exc


def _has_a_unit(value: Any) -> bool:
    """``"2m"``: a duration typed with its unit where a number of seconds belongs."""
    m = DURATION.fullmatch(value) if isinstance(value, str) else None
    return m is not None and bool(m.group(2))


def non_negative_number(name: str, value: Any) -> float:
    if value == 0 and not isinstance(value, bool):
        return 0.0
    return positive_number(name, value)


def share(name: str, value: Any) -> float:
    """A share of a whole, from 0 to 1 (``0.5``: half); 0 is allowed, a unit or a percent
    sign is not. Its own check: the number checks' messages speak of seconds and of > 0."""
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if not number or not 0 <= value <= 1:  # NaN and infinities fail the range too
        got = repr(value) if number else f"{type(value).__name__} {value!r}"
        raise ConfigError(f"{name}: expected a share from 0 to 1 (0.5: half), got {got}")
    return float(value)


def positive_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{name}: expected a whole number >= 1, got {value!r}")
    return value


def optional_count(name: str, value: Any) -> int | None:
    """A whole number >= 1, or None for "auto" (derived from other settings)."""
    if value is None or value == "auto":
        return None
    return positive_int(name, value)


def optional_seconds(name: str, value: Any) -> float | None:
    if value is None or value == "auto":
        return None
    return positive_number(name, value)


def split_seconds(name: str, value: Any) -> float | None:
    """``split_seconds``: a threshold in seconds, or off (null, ``off``, ``false``, ``no``)."""
    if value is None or yaml11_bool(value) is False:
        return None
    return positive_number(name, value)


def _is_off(value: Any) -> bool:
    """Unset, or ``off`` (``false``, ``no``): a limit that is not applied."""
    return value is None or yaml11_bool(value) is False


def duration_or_off(name: str, value: Any) -> float | None:
    """A duration typed with its unit (``30d``, ``12h``: :mod:`spoolrender.config.durations`), or off.

    A bare number is refused: the name does not say the unit, and ``keep_done: 30`` meant
    as days would forget every job older than 30 seconds."""
    if _is_off(value):
        return None
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ConfigError(f"{name}: expected a duration such as 30d or 12h, or off, got {value!r}")
    try:
        seconds = parse_duration(str(value))
    except SpoolrenderError as exc:
        raise ConfigError(f"{name}: {exc}") from exc
    if seconds <= 0:
        raise ConfigError(f"{name}: expected a duration > 0 (or off), got {value!r}")
    return seconds


def count_or_off(name: str, value: Any) -> int | None:
    """A whole number >= 1, or off."""
    return None if _is_off(value) else positive_int(name, value)


def file_path(name: str, value: Any) -> Path:
    if not isinstance(value, str | Path) or not str(value):
        raise ConfigError(f"{name}: expected a path, got {value!r}")
    return Path(os.path.expanduser(str(value)))


def non_empty_string(name: str, value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{name}: expected a non-empty string, got {value!r}")
    return value


def optional_token(name: str, value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or len(value) < 16 or any(c.isspace() for c in value):
        raise ConfigError(f"{name}: expected a secret of at least 16 characters without spaces (or unset)")
    return value


def optional_path(name: str, value: Any) -> Path | None:
    return None if value is None else file_path(name, value)


def boolean(name: str, value: Any) -> bool:
    """true or false; yes/no and on/off too, as YAML 1.1 read them (config_yaml)."""
    flag = yaml11_bool(value)
    if flag is None:
        raise ConfigError(f"{name}: expected true or false, got {value!r}")
    return flag


def as_given(name: str, value: Any) -> Any:
    """No check here: the setting is parsed by SpoolConfig, which has what it needs
    (``hooks``: the spool, for relative secret files; ``command_chunks``: ``commands``)."""
    return value


_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*([KMGT]?)i?B?", re.IGNORECASE)


def byte_size(name: str, value: Any) -> int:
    """A size in bytes: a whole number, or text such as ``500M``, ``10G``, ``2TiB`` (binary units)."""
    if isinstance(value, str):
        m = _SIZE.fullmatch(value.strip())
        if m is None:
            raise ConfigError(f"{name}: expected a size such as 10G, 500M or a number of bytes, got {value!r}")
        unit = m.group(2).upper()
        scale = 1024 ** ("KMGT".find(unit) + 1) if unit else 1
        value = int(float(m.group(1)) * scale)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{name}: expected a size in bytes >= 1 (or such as 10G), got {value!r}")
    return value


def watch_mode(name: str, value: Any) -> str:
    if value not in WATCH_MODES:
        raise ConfigError(f"{name}: expected one of {', '.join(WATCH_MODES)}, got {value!r}")
    return str(value)


def argv_template(where: str, argv: Any, placeholders: tuple[str, ...]) -> tuple[str, ...]:
    """An argv list whose ``{placeholders}`` are all among ``placeholders``, as strings."""
    # An argv list, never a shell string: a job's values cannot inject shell syntax.
    if (
        not isinstance(argv, list | tuple)
        or not argv
        or not all(isinstance(a, str | int | float) and not isinstance(a, bool) for a in argv)
    ):
        raise ConfigError(f"{where}: expected a non-empty list of argv strings (not a shell string), got {argv!r}")
    out = tuple(str(a) for a in argv)
    for arg in out:
        for placeholder in re.findall(r"\{([^{}]*)\}", arg):
            if placeholder not in placeholders:
                known = ", ".join("{" + p + "}" for p in placeholders)
                raise ConfigError(f"{where}: unknown placeholder {{{placeholder}}} (known: {known})")
    return out


def commands(name: str, value: Any) -> dict[str, tuple[str, ...]]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ConfigError(f"{name}: expected a mapping of name: [argv...], got {value!r}")
    out: dict[str, tuple[str, ...]] = {}
    for cmd, argv in value.items():
        if not isinstance(cmd, str) or not cmd:
            raise ConfigError(f"{name}: command names must be non-empty strings, got {cmd!r}")
        out[cmd] = argv_template(f"{name}.{cmd}", argv, COMMAND_PLACEHOLDERS)
    return out


def names(kind: str, allow_all: bool) -> Callable[[str, Any], tuple[str, ...]]:
    """A list of queue or tag names; a string is split at commas (``--queues a,b``)."""

    def check(name: str, value: Any) -> tuple[str, ...]:
        items = value.split(",") if isinstance(value, str) else value
        if not isinstance(items, list | tuple):
            raise ConfigError(f"{name}: expected a list of {kind} names, got {value!r}")
        out: list[str] = []
        for item in items:
            item = item.strip() if isinstance(item, str) else item
            if item == "" and isinstance(value, str):
                continue
            why = None if allow_all and item == ALL_QUEUES else name_problem(kind, item)
            if why is not None:
                raise ConfigError(f"{name}: {why}")
            if item not in out:
                out.append(item)
        if allow_all and not out:
            raise ConfigError(f"{name}: name at least one queue (or * for every queue)")
        return tuple(out)

    return check


def projects(name: str, value: Any) -> dict[str, Path]:
    """``projects:``: project name -> Remotion project directory (a job's ``project:``)."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ConfigError(f"{name}: expected a mapping of project name: directory, got {value!r}")
    out: dict[str, Path] = {}
    for key, directory in value.items():
        if not isinstance(key, str) or not PROJECT_NAME.fullmatch(key):
            raise ConfigError(f"{name}: project names are 1-64 letters, digits, '_', '.', '-', got {key!r}")
        out[key] = file_path(f"{name}.{key}", directory)
    return out
