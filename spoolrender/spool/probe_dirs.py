"""The start-up probes' private directories, and what probers that died left behind.

Each run of the probes (:mod:`spoolrender.runner.fscheck`) works in a directory of its own,
``.fscheck-<host>-<pid>.<start>-<hex>``: the spool's in ``.spoolrender/``, the output
root's in its scratch dir ``.spoolrender-tmp/`` (never in the output tree itself, where
consumers watch for videos). ``<start>`` is the process's start time in clock ticks
(/proc/<pid>/stat), so a reused pid is not taken for the prober.

A runner killed while probing (SIGKILL, a power cut) leaves its directory behind. Every
start removes the leftovers of probers that are dead for sure:

- this host's: the pid is gone, or runs a process that started at another time;
- another host's (its pids cannot be seen from here): when the directory is older than
  ``defaults.PROBE_LEFTOVER_AGE_S`` by the spool filesystem's own clock (the mtime of the
  directory just made), as no probe takes that long, a frozen host's included.

A live probe is never removed; an unreadable name is judged by age alone.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from spoolrender import defaults
from spoolrender.spool.heartbeat import HOSTNAME
from spoolrender.spool.publish import remove_tree

log = logging.getLogger(__name__)

PROBE_PREFIX = ".fscheck-"  # hidden: never taken for a job, an output or a runner


def start_ticks(pid: int) -> int | None:
    """When process ``pid`` started (clock ticks since boot), or None if there is none."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # "pid (comm) state ppid ...": comm may hold spaces and parentheses; starttime is
    # field 22, the 20th after the closing parenthesis.
    try:
        return int(stat[stat.rindex(")") + 2 :].split()[19])
    except (ValueError, IndexError):
        return None


@dataclass(frozen=True)
class Prober:
    """Who made a probe directory, as its name says."""

    host: str
    pid: int
    start: int | None  # None: named by a version before start times were recorded

    @classmethod
    def parse(cls, name: str) -> Prober | None:
        # <host>-<pid>.<start>-<hex>, or <host>-<pid>-<hex> (8329ac5 and earlier); a
        # hostname may hold dashes and dots, the last two fields never.
        host, sep, rest = name.removeprefix(PROBE_PREFIX).rpartition("-")
        host, sep2, process = host.rpartition("-")
        if not (sep and sep2 and host and rest):
            return None
        pid, _, start = process.partition(".")
        if not pid.isdigit() or (start and not start.isdigit()):
            return None
        return cls(host, int(pid), int(start) if start else None)

    def is_dead_here(self) -> bool | None:
        """For a prober of this host: True if dead for sure, None if it may live."""
        running_since = start_ticks(self.pid)
        if running_since is None:
            return True
        if self.start is not None and running_since != self.start:
            return True  # the pid was reused
        return None  # it runs (or an old name's pid runs: maybe reused, judged by age)


def make_probe_dir(parent: Path) -> Path:
    """A new private directory for one run of the probes, in ``parent``."""
    pid = os.getpid()
    probe = parent / f"{PROBE_PREFIX}{HOSTNAME}-{pid}.{start_ticks(pid) or 0}-{secrets.token_hex(4)}"
    probe.mkdir()
    return probe


def remove_dead_probes(parent: Path, own: Path) -> list[str]:
    """Remove the probe directories in ``parent`` whose probers are dead; their names.

    ``own``: this run's probe directory, just made: its mtime is the filesystem's "now".
    """
    try:
        now = os.stat(own).st_mtime
        names = [n for n in os.listdir(parent) if n.startswith(PROBE_PREFIX) and n != own.name]
    except OSError:
        return []
    removed = []
    for name in names:
        prober = Prober.parse(name)
        dead = prober.is_dead_here() if prober is not None and prober.host == HOSTNAME else None
        if dead is None:
            try:
                dead = now - os.lstat(parent / name).st_mtime > defaults.PROBE_LEFTOVER_AGE_S
            except OSError:  # gone meanwhile: another starting runner removed it
                continue
        if dead:
            with contextlib.suppress(OSError):
                remove_tree(parent / name)
                removed.append(name)
    if removed:
        log.info("%s: removed %d start-up probe dir(s) of dead runners: %s", parent, len(removed), ", ".join(removed))
    return removed
