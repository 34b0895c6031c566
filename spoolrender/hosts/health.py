"""Host health: which hosts are online, which keep failing, and retrying elsewhere.

Render failures are often the host's fault (a missing font, a full disk, a broken GPU
driver, low memory), so spoolrender treats the host as a suspect, as Flamenco's worker
blocklist and Sidekiq's retry-on-another-process do:

- after a transient failure on host H, the job's next attempt prefers another online
  host: runners on H leave the due retry alone for ``retry_elsewhere_seconds``, then take
  it if nobody else did (so a single-host spool still works, only that much later);
- every transient failure is recorded per host in ``.spoolrender/hosts/<host>.json``
  (written only by that host's runners, under a flock); when ``host_block_jobs``
  different jobs have failed there within ``host_block_window_seconds``, ``<host>.blocked``
  says why and until when (``host_block_seconds`` later, the quiet period). Times are on
  the spool filesystem's clock (spoolrender.spool.clock), so every host reads them alike.

Failures that say nothing about the host do not count, nor keep its job's retry from it:
the job's own (invalid, its own out-of-memory), an operator's (cancelled, a render killed
by a signal), a dead runner's (recorded by whoever recovered it), a full or failing spool
(every host's), and a job that failed the same way on another host too (it times out or
fails everywhere: the job's fault). Whether a block is applied, and
the probe that lifts it, is :mod:`spoolrender.hosts.blocks`.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from filelock import FileLock

from spoolrender import defaults
from spoolrender.config.spool_config import SpoolConfig
from spoolrender.core.vocabulary import FailureKind
from spoolrender.renderers.base import KILLED
from spoolrender.renderers.remotion.node_worker import OUT_OF_MEMORY
from spoolrender.spool.beacons import listed_beacons
from spoolrender.spool.durable import write_json_atomic
from spoolrender.spool.layout import SpoolLayout
from spoolrender.spool.records import RUNNER_DIED, SPOOL_IO
from spoolrender.spool.spooldir import DirHandle, SpoolPathRefused

log = logging.getLogger(__name__)

# Errors that say nothing about the host: the job itself, an operator, a dead runner
# (recorded by whoever recovered it, not by the host that died), or a full or failing
# spool (every host's; also once its free requeues are used up, and as a recoverer records it).
NOT_THE_HOSTS_FAULT = (
    FailureKind.INVALID_JOB, FailureKind.CANCELLED, RUNNER_DIED, FailureKind.ATTEMPTS_EXHAUSTED, KILLED, OUT_OF_MEMORY,
    SPOOL_IO,
)  # fmt: skip
BLOCKED_SUFFIX = ".blocked"
FAILURES_SUFFIX = ".json"


def hosts_dir(layout: SpoolLayout) -> Path:
    return layout.private / "hosts"


def _safe(host: str) -> str:
    # Host names come from gethostname(); keep them from ever naming another directory.
    return host.replace("/", "_").lstrip(".") or "_"


@functools.lru_cache(maxsize=64)  # built once: the claiming loop looks for its host's on every pass
def marker_path(layout: SpoolLayout, host: str) -> Path:
    return hosts_dir(layout) / f"{_safe(host)}{BLOCKED_SUFFIX}"


def probe_lock_path(layout: SpoolLayout, host: str) -> Path:
    """The flock a blocked host's runners take for their one probe job (host_blocks)."""
    return hosts_dir(layout) / f".{_safe(host)}.probe"


def _read(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _listed(layout: SpoolLayout, wanted: Callable[[str], bool]) -> list[dict[str, Any] | None]:
    """The records in hosts/ whose names ``wanted``, sorted by name, each read through the
    directory's descriptor (spoolrender.spool.spooldir: a listed name is never re-resolved by
    path); None for one unreadable or gone meanwhile."""
    try:
        directory = DirHandle.open(hosts_dir(layout))
    except (FileNotFoundError, SpoolPathRefused):
        return []
    out: list[dict[str, Any] | None] = []
    with directory:
        for name in sorted(n for n in directory.names() if wanted(n)):
            try:
                data = json.loads(directory.read_file(name, defaults.HOST_RECORD_MAX_BYTES)[0])
            except (OSError, ValueError, SpoolPathRefused):
                data = None
            out.append(data if isinstance(data, dict) else None)
    return out


def _failures(state: dict[str, Any] | None, now: float, window: float) -> list[list[Any]]:
    """``[time, job, kind]`` entries of a host's history within the window."""
    return [
        f for f in (state or {}).get("failures", [])
        if isinstance(f, list) and len(f) == 3 and isinstance(f[0], (int, float)) and now - f[0] <= window
    ]  # fmt: skip


def failed_elsewhere(layout: SpoolLayout, host: str, now: float, window: float) -> set[tuple[str, str]]:
    """``(job, kind)`` of every failure recorded on another host within the window."""
    out: set[tuple[str, str]] = set()
    own = f"{_safe(host)}{FAILURES_SUFFIX}"
    for state in _listed(layout, lambda name: name.endswith(FAILURES_SUFFIX) and name != own):
        out.update((str(f[1]), str(f[2])) for f in _failures(state, now, window))
    return out


def hosts_fault(jobs: list[list[Any]], elsewhere: set[tuple[str, str]]) -> list[str]:
    """The different jobs among ``[time, job, kind]`` failures that count against the host:
    not those that failed the same way on another host (the job's own fault)."""
    return sorted({str(f[1]) for f in jobs if (str(f[1]), str(f[2])) not in elsewhere})


def record_failure(
    layout: SpoolLayout, config: SpoolConfig, host: str, job_id: str, kind: str, now: float
) -> str | None:
    """Count a transient failure of ``job_id`` on ``host`` (this host) at ``now`` (the spool
    filesystem's clock); the reason if the host is now to be blocked."""
    if kind in NOT_THE_HOSTS_FAULT:
        return None
    directory = hosts_dir(layout)
    directory.mkdir(parents=True, exist_ok=True)
    name = _safe(host)
    window = config.host_block_window_seconds
    # flock: only this host's runners write this file, and flock holds on one host.
    with FileLock(directory / f".{name}.lock"):
        failures = _failures(_read(directory / f"{name}{FAILURES_SUFFIX}"), now, window)
        failures.append([now, job_id, kind])
        write_json_atomic(directory / f"{name}{FAILURES_SUFFIX}", {"host": host, "failures": failures}, durable=False)
        jobs = hosts_fault(failures, failed_elsewhere(layout, host, now, window))
        if len(jobs) < config.host_block_jobs or blocked(layout, host, now) is not None:
            return None
        counted = [f for f in failures if str(f[1]) in jobs]
        kinds = sorted({str(f[2]) for f in counted})
        reason = (
            f"{len(jobs)} different jobs failed on this host in the last {window:g} s "
            f"({', '.join(kinds)}; e.g. {', '.join(jobs[:3])})"
        )
        marker = {
            "host": host, "reason": reason, "since": now, "until": now + config.host_block_seconds,
            "failures": counted,
        }  # fmt: skip
        write_json_atomic(marker_path(layout, host), marker)
    log.error(
        "host %s to be blocked: %s; while it is, it claims one job at a time as a probe (a success lifts "
        "the block) for %g s, or until `spoolrender unblock %s`", host, reason, config.host_block_seconds, host,
    )  # fmt: skip
    return reason


def blocked(layout: SpoolLayout, host: str, now: float) -> dict[str, Any] | None:
    """The block marker of ``host`` while its quiet period lasts (``now``: the spool's clock);
    whether it is applied is :func:`spoolrender.hosts.blocks.block_states`."""
    marker = _read(marker_path(layout, host))
    if marker is None or float(marker.get("until") or 0) <= now:
        return None
    return marker


def markers(layout: SpoolLayout, now: float) -> list[dict[str, Any]]:
    """Every host's block marker whose quiet period lasts, oldest first."""
    out = []
    for marker in _listed(layout, lambda name: name.endswith(BLOCKED_SUFFIX)):
        if marker is not None and float(marker.get("until") or 0) > now and isinstance(marker.get("host"), str):
            out.append(marker)
    return sorted(out, key=lambda m: (float(m.get("since") or 0), str(m["host"])))


def unblock(layout: SpoolLayout, host: str) -> bool:
    """Clear ``host``'s block and its failure history; True if it had a block marker."""
    was = os.path.lexists(marker_path(layout, host))
    for suffix in (BLOCKED_SUFFIX, FAILURES_SUFFIX):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(hosts_dir(layout) / f"{_safe(host)}{suffix}")
    return was


def online_hosts(
    layout: SpoolLayout, fs_now: float, lease_seconds: float, *, with_blocked: bool = False
) -> dict[str, list[dict[str, Any]]]:
    """Beacons of online runners by host (a beacon rewritten within the lease, by the spool's
    clock); without hosts whose block is applied unless ``with_blocked``."""
    out: dict[str, list[dict[str, Any]]] = {}
    for listed in listed_beacons(layout):  # read through runners/'s descriptor
        beacon = listed.beacon
        if beacon is None or fs_now - listed.mtime > lease_seconds or (beacon.get("host_blocked") and not with_blocked):
            continue
        out.setdefault(str(beacon.get("host")), []).append(beacon)
    return out
