"""Which failed jobs a `retry` over many means: by failure kind and queue, hopeless ones apart.

A read model (no text for people, nothing moved): `retry --all-failed`, `--kind` and
`--queue` choose from it, and `control.retry_entries` moves what was chosen. The kind is
failure.json's, the queue what the job's runs recorded (else its job file's), both read
once per entry through :class:`spoolrender.serve.browse.JobIndex`, as `GET /jobs` reads them.
"""

from __future__ import annotations

from dataclasses import dataclass

from spoolrender import defaults
from spoolrender.config.spool_config import SpoolConfig
from spoolrender.spool.layout import FINAL_NAME, SpoolLayout, list_names


@dataclass(frozen=True)
class FailedEntry:
    name: str  # failed/<name>
    job_id: str
    kind: str | None  # failure.json's kind (None: unreadable)
    queue: str | None  # None: not known (a job file that never parsed, outside a queue directory)

    def __post_init__(self) -> None:
        if FINAL_NAME.fullmatch(self.name) is None:
            raise ValueError(f"not a failed/ entry name: {self.name!r}")

    @property
    def hopeless(self) -> bool:
        return self.kind in defaults.HOPELESS_KINDS


@dataclass(frozen=True)
class FailedSelection:
    chosen: list[FailedEntry]  # oldest name first
    hopeless: list[FailedEntry]  # matched, but left out: a hopeless kind not asked for


def select_failed(
    config: SpoolConfig, *, kinds: tuple[str, ...] = (), queue: str | None = None, include_hopeless: bool = False
) -> FailedSelection:
    """The failed jobs of ``kinds`` (empty: any kind) and ``queue`` (None: any queue).

    A hopeless kind (defaults.HOPELESS_KINDS) is chosen only if ``include_hopeless`` or
    ``kinds`` names it: naming the kind is asking for it.
    """
    from spoolrender.serve.browse import JobIndex

    layout = SpoolLayout(config.spool)
    layout.check()
    index = JobIndex(config)
    chosen, hopeless = [], []
    for name in sorted(list_names(layout.failed)):
        m = FINAL_NAME.fullmatch(name)
        if m is None or name.startswith("."):
            continue
        kind = index.kind("failed", name)
        if kinds and kind not in kinds:
            continue
        route = index.route("failed", name) if queue is not None else None
        if route is not None and route.queue != queue:
            continue
        entry = FailedEntry(name, m.group("id"), kind, None if route is None else route.queue)
        if entry.hopeless and not include_hopeless and entry.kind not in kinds:
            hopeless.append(entry)
        else:
            chosen.append(entry)
    return FailedSelection(chosen, hopeless)
