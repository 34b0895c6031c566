"""The ``hooks:`` setting of spoolrender.yaml: completion hooks, validated when read.

Hooks live in the spool's config only, never in a job file: whoever can drop a job must
not be able to make the runner run a command or call a URL. Each hook has a name (used
in logs and in the delivery state) and either an argv ``command`` (never a shell string)
or a webhook ``url``::

    hooks:
      chat:
        on: [failed]
        url: https://chat.example/hooks/render
        secret_file: /etc/spoolrender/hook-secret   # HMAC-SHA256 signature header
      archive:
        on: [done]
        command: [/usr/local/bin/archive-video]
        timeout_seconds: 60

The keys, events and delivery are documented in docs/hooks.md; spoolrender.yaml is read
with YAML 1.2 booleans (:mod:`spoolrender.config.yaml_loader`), so ``on:`` is the word it looks like.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from spoolrender import defaults
from spoolrender.config.secret_file import read_secret_line
from spoolrender.config.yaml_loader import describe_unknown, typed_key
from spoolrender.core.retry_policy import RetryPolicy
from spoolrender.errors import ConfigError

HOOK_EVENTS = ("done", "retry", "failed")
HOOK_KEYS = ("on", "command", "url", "secret_file", "timeout_seconds", "attempts", "backoff_seconds")


@dataclass(frozen=True)
class HookSpec:
    """One configured hook; exactly one of ``command`` and ``url`` is set."""

    name: str
    events: tuple[str, ...]
    command: tuple[str, ...] | None = None
    url: str | None = None
    secret_file: Path | None = None
    timeout_seconds: float = defaults.HOOK_TIMEOUT_S
    attempts: int = defaults.HOOK_ATTEMPTS
    backoff_seconds: float = defaults.HOOK_BACKOFF_BASE_S

    def __post_init__(self) -> None:
        where = f"hooks.{self.name}"
        if not self.events or any(e not in HOOK_EVENTS for e in self.events):
            raise ConfigError(f"{where}.on: expected events among {', '.join(HOOK_EVENTS)}, got {self.events!r}")
        if (self.command is None) == (self.url is None):
            raise ConfigError(f"{where}: set exactly one of command (an argv list) and url")
        if self.command is not None and (not self.command or not all(self.command)):
            raise ConfigError(f"{where}.command: expected a non-empty list of non-empty argv strings")
        if self.url is not None:
            parts = urlsplit(self.url)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise ConfigError(f"{where}.url: expected an http:// or https:// URL, got {self.url!r}")
        if self.secret_file is not None and self.url is None:
            raise ConfigError(f"{where}.secret_file: only webhooks (url) are signed")
        if not (0 < self.timeout_seconds <= defaults.HOOK_TIMEOUT_MAX_S):
            raise ConfigError(f"{where}.timeout_seconds: expected 0 < seconds <= {defaults.HOOK_TIMEOUT_MAX_S:g}")
        if not (1 <= self.attempts <= defaults.HOOK_ATTEMPTS_MAX):
            raise ConfigError(f"{where}.attempts: expected 1 to {defaults.HOOK_ATTEMPTS_MAX}")
        if not (0 < self.backoff_seconds <= defaults.HOOK_BACKOFF_CAP_S):
            raise ConfigError(f"{where}.backoff_seconds: expected 0 < seconds <= {defaults.HOOK_BACKOFF_CAP_S:g}")

    @property
    def retry(self) -> RetryPolicy:
        """Whether and when a failed delivery is tried again (its attempts and backoff_seconds)."""
        return replace(defaults.HOOK_RETRY, base_seconds=self.backoff_seconds, max_attempts=self.attempts)


def _number(where: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ConfigError(f"{where}: expected a number, got {value!r}")
    return float(value)


def _hook(spool: Path, name: str, raw: Any) -> HookSpec:
    where = f"hooks.{name}"
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{where}: expected a mapping with command or url, got {type(raw).__name__}")
    unknown = [typed_key(raw, k) for k in raw if k not in HOOK_KEYS]
    if unknown:
        raise ConfigError(f"{where}: {describe_unknown(unknown, HOOK_KEYS)}")
    events = raw.get("on", list(HOOK_EVENTS))
    if isinstance(events, str):
        events = [events]
    if not isinstance(events, list | tuple) or not all(isinstance(e, str) for e in events):
        raise ConfigError(f"{where}.on: expected a list of events ({', '.join(HOOK_EVENTS)})")
    command = raw.get("command")
    if command is not None:
        if not isinstance(command, list | tuple) or not all(
            isinstance(a, str | int | float) and not isinstance(a, bool) for a in command
        ):
            raise ConfigError(f"{where}.command: expected a list of argv strings (not a shell string), got {command!r}")
        command = tuple(str(a) for a in command)
    url = raw.get("url")
    if url is not None and not isinstance(url, str):
        raise ConfigError(f"{where}.url: expected a string, got {url!r}")
    secret = raw.get("secret_file")
    secret_path = None
    if secret is not None:
        if not isinstance(secret, str) or not secret:
            raise ConfigError(f"{where}.secret_file: expected a path, got {secret!r}")
        secret_path = Path(os.path.expanduser(secret))
        if not secret_path.is_absolute():
            secret_path = spool / secret_path  # relative to the spool, like every path setting
    attempts = raw.get("attempts", defaults.HOOK_ATTEMPTS)
    if isinstance(attempts, bool) or not isinstance(attempts, int):
        raise ConfigError(f"{where}.attempts: expected a whole number, got {attempts!r}")
    return HookSpec(
        name=name,
        events=tuple(dict.fromkeys(events)),
        command=command,
        url=url,
        secret_file=secret_path,
        timeout_seconds=_number(f"{where}.timeout_seconds", raw.get("timeout_seconds", defaults.HOOK_TIMEOUT_S)),
        attempts=attempts,
        backoff_seconds=_number(f"{where}.backoff_seconds", raw.get("backoff_seconds", defaults.HOOK_BACKOFF_BASE_S)),
    )


def parse_hooks(spool: Path, value: Any) -> dict[str, HookSpec]:
    """The ``hooks`` setting as specs by name (``{}`` when unset)."""
    if value is None:
        return {}
    if isinstance(value, Mapping) and all(isinstance(v, HookSpec) for v in value.values()):
        return dict(value)  # already parsed (a config built from another config)
    if not isinstance(value, Mapping):
        raise ConfigError(f"hooks: expected a mapping of name: {{on, command | url, ...}}, got {value!r}")
    out = {}
    for name, raw in value.items():
        if not isinstance(name, str) or not name or not name.replace("-", "").replace("_", "").isalnum():
            raise ConfigError(f"hooks: names must be letters, digits, - and _, got {typed_key(value, name)!r}")
        out[name] = _hook(spool, name, raw)
    return out


def read_secret(spec: HookSpec, spool: Path) -> bytes | None:
    """The HMAC key of a webhook, from a file no other user may read; None if unsigned."""
    if spec.secret_file is None:
        return None
    where = f"hooks.{spec.name}.secret_file {spec.secret_file}"
    risk = "anyone who reads it can forge notifications"
    return read_secret_line(spec.secret_file, where, risk, spool).encode("utf-8")
