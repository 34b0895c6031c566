"""``command_chunks:`` in the spool config: how a ``renderer: command`` job is split.

For a command named in ``commands:``, three more argv templates (never a shell string):

- ``span``: prints ``FRAMES <first> <last> <fps>`` on a line of stdout: the frames the
  whole job renders (for planning);
- ``chunk``: renders frames ``{first}``..``{last}`` into the directory ``{output}``;
- ``join``: writes ``{output}`` (one file) from the chunk directories listed, in order,
  in ``{parts_file}`` (one line per chunk: ``<first> <last> <directory>``).

Kept import-light: :mod:`spoolrender.config` validates it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

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
        if not isinstance(entry, Mapping) or set(entry) != set(KIND_PLACEHOLDERS):
            raise ConfigError(
                f"command_chunks.{name}: expected a mapping with exactly span, chunk and join argv lists, got {entry!r}"
            )
        out[name] = CommandChunks(**{kind: _argv(f"command_chunks.{name}.{kind}", kind, entry[kind]) for kind in entry})
    return out


def _argv(where: str, kind: str, argv: Any) -> tuple[str, ...]:
    # An argv list, never a shell string: a job's values cannot inject shell syntax.
    if (
        not isinstance(argv, list | tuple)
        or not argv
        or not all(isinstance(a, str | int | float) and not isinstance(a, bool) for a in argv)
    ):
        raise ConfigError(f"{where}: expected a non-empty list of argv strings (not a shell string), got {argv!r}")
    known = COMMON_PLACEHOLDERS + KIND_PLACEHOLDERS[kind]
    out = tuple(str(a) for a in argv)
    for arg in out:
        for placeholder in re.findall(r"\{([^{}]*)\}", arg):
            if placeholder not in known:
                raise ConfigError(
                    f"{where}: unknown placeholder {{{placeholder}}} (known: {', '.join('{' + p + '}' for p in known)})"
                )
    return out
