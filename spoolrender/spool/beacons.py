"""Runner beacons (``.spoolrender/runners/<runner>.json``) and their expiry.

A runner rewrites its beacon every heartbeat for `status` and the metrics, and a clock
probe (``.spoolrender/clock-<runner>``, see :func:`spoolrender.spool.clock.spool_now`) every scan.
A runner that stops cleanly removes them (and its hooks thread's probe,
``clock-<runner>-hooks``); one that is SIGKILLed (or whose host dies)
cannot, so every runner expires the leftovers of runners that are provably dead:

- on the same host at once: another boot, or no process with the beacon's pid and start
  time (pids are reused; the start time in clock ticks since boot tells them apart);
- from another host only after ``RUNNER_EXPIRY_S`` of silence: its pids mean nothing
  here, and an operator wants to see a vanished host as OFFLINE for a while first.

A runner SIGKILLed while it rewrites its beacon also leaves the write's temporary file
(``.<runner>.json.<hex>.tmp``): it goes with the beacon, and so does every throwaway file
named after a runner of this host whose process is gone (a runner killed during its first
beacon write has no beacon to prove it dead).

Clock probes are throwaway by nature (recreated by the next scan that needs one), so any
other probe silent for an hour is removed, as are the probes of `status` and `purge` runs
that were killed before they could remove their own, and the temporary files of atomic
writes (``.<name>.<hex>.tmp``) that a kill mid-write left beside beacons, probes and
liveness notes.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spoolrender import defaults
from spoolrender.spool.durable import json_bytes, overwrite_in_place, write_json_atomic
from spoolrender.spool.heartbeat import HOSTNAME, boot_id, process_start
from spoolrender.spool.io_trouble import is_spool_io
from spoolrender.spool.layout import SpoolLayout
from spoolrender.spool.spooldir import DirHandle, SpoolPathRefused

log = logging.getLogger(__name__)

PROBE_PREFIX = "clock-"
LIVENESS_DIR = "liveness"  # in .spoolrender/: each host's shared liveness observations
_BOOT = boot_id()


def new_runner_id(token: int) -> str:
    """This process's runner id: ``<host>-<pid>-<4 hex digits of token>`` (see :func:`_runner_here`)."""
    return f"{HOSTNAME}-{os.getpid()}-{token & 0xFFFF:04x}"


# A runner id of this host (new_runner_id): the pid in group 1.
_RUNNER_HERE = re.compile(re.escape(HOSTNAME) + r"-(\d+)-[0-9a-f]{4}")
# A beacon write's temporary file in runners/ (durable's ``.<name>.<hex>.tmp``): the runner id in group 1.
_BEACON_TEMP = re.compile(r"\.(.+)\.json\.[0-9a-f]+\.tmp")


def beacon_path(layout: SpoolLayout, runner_id: str) -> Path:
    return layout.runners / f"{runner_id}.json"


def probe_path(layout: SpoolLayout, runner_id: str) -> Path:
    return layout.private / f"{PROBE_PREFIX}{runner_id}"


def hooks_probe_path(layout: SpoolLayout, runner_id: str) -> Path:
    """The clock probe of the runner's hooks thread (its own: the threads probe concurrently)."""
    return layout.private / f"{PROBE_PREFIX}{runner_id}-hooks"


def write_beacon(layout: SpoolLayout, runner_id: str, fields: dict[str, Any]) -> None:
    """Announce this runner: ``fields`` plus who it is, so that others can prove it dead."""
    beacon = {"runner": runner_id, "host": HOSTNAME, "pid": os.getpid(), "boot": _BOOT,
              "started": process_start(os.getpid()), **fields}  # fmt: skip
    path = beacon_path(layout, runner_id)
    try:
        # No fsync: losing a beacon in a power cut is harmless (rewritten every heartbeat).
        write_json_atomic(path, beacon, durable=False, crash_at="beacon-before-replace")
    except OSError as exc:
        if is_spool_io(exc):
            # No room for the replacement (a full disk): `status` must still learn why this
            # runner does not claim, so the old beacon's own room takes the news.
            overwrite_in_place(path, json_bytes(beacon))
        raise


def remove_beacon(layout: SpoolLayout, runner_id: str) -> None:
    for path in (beacon_path(layout, runner_id), probe_path(layout, runner_id), hooks_probe_path(layout, runner_id)):
        with contextlib.suppress(OSError):
            path.unlink()


def _remove_runner_files(private: DirHandle, runners: DirHandle, runner_id: str) -> None:
    """:func:`remove_beacon` through the held directories (``runner_id`` came from a listing)."""
    for directory, name in (
        (runners, f"{runner_id}.json"),
        (private, f"{PROBE_PREFIX}{runner_id}"),
        (private, f"{PROBE_PREFIX}{runner_id}-hooks"),
    ):
        with contextlib.suppress(OSError, SpoolPathRefused):
            directory.unlink(name)


def runner_is_dead(beacon: dict[str, Any], quiet_seconds: float | None) -> bool:
    """True if the runner that wrote ``beacon`` is provably gone (see the module doc)."""
    if quiet_seconds is not None and quiet_seconds > defaults.RUNNER_EXPIRY_S:
        return True
    if beacon.get("host") != HOSTNAME:
        return False
    boot = beacon.get("boot")
    if boot is not None and _BOOT is not None and boot != _BOOT:
        return True
    try:
        pid = int(beacon["pid"])
    except (KeyError, TypeError, ValueError):
        return False
    started = process_start(pid)
    if started is None:
        return pid != os.getpid() and not _pid_exists(pid)
    recorded = beacon.get("started")
    return recorded is not None and recorded != started


def _pid_exists(pid: int) -> bool:
    # Where /proc cannot answer: signal 0 checks existence without disturbing anyone.
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # exists, but not ours to signal
    return True


BLOCKED_DIRS = ("incoming", "retry")  # where a beacon's blocked entries can be


def blocked_dirs(beacon: dict[str, Any]) -> dict[str, str]:
    """The directory of each entry in the beacon's ``blocked``, by name: its ``blocked_in``;
    ``incoming`` where that says nothing (runners before status schema 7 wrote no
    ``blocked_in``, and named entries of incoming/ only, but for a blocked retry/ entry)."""
    blocked, named = beacon.get("blocked"), beacon.get("blocked_in")
    if not isinstance(blocked, dict):
        return {}
    named = named if isinstance(named, dict) else {}
    return {name: named[name] if named.get(name) in BLOCKED_DIRS else "incoming" for name in blocked}


@dataclass(frozen=True)
class ListedBeacon:
    """A runner's beacon as listed in runners/: ``beacon`` None when unreadable (not JSON,
    not a regular file, too large); ``mtime`` (the spool's clock) of the inode read."""

    name: str
    beacon: dict[str, Any] | None
    mtime: float


def read_beacons(runners: DirHandle) -> list[ListedBeacon]:
    """Every ``*.json`` beacon in the open runners/ directory, sorted by name, read through
    its descriptor (spoolrender.spool.spooldir: a listed name is never re-resolved by path);
    one gone meanwhile is left out."""
    out = []
    for name in sorted(runners.names()):
        if not name.endswith(".json") or name.startswith("."):
            continue
        beacon: dict[str, Any] | None = None
        try:
            data, st = runners.read_file(name, defaults.RUNNER_BEACON_MAX_BYTES)
            with contextlib.suppress(ValueError):
                loaded = json.loads(data)
                beacon = loaded if isinstance(loaded, dict) else None
            mtime = st.st_mtime
        except (OSError, SpoolPathRefused):  # unreadable: only its age counts
            try:
                mtime = runners.stat(name).st_mtime
            except OSError:
                continue  # gone meanwhile
        out.append(ListedBeacon(name, beacon, mtime))
    return out


def listed_beacons(layout: SpoolLayout) -> list[ListedBeacon]:
    """:func:`read_beacons` of the spool's runners/ (none when it is missing)."""
    with contextlib.ExitStack() as held:
        runners = _open_if_present(held, lambda: DirHandle.open(layout.runners))
        return [] if runners is None else read_beacons(runners)


def expire_runners(layout: SpoolLayout, fs_now: float, lease_seconds: float) -> list[str]:
    """Remove the beacons and probes of dead runners; returns the runner ids expired."""
    expired = []
    with contextlib.ExitStack() as held:
        # Through descriptors (spoolrender.spool.spooldir): a listed entry is never re-resolved by name.
        private = _open_if_present(held, lambda: DirHandle.open(layout.private))
        if private is None:
            return []
        runners = _open_if_present(held, lambda: private.sub(layout.runners.name))
        liveness = _open_if_present(held, lambda: private.sub(LIVENESS_DIR))
        announced: set[str] = set()  # runner ids with a beacon (alive, or expired just now)
        if runners is not None:
            for listed in read_beacons(runners):
                runner_id = listed.name.removesuffix(".json")
                announced.add(runner_id)
                quiet = max(0.0, fs_now - listed.mtime)
                # An unreadable beacon that is not rewritten within a lease has no owner.
                if (quiet > lease_seconds) if listed.beacon is None else runner_is_dead(listed.beacon, quiet):
                    _remove_runner_files(private, runners, runner_id)
                    expired.append(runner_id)
        for directory in (d for d in (private, runners, liveness) if d is not None):
            for name in directory.names():
                throwaway = name.startswith(PROBE_PREFIX) or (name.startswith(".") and name.endswith(".tmp"))
                if not throwaway:
                    continue
                # The files of a runner proven dead go with its beacon, at once: its process
                # is gone, so nothing of it writes or holds a lock on them any more (the
                # wait below is for runners that may live). Without a beacon, only a pid of
                # this host proves it.
                owner = _owner_of(name, in_runners=directory is runners)
                if owner is not None and (owner in expired or (owner not in announced and _runner_here_is_dead(owner))):
                    with contextlib.suppress(OSError):
                        directory.unlink(name)
                    continue
                idle = _quiet_for(directory, name, fs_now)
                # An hour, not a lease: a host cut off from a GlusterFS volume mid-write
                # leaves the bricks holding its lock on that file until they notice (~42 s),
                # and an unlink queued behind that lock hung for good (10.3, issue 26). A
                # silent probe may be a partitioned live runner's; a small file kept an hour
                # costs nothing.
                if idle is not None and idle > max(lease_seconds, defaults.PROBE_LEFTOVER_AGE_S):
                    with contextlib.suppress(OSError):
                        directory.unlink(name)
    if expired:
        log.info("expired the beacons of %d dead runner(s): %s", len(expired), ", ".join(sorted(expired)))
    return expired


def _owner_of(name: str, *, in_runners: bool) -> str | None:
    """The runner id a throwaway file is named after: a beacon write's temporary file in
    runners/, a clock probe (the runner's or its hooks thread's) in .spoolrender/."""
    if in_runners:
        temp = _BEACON_TEMP.fullmatch(name)
        return None if temp is None else temp[1]
    if name.startswith(PROBE_PREFIX):
        return name.removeprefix(PROBE_PREFIX).removesuffix("-hooks")
    return None


def _runner_here_is_dead(runner_id: str) -> bool:
    """True if ``runner_id`` names a runner of this host whose pid no process has.

    A reused pid keeps it alive here (the name has no start time): its files then wait
    their hour like another host's.
    """
    here = _RUNNER_HERE.fullmatch(runner_id)
    return here is not None and runner_is_dead({"host": HOSTNAME, "pid": int(here[1])}, None)


def _open_if_present(held: contextlib.ExitStack, opener: Callable[[], DirHandle]) -> DirHandle | None:
    """``opener()`` entered on ``held``, or None if the directory is missing (or not one)."""
    try:
        return held.enter_context(opener())
    except (FileNotFoundError, SpoolPathRefused):
        return None


def _quiet_for(directory: DirHandle, name: str, fs_now: float) -> float | None:
    """Seconds since ``name`` in ``directory`` was last written, by the spool filesystem's clock."""
    try:
        return max(0.0, fs_now - directory.stat(name).st_mtime)
    except OSError:
        return None
