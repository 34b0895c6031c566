"""Telling memory exhaustion from other failures of a render.

A render can run out of memory in three places, each with its own signature: the Node
worker's V8 heap ("FATAL ERROR: Reached heap limit Allocation failed - JavaScript heap out
of memory" on its stderr, then the process aborts), a JavaScript allocation in the page or
worker ("RangeError: Array buffer allocation failed"), or the kernel's OOM killer, which
SIGKILLs Chromium or ffmpeg and leaves only its counter behind (``oom_kill`` in the
memory cgroup's events, or host-wide in /proc/vmstat).

The counter is evidence about this render only as far as it is this render's: the
runner's memory cgroup holds only the runner and its renders, but /proc/vmstat counts
every process of the host. A host-wide rise counts as this render's only when the render's
own process (the worker) died of SIGKILL at the same time; otherwise the failure is
reported as *possibly* out of memory (retried at concurrency 1, never made final for it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

# Mirrors MEMORY_RE in worker/errors.mjs (which classifies errors the worker survives).
MEMORY_RE = re.compile(
    r"JavaScript heap out of memory|Reached heap limit|Allocation failed|ENOMEM|Cannot allocate memory"
    r"|Out of memory|std::bad_alloc",
    re.IGNORECASE,
)


def memory_line(text: str) -> str | None:
    """The line of ``text`` that says memory ran out, stripped, or None."""
    for line in text.splitlines():
        if MEMORY_RE.search(line):
            return line.strip()
    return None


def _cgroup_counter_files() -> list[tuple[Path, str]]:
    """Where this process's memory cgroup counts OOM kills (v2, then v1)."""
    files: list[tuple[Path, str]] = []
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return files
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "":
            files.append((Path("/sys/fs/cgroup") / path.lstrip("/") / "memory.events", "oom_kill"))
        elif "memory" in controllers.split(","):
            files.append((Path("/sys/fs/cgroup/memory") / path.lstrip("/") / "memory.oom_control", "oom_kill"))
    return files


@dataclass(frozen=True)
class OomCount:
    """The OOM killer's count so far, and whose: ``cgroup`` (the runner's memory cgroup) or
    ``host`` (/proc/vmstat, every process of the host)."""

    kills: int
    scope: str

    def __post_init__(self) -> None:
        if self.scope not in ("cgroup", "host"):
            raise ValueError(f"unknown oom_kill scope {self.scope!r}")


def oom_kills() -> OomCount | None:
    """How many processes the OOM killer has ended so far, in our memory cgroup when the
    kernel says, else on the whole host; None when nothing tells. Compared before and
    after a render (:func:`oom_evidence`)."""
    sources = [(path, key, "cgroup") for path, key in _cgroup_counter_files()]
    for path, key, scope in [*sources, (Path("/proc/vmstat"), "oom_kill", "host")]:
        try:
            text = path.read_text()
        except OSError:
            continue
        for line in text.splitlines():
            name, _, value = line.partition(" ")
            if name == key and value.strip().isdigit():
                return OomCount(int(value), scope)
    return None


@dataclass(frozen=True)
class OomEvidence:
    """What the OOM counter says about a failed render: ``reason`` for its record, and
    ``certain`` when the kill was of this render's processes (see the module doc)."""

    reason: str
    certain: bool


def oom_evidence(before: OomCount | None, after: OomCount | None, *, own_sigkill: bool) -> OomEvidence | None:
    """The OOM killer's part in a render that failed, from the counts before and after it.

    ``own_sigkill``: the render's own process (the worker) died of SIGKILL. None when the
    counter did not rise (or the two counts are not of the same scope).
    """
    if before is None or after is None or before.scope != after.scope or after.kills <= before.kills:
        return None
    counted = f"oom_kill {before.kills} -> {after.kills}"
    if before.scope == "cgroup":
        return OomEvidence(
            f"the kernel's OOM killer ended a process of the render ({counted}, its memory cgroup)", True
        )
    if own_sigkill:
        return OomEvidence(
            f"the kernel's OOM killer ended a process of the render (its worker was SIGKILLed; {counted}, host-wide)",
            True,
        )
    return OomEvidence(
        f"possibly out of memory: the kernel's OOM killer ended a process on this host during the render "
        f"({counted}, host-wide: no memory cgroup count tells whose)",
        False,
    )
