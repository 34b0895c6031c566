"""Runner beacons (``.spoolrender/runners/<runner>.json``) and their expiry.

A runner rewrites its beacon every heartbeat for `status` and the metrics, and a clock
probe (``.spoolrender/clock-<runner>``, see :func:`spoolrender.clock.spool_now`) every scan.
A runner that stops cleanly removes them (and its hooks thread's probe,
``clock-<runner>-hooks``); one that is SIGKILLed (or whose host dies)
cannot, so every runner expires the leftovers of runners that are provably dead:

- on the same host at once: another boot, or no process with the beacon's pid and start
  time (pids are reused; the start time in clock ticks since boot tells them apart);
- from another host only after ``RUNNER_EXPIRY_S`` of silence: its pids mean nothing
  here, and an operator wants to see a vanished host as OFFLINE for a while first.

Clock probes are throwaway by nature (recreated by the next scan that needs one), so any
probe untouched for a lease is removed, as are the probes of `status` and `purge` runs
that were killed before they could remove their own, and the temporary files of atomic
writes (``.<name>.<hex>.tmp``) that a kill mid-write left beside beacons, probes and
liveness notes.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from pathlib import Path
from typing import Any

from spoolrender import defaults
from spoolrender.durable import json_bytes, overwrite_in_place, write_json_atomic
from spoolrender.heartbeat import HOSTNAME, boot_id, process_start
from spoolrender.layout import SpoolLayout, list_names
from spoolrender.spool_io import is_spool_io

log = logging.getLogger(__name__)

PROBE_PREFIX = "clock-"
LIVENESS_DIR = "liveness"  # in .spoolrender/: each host's shared liveness observations
_BOOT = boot_id()


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
        write_json_atomic(path, beacon, durable=False)
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


def read_beacon(path: Path) -> dict[str, Any] | None:
    try:
        with open(path, "rb") as fh:
            beacon = json.loads(fh.read())
    except (OSError, ValueError):
        return None
    return beacon if isinstance(beacon, dict) else None


def expire_runners(layout: SpoolLayout, fs_now: float, lease_seconds: float) -> list[str]:
    """Remove the beacons and probes of dead runners; returns the runner ids expired."""
    expired = []
    for name in list_names(layout.runners):
        if not name.endswith(".json") or name.startswith("."):
            continue
        path = layout.runners / name
        beacon = read_beacon(path)
        quiet = _quiet_for(path, fs_now)
        if quiet is None:
            continue  # gone meanwhile
        # An unreadable beacon that is not rewritten within a lease has no owner.
        if (quiet > lease_seconds) if beacon is None else runner_is_dead(beacon, quiet):
            runner_id = name.removesuffix(".json")
            remove_beacon(layout, runner_id)
            expired.append(runner_id)
    for directory in (layout.private, layout.runners, layout.private / LIVENESS_DIR):
        for name in list_names(directory):
            throwaway = name.startswith(PROBE_PREFIX) or (name.startswith(".") and name.endswith(".tmp"))
            quiet = _quiet_for(directory / name, fs_now) if throwaway else None
            if quiet is not None and quiet > lease_seconds:
                with contextlib.suppress(OSError):
                    (directory / name).unlink()
    if expired:
        log.info("expired the beacons of %d dead runner(s): %s", len(expired), ", ".join(sorted(expired)))
    return expired


def _quiet_for(path: Path, fs_now: float) -> float | None:
    """Seconds since ``path`` was last written, by the spool filesystem's clock."""
    try:
        return max(0.0, fs_now - os.stat(path).st_mtime)
    except OSError:
        return None
