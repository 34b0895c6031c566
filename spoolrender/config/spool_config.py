"""Spool-wide configuration: one file inside the spool, so every host sharing it agrees.

Precedence, lowest first: built-in defaults (:mod:`spoolrender.defaults`), the spool's
``spoolrender.yaml``, ``SPOOLRENDER_<KEY>`` environment variables, then CLI flags
(``--set key=value`` and the named flags). Values given as strings (environment, CLI)
are read as YAML scalars, so ``5``, ``2.5``, ``auto`` and ``[a, b]`` mean what they say.
The file and those strings are read with YAML 1.2 booleans (:mod:`spoolrender.config.yaml_loader`):
``on``, ``off``, ``yes`` and ``no`` are words, as the documented ``hooks: {chat: {on: ...}}``
needs.

The settings, their checks, defaults and meanings are one table,
:data:`spoolrender.config.settings.SETTINGS`; the reference in docs/configuration.md is generated
from it (:func:`settings_reference_markdown`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import yaml

from spoolrender import defaults
from spoolrender.config.command_chunks import CommandChunks, parse_command_chunks
from spoolrender.config.hooks import HookSpec, parse_hooks
from spoolrender.config.queues import ALL_QUEUES
from spoolrender.config.settings import SETTINGS, SETTINGS_BY_NAME, settings_reference_markdown
from spoolrender.config.yaml_loader import describe_unknown, load_config_text, typed_key
from spoolrender.core.retry_policy import RetryPolicy
from spoolrender.errors import ConfigError

__all__ = [
    "CONFIG_KEYS",
    "ENV_PREFIX",
    "SpoolConfig",
    "config_file_settings",
    "load_config",
    "parse_scalar",
    "settings_reference_markdown",
]

ENV_PREFIX = "SPOOLRENDER_"
CONFIG_KEYS = tuple(s.name for s in SETTINGS)


@dataclass(frozen=True)
class SpoolConfig:
    """Validated configuration of one spool, as seen by one process.

    One field per row of :data:`spoolrender.config.settings.SETTINGS` (a test holds the two
    together), each checked by that row's check when built."""

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
    # Completion hooks by name (commands and webhooks on done/retry/failed; config/hooks.py).
    hooks: dict[str, HookSpec] = field(default_factory=dict)
    # What a runner serves (run --queues/--tags; config/queues.py): queues in order, * = any other.
    queues: tuple[str, ...] = (ALL_QUEUES,)
    tags: tuple[str, ...] = ()
    # Host health (hosts/health.py): retry elsewhere, block a host that fails many jobs.
    retry_elsewhere_seconds: float = defaults.RETRY_ELSEWHERE_S
    host_block_jobs: int = defaults.HOST_BLOCK_JOBS
    host_block_window_seconds: float = defaults.HOST_BLOCK_WINDOW_S
    host_block_seconds: float = defaults.HOST_BLOCK_S
    host_block_max_share: float = defaults.HOST_BLOCK_MAX_SHARE
    host_probe_seconds: float = defaults.HOST_PROBE_S
    # The render cache (render_cache/entries.py): off unless enabled here or by a job's `cache: true`.
    render_cache: bool = defaults.RENDER_CACHE
    render_cache_max_bytes: int = defaults.RENDER_CACHE_MAX_BYTES
    # Chunked rendering (spoolrender.chunks): split jobs longer than this many seconds of
    # video over the idle slots of every runner (None: only jobs that ask, chunks: N).
    split_seconds: float | None = None
    # How `renderer: command` jobs render a frame range and join the parts, by command name.
    command_chunks: dict[str, CommandChunks] = field(default_factory=dict)
    # Retention (ops/retention.py): runners forget finished jobs older than these (seconds), or
    # beyond these counts; None: kept until `spoolrender purge`.
    keep_done: float | None = None
    keep_failed: float | None = None
    keep_done_max: int | None = None
    keep_failed_max: int | None = None

    def __post_init__(self) -> None:
        for f in fields(self):
            if f.name == "spool":
                continue
            check = SETTINGS_BY_NAME[f.name].check
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
    def job_retry(self) -> RetryPolicy:
        """How long a job's failed attempt waits (backoff_base_seconds, backoff_cap_seconds;
        the job's own max_attempts: ``job_retry.with_attempts(spec.max_attempts)``)."""
        return replace(defaults.JOB_RETRY, base_seconds=self.backoff_base_seconds, cap_seconds=self.backoff_cap_seconds)

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


def parse_scalar(text: str) -> Any:
    """Read an environment or CLI value as YAML, as the file is read (``5`` is an int,
    ``a``, ``on`` and ``no`` are strings, ``[a, b]`` a list); text that is no YAML value
    stays text."""
    try:
        return load_config_text(text)
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
        data = load_config_text(text)
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


def _known_settings(settings: Mapping[Any, Any], where: str) -> dict[str, Any]:
    """``settings``, or a ConfigError naming every unknown one as it was typed."""
    unknown = [typed_key(settings, key) for key in settings if key not in SETTINGS_BY_NAME]
    if unknown:
        raise ConfigError(where + describe_unknown(unknown, CONFIG_KEYS, noun="setting"))
    return dict(settings)


def load_config(
    spool: Path,
    *,
    overrides: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
) -> SpoolConfig:
    """Build the config of ``spool`` from its file, the environment and ``overrides``."""
    spool = Path(spool).expanduser().resolve()
    file_path = spool / defaults.CONFIG_FILENAME
    merged = _known_settings(_read_file(file_path), f"{file_path}: ")
    env = os.environ if environ is None else environ
    # Which values came from the environment: an error must name the variable to fix (a
    # value from the file or from overrides is named by its key, as it was written).
    given: dict[str, str] = {}
    for key in CONFIG_KEYS:
        env_name = ENV_PREFIX + key.upper()
        if env_name in env:
            merged[key] = parse_scalar(env[env_name])
            given[key] = f"the environment variable {env_name}"
    for key, value in _known_settings(overrides or {}, "").items():
        merged[key] = parse_scalar(value) if isinstance(value, str) else value
        given.pop(key, None)
    try:
        return SpoolConfig(spool=spool, **merged)
    except TypeError as exc:  # pragma: no cover - keys are checked above
        raise ConfigError(str(exc)) from exc
    except ConfigError as exc:
        message = str(exc)
        sources = [where for key, where in given.items() if message.startswith(f"{key}:")]
        if not sources:
            # A check of settings together ("backoff_cap_seconds must be >= ..."): each of
            # them the environment set is named, the message saying which settings it is.
            sources = [where for key, where in given.items() if re.search(rf"(?<!\w){re.escape(key)}(?!\w)", message)]
        if not sources:
            raise
        raise ConfigError(f"{exc} (set by {' and '.join(sources)})") from exc
