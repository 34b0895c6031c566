"""Telling memory exhaustion from other failures of a render.

A render can run out of memory in three places, each with its own signature: the Node
worker's V8 heap ("FATAL ERROR: Reached heap limit Allocation failed - JavaScript heap out
of memory" on its stderr, then the process aborts), a JavaScript allocation in the page or
worker ("RangeError: Array buffer allocation failed"), or the kernel's OOM killer, which
SIGKILLs Chromium or ffmpeg and leaves only its counter behind (``oom_kill`` in the
memory cgroup's events, or host-wide in /proc/vmstat).
"""

from __future__ import annotations

import re
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


def oom_kills() -> int | None:
    """How many processes the OOM killer has ended so far, in our memory cgroup when the
    kernel says, else on the whole host; None when nothing tells. Compared before and
    after a render: a rise means a SIGKILLed browser or ffmpeg was killed for memory."""
    for path, key in [*_cgroup_counter_files(), (Path("/proc/vmstat"), "oom_kill")]:
        try:
            text = path.read_text()
        except OSError:
            continue
        for line in text.splitlines():
            name, _, value = line.partition(" ")
            if name == key and value.strip().isdigit():
                return int(value)
    return None
