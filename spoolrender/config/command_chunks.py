"""``command_chunks:`` in the spool config: how a ``renderer: command`` job is split.

For a command named in ``commands:``, three more argv templates (never a shell string):

- ``span``: prints ``FRAMES <first> <last> <fps>`` on a line of stdout: the frames the
  whole job renders (for planning);
- ``chunk``: renders frames ``{first}``..``{last}`` into the directory ``{output}``;
- ``join``: writes ``{output}`` (one file) from the chunk directories listed, in order,
  in ``{parts_file}`` (one line per chunk: ``<first> <last> <directory>``).

Kept import-light: :mod:`spoolrender.config.spool_config` validates it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from spoolrender.config.setting_checks import argv_template
from spoolrender.config.yaml_loader import describe_unknown, typed_key
from spoolrender.errors import ConfigError

# What every template may use (as in `commands:`), and what each kind adds.
COMMON_PLACEHOLDERS = ("job_file", "props_file", "work_dir", "threads", "job_id", "attempt")
KIND_PLACEHOLDERS = {
    "span": (),
    "chunk": ("output", "first", "last", "index", "count"),
    "join": ("output", "parts_file", "first", "last", "count"),
}


@dataclass(frozen=True)
class CommandChunks:
    """The argv templates that render one command's jobs in chunks."""

    span: tuple[str, ...]
    chunk: tuple[str, ...]
    join: tuple[str, ...]


def parse_command_chunks(value: Any, commands: Mapping[str, tuple[str, ...]]) -> dict[str, CommandChunks]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ConfigError(f"command_chunks: expected a mapping of command name: {{span, chunk, join}}, got {value!r}")
    out: dict[str, CommandChunks] = {}
    for name, entry in value.items():
        if isinstance(entry, CommandChunks):
            out[name] = entry
            continue
        if name not in commands:
            known = ", ".join(sorted(commands)) or "none"
            raise ConfigError(f"command_chunks.{name}: no such command in commands: (known: {known})")
        if not isinstance(entry, Mapping):
            raise ConfigError(
                f"command_chunks.{name}: expected a mapping with exactly span, chunk and join argv lists, got {entry!r}"
            )
        unknown = [typed_key(entry, key) for key in entry if key not in KIND_PLACEHOLDERS]
        if unknown:
            raise ConfigError(f"command_chunks.{name}: {describe_unknown(unknown, tuple(KIND_PLACEHOLDERS))}")
        missing = [kind for kind in KIND_PLACEHOLDERS if kind not in entry]
        if missing:
            raise ConfigError(
                f"command_chunks.{name}: missing {', '.join(missing)} (span, chunk and join are all needed)"
            )
        out[name] = CommandChunks(**{kind: _argv(name, kind, entry[kind]) for kind in entry})
    return out


def _argv(name: str, kind: str, argv: Any) -> tuple[str, ...]:
    return argv_template(f"command_chunks.{name}.{kind}", argv, COMMON_PLACEHOLDERS + KIND_PLACEHOLDERS[kind])
