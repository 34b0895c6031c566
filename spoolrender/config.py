"""Spool-wide configuration: one file inside the spool, so every host sharing it agrees.

Precedence, lowest first: built-in defaults (:mod:`spoolrender.defaults`), the spool's
``spoolrender.yaml``, ``SPOOLRENDER_<KEY>`` environment variables, then CLI flags
(``--set key=value`` and the named flags). Values given as strings (environment, CLI)
are read as YAML scalars, so ``5``, ``2.5``, ``auto`` and ``[a, b]`` mean what they say.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

from spoolrender import defaults
from spoolrender.chunks.command_config import CommandChunks, parse_command_chunks
from spoolrender.errors import ConfigError
from spoolrender.hook_config import HookSpec, parse_hooks
from spoolrender.queues import ALL_QUEUES, name_problem

ENV_PREFIX = "SPOOLRENDER_"
WATCH_MODES = ("auto", "inotify", "polling")
# Kept here (not imported from the command renderer) so config stays import-light.
COMMAND_PLACEHOLDERS = ("output", "job_file", "props_file", "work_dir", "threads", "job_id", "attempt")


def _positive_number(name: str, value: Any) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or (isinstance(value, float) and not math.isfinite(value))
    ):
        raise ConfigError(f"{name}: expected a number, got {type(value).__name__} {value!r}")
    if value <= 0:
        raise ConfigError(f"{name}: expected a number > 0, got {value!r}")
    try:
        return float(value)
    except OverflowError as exc:
        raise ConfigError(f"{name}: {str(value)[:20]}... is too large") from exc


def _non_negative_number(name: str, value: Any) -> float:
    if value == 0 and not isinstance(value, bool):
        return 0.0
    return _positive_number(name, value)


def _share(name: str, value: Any) -> float:
    number = _non_negative_number(name, value)
    if number > 1:
        raise ConfigError(f"{name}: expected a share from 0 to 1 (0.5: half), got {value!r}")
    return number


def _positive_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{name}: expected a whole number >= 1, got {value!r}")
    return value


def _optional_count(name: str, value: Any) -> int | None:
    """A whole number >= 1, or None for "auto" (derived from other settings)."""
    if value is None or value == "auto":
        return None
    return _positive_int(name, value)


def _optional_seconds(name: str, value: Any) -> float | None:
    if value is None or value == "auto":
        return None
    return _positive_number(name, value)


def _split_seconds(name: str, value: Any) -> float | None:
    """``split_seconds``: a threshold in seconds, or off (None, ``off``, false)."""
    if value is None or value is False or value == "off":
        return None
    return _positive_number(name, value)


def _path(name: str, value: Any) -> Path:
    if not isinstance(value, str | Path) or not str(value):
        raise ConfigError(f"{name}: expected a path, got {value!r}")
    return Path(os.path.expanduser(str(value)))


def _string(name: str, value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{name}: expected a non-empty string, got {value!r}")
    return value


def _optional_token(name: str, value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or len(value) < 16 or any(c.isspace() for c in value):
        raise ConfigError(f"{name}: expected a secret of at least 16 characters without spaces (or unset)")
    return value


def _optional_path(name: str, value: Any) -> Path | None:
    return None if value is None else _path(name, value)


def _bool(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(f"{name}: expected true or false, got {value!r}")
    return value


_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*([KMGT]?)i?B?", re.IGNORECASE)


def _byte_size(name: str, value: Any) -> int:
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


def _watch(name: str, value: Any) -> str:
    if value not in WATCH_MODES:
        raise ConfigError(f"{name}: expected one of {', '.join(WATCH_MODES)}, got {value!r}")
    return str(value)


def _commands(name: str, value: Any) -> dict[str, tuple[str, ...]]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ConfigError(f"{name}: expected a mapping of name: [argv...], got {value!r}")
    out: dict[str, tuple[str, ...]] = {}
    for cmd, argv in value.items():
        if not isinstance(cmd, str) or not cmd:
            raise ConfigError(f"{name}: command names must be non-empty strings, got {cmd!r}")
        # An argv list, never a shell string: a job's values cannot inject shell syntax.
        if (
            not isinstance(argv, list | tuple)
            or not argv
            or not all(isinstance(a, str | int | float) and not isinstance(a, bool) for a in argv)
        ):
            raise ConfigError(
                f"{name}.{cmd}: expected a non-empty list of argv strings (not a shell string), got {argv!r}"
            )
        argv_t = tuple(str(a) for a in argv)
        for arg in argv_t:
            for placeholder in re.findall(r"\{([^{}]*)\}", arg):
                if placeholder not in COMMAND_PLACEHOLDERS:
                    raise ConfigError(
                        f"{name}.{cmd}: unknown placeholder {{{placeholder}}} "
                        f"(known: {', '.join('{' + p + '}' for p in COMMAND_PLACEHOLDERS)})"
                    )
        out[cmd] = argv_t
    return out


def _names(kind: str, allow_all: bool) -> Callable[[str, Any], tuple[str, ...]]:
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


PROJECT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


def _projects(name: str, value: Any) -> dict[str, Path]:
    """``projects:``: project name -> Remotion project directory (a job's ``project:``)."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ConfigError(f"{name}: expected a mapping of project name: directory, got {value!r}")
    out: dict[str, Path] = {}
    for key, path in value.items():
        if not isinstance(key, str) or not PROJECT_NAME.fullmatch(key):
            raise ConfigError(f"{name}: project names are 1-64 letters, digits, '_', '.', '-', got {key!r}")
        out[key] = _path(f"{name}.{key}", path)
    return out


@dataclass(frozen=True)
class SpoolConfig:
    """Validated configuration of one spool, as seen by one process."""

    spool: Path
    output_root: Path = Path(defaults.OUTPUT_ROOT)
    settle_seconds: float = defaults.SETTLE_S
    heartbeat_seconds: float = defaults.HEARTBEAT_INTERVAL_S
    lease_seconds: float = defaults.LEASE_S
    rescan_seconds: float = defaults.RESCAN_INTERVAL_S
    poll_seconds: float = defaults.POLL_INTERVAL_S
    backoff_base_seconds: float = defaults.BACKOFF_BASE_S
    backoff_cap_seconds: float = defaults.BACKOFF_CAP_S
    grace_seconds: float = defaults.GRACE_S
    max_attempts: int = defaults.DEFAULT_MAX_ATTEMPTS
    timeout_seconds: float = defaults.DEFAULT_TIMEOUT_S
    max_job_bytes: int = defaults.MAX_JOB_BYTES
    slots: int | None = None
    threads_per_job: int = defaults.THREADS_PER_JOB
    slots_per_core: float = defaults.SLOTS_PER_CORE
    memory_per_job_mb: int = defaults.MEMORY_PER_JOB_MB
    watch: str = "auto"
    commands: dict[str, tuple[str, ...]] = field(default_factory=dict)
    remotion_project: Path = Path(defaults.REMOTION_PROJECT)
    # Further Remotion projects, by name (a job's `project:`); remotion_project is the default.
    projects: dict[str, Path] = field(default_factory=dict)
    warm_projects: int = defaults.WARM_PROJECTS_PER_SLOT  # warm workers per slot, least recently used go
    browser_executable: str = defaults.BROWSER_EXECUTABLE
    cache_dir: Path = Path("~/.cache/spoolrender")
    serve_token: str | None = None  # `spoolrender serve` write actions; off while unset
    serve_token_file: Path | None = None  # or the token in this file (not world-readable)
    fsync: bool = True  # false: faster, but a power cut may lose acknowledged changes
    # Caps on what one job file may ask for (jobfile checks them; see defaults.py).
    # "auto" (None): the default cap, raised to the spool's own default if that is higher.
    max_job_attempts: int | None = None
    max_job_timeout_seconds: float | None = None
    max_job_frames: int = defaults.MAX_JOB_FRAMES
    max_job_frame_pixels: int | None = None  # auto: from memory_per_job_mb
    # Completion hooks by name (commands and webhooks on done/retry/failed; hook_config.py).
    hooks: dict[str, HookSpec] = field(default_factory=dict)
    # What a runner serves (run --queues/--tags; queues.py): queues in order, * = any other.
    queues: tuple[str, ...] = (ALL_QUEUES,)
    tags: tuple[str, ...] = ()
    # Host health (hosts.py): retry elsewhere, block a host that fails many jobs.
    retry_elsewhere_seconds: float = defaults.RETRY_ELSEWHERE_S
    host_block_jobs: int = defaults.HOST_BLOCK_JOBS
    host_block_window_seconds: float = defaults.HOST_BLOCK_WINDOW_S
    host_block_seconds: float = defaults.HOST_BLOCK_S
    host_block_max_share: float = defaults.HOST_BLOCK_MAX_SHARE
    host_probe_seconds: float = defaults.HOST_PROBE_S
    # The render cache (render_cache.py): off unless enabled here or by a job's `cache: true`.
    render_cache: bool = defaults.RENDER_CACHE
    render_cache_max_bytes: int = defaults.RENDER_CACHE_MAX_BYTES
    # Chunked rendering (spoolrender.chunks): split jobs longer than this many seconds of
    # video over the idle slots of every runner (None: only jobs that ask, chunks: N).
    split_seconds: float | None = None
    # How `renderer: command` jobs render a frame range and join the parts, by command name.
    command_chunks: dict[str, CommandChunks] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for f in fields(self):
            if f.name == "spool":
                continue
            check = _VALIDATORS[f.name]
            object.__setattr__(self, f.name, check(f.name, getattr(self, f.name)))
        # Parsed here, not by a validator: a relative secret_file is relative to the spool.
        object.__setattr__(self, "hooks", parse_hooks(self.spool, self.hooks))
        object.__setattr__(self, "command_chunks", parse_command_chunks(self.command_chunks, self.commands))
        # Relative paths in a spool's config mean "relative to the spool", so that every
        # host (and the systemd unit, whatever its working directory) agrees.
        for name in ("output_root", "remotion_project", "serve_token_file"):
            path = getattr(self, name)
            if path is not None and not path.is_absolute():
                object.__setattr__(self, name, self.spool / path)
        object.__setattr__(self, "projects", {k: self.spool / p for k, p in self.projects.items()})
        if self.lease_seconds < 2 * self.heartbeat_seconds:
            raise ConfigError(
                f"lease_seconds ({self.lease_seconds:g}) must be at least twice "
                f"heartbeat_seconds ({self.heartbeat_seconds:g}), or live jobs look dead"
            )
        if self.serve_token is not None and self.serve_token_file is not None:
            raise ConfigError("set serve_token or serve_token_file, not both")
        if self.backoff_cap_seconds < self.backoff_base_seconds:
            raise ConfigError("backoff_cap_seconds must be >= backoff_base_seconds")
        # The spool's own defaults must be jobs it accepts.
        if self.max_job_attempts is not None and self.max_attempts > self.max_job_attempts:
            raise ConfigError(
                f"max_attempts ({self.max_attempts}) is over max_job_attempts ({self.max_job_attempts}); "
                "raise max_job_attempts or lower max_attempts"
            )
        if self.max_job_timeout_seconds is not None and self.timeout_seconds > self.max_job_timeout_seconds:
            raise ConfigError(
                f"timeout_seconds ({self.timeout_seconds:g}) is over max_job_timeout_seconds "
                f"({self.max_job_timeout_seconds:g}); raise max_job_timeout_seconds or lower timeout_seconds"
            )

    def project_dir(self, name: str | None) -> Path:
        """The directory of the Remotion project ``name`` (None: the default,
        ``remotion_project``)."""
        if name is None:
            return self.remotion_project
        try:
            return self.projects[name]
        except KeyError:
            known = ", ".join(sorted(self.projects)) or "none"
            raise ConfigError(f"unknown project {name!r} (projects in spoolrender.yaml: {known})") from None

    @property
    def job_attempts_limit(self) -> int:
        """The most attempts a job may ask for: ``max_job_attempts``, or auto."""
        if self.max_job_attempts is not None:
            return self.max_job_attempts
        return max(defaults.MAX_JOB_ATTEMPTS, self.max_attempts)

    @property
    def job_timeout_limit(self) -> float:
        """The longest timeout a job may ask for: ``max_job_timeout_seconds``, or auto."""
        if self.max_job_timeout_seconds is not None:
            return self.max_job_timeout_seconds
        return max(defaults.MAX_JOB_TIMEOUT_S, self.timeout_seconds)

    @property
    def frame_pixel_limit(self) -> int:
        """Pixels one rendered frame may have: ``max_job_frame_pixels``, or derived from memory."""
        if self.max_job_frame_pixels is not None:
            return self.max_job_frame_pixels
        return self.memory_per_job_mb * 1024 * 1024 // defaults.BYTES_PER_FRAME_PIXEL


_VALIDATORS: dict[str, Callable[[str, Any], Any]] = {
    "output_root": _path,
    "settle_seconds": _non_negative_number,
    "heartbeat_seconds": _positive_number,
    "lease_seconds": _positive_number,
    "rescan_seconds": _positive_number,
    "poll_seconds": _positive_number,
    "backoff_base_seconds": _non_negative_number,
    "backoff_cap_seconds": _non_negative_number,
    "grace_seconds": _non_negative_number,
    "max_attempts": _positive_int,
    "timeout_seconds": _positive_number,
    "max_job_bytes": _positive_int,
    "slots": _optional_count,
    "threads_per_job": _positive_int,
    "slots_per_core": _positive_number,
    "memory_per_job_mb": _positive_int,
    "watch": _watch,
    "commands": _commands,
    "remotion_project": _path,
    "projects": _projects,
    "warm_projects": _positive_int,
    "browser_executable": _string,
    "cache_dir": _path,
    "serve_token": _optional_token,
    "serve_token_file": _optional_path,
    "fsync": _bool,
    "max_job_attempts": _optional_count,
    "max_job_timeout_seconds": _optional_seconds,
    "max_job_frames": _positive_int,
    "max_job_frame_pixels": _optional_count,
    "hooks": lambda name, value: value,  # see __post_init__
    "queues": _names("queue", allow_all=True),
    "tags": _names("tag", allow_all=False),
    "retry_elsewhere_seconds": _non_negative_number,
    "host_block_jobs": _positive_int,
    "host_block_window_seconds": _positive_number,
    "host_block_seconds": _positive_number,
    "host_block_max_share": _share,
    "host_probe_seconds": _non_negative_number,
    "render_cache": _bool,
    "render_cache_max_bytes": _byte_size,
    "split_seconds": _split_seconds,
    "command_chunks": lambda name, value: value,  # see __post_init__ (needs `commands`)
}

CONFIG_KEYS = tuple(_VALIDATORS)


def parse_scalar(text: str) -> Any:
    """Read an environment or CLI value as a YAML scalar (``5`` is an int, ``a`` a str)."""
    try:
        return yaml.load(text, Loader=yaml.CSafeLoader)
    except (yaml.YAMLError, ValueError, TypeError, OverflowError):
        return text


def _read_file(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read: {exc}") from exc
    try:
        data = yaml.load(text, Loader=yaml.CSafeLoader)
    except (yaml.YAMLError, ValueError, TypeError, OverflowError) as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of settings, got {type(data).__name__}")
    return data


def config_file_settings(spool: Path) -> dict[str, Any]:
    """The settings written in ``spool``'s own config file (no defaults, environment or flags)."""
    return _read_file(Path(spool) / defaults.CONFIG_FILENAME)


def load_config(
    spool: Path,
    *,
    overrides: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
) -> SpoolConfig:
    """Build the config of ``spool`` from its file, the environment and ``overrides``."""
    spool = Path(spool).expanduser().resolve()
    merged: dict[str, Any] = {}
    file_path = spool / defaults.CONFIG_FILENAME
    for key, value in _read_file(file_path).items():
        if key not in _VALIDATORS:
            raise ConfigError(f"{file_path}: unknown setting {key!r} (known: {', '.join(CONFIG_KEYS)})")
        merged[key] = value
    env = os.environ if environ is None else environ
    for key in CONFIG_KEYS:
        env_name = ENV_PREFIX + key.upper()
        if env_name in env:
            merged[key] = parse_scalar(env[env_name])
    for key, value in (overrides or {}).items():
        if key not in _VALIDATORS:
            raise ConfigError(f"unknown setting {key!r} (known: {', '.join(CONFIG_KEYS)})")
        merged[key] = parse_scalar(value) if isinstance(value, str) else value
    try:
        return SpoolConfig(spool=spool, **merged)
    except TypeError as exc:  # pragma: no cover - keys are checked above
        raise ConfigError(str(exc)) from exc
