"""Host health: which hosts are online, which keep failing, and retrying elsewhere.

Render failures are often the host's fault (a missing font, a full disk, a broken GPU
driver, low memory), so spoolrender treats the host as a suspect, as Flamenco's worker
blocklist and Sidekiq's retry-on-another-process do:

- after a transient failure on host H, the job's next attempt prefers another online
  host: runners on H leave the due retry alone for ``retry_elsewhere_seconds``, then take
  it if nobody else did (so a single-host spool still works, only that much later);
- every transient failure is recorded per host in ``.spoolrender/hosts/<host>.json``
  (written only by that host's runners, under a flock, so its times share one clock);
  when ``host_block_jobs`` different jobs have failed there within
  ``host_block_window_seconds``, the host is blocked: ``<host>.blocked`` says why and
  until when (``host_block_seconds`` later, the quiet period). A blocked host's runners
  claim nothing and say why in their log and beacon; ``status`` shows it;
  ``spoolrender unblock HOST`` clears it at once.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from pathlib import Path
from typing import Any

from filelock import FileLock

from spoolrender.config import SpoolConfig
from spoolrender.durable import write_json_atomic
from spoolrender.layout import SpoolLayout, list_names

log = logging.getLogger(__name__)

# Errors that say nothing about the host: the job itself, an operator, or a dead runner
# (recorded by whoever recovered it, not by the host that died).
NOT_THE_HOSTS_FAULT = ("invalid-job", "cancelled", "runner-died", "attempts-exhausted")


def hosts_dir(layout: SpoolLayout) -> Path:
    return layout.private / "hosts"


def _safe(host: str) -> str:
    # Host names come from gethostname(); keep them from ever naming another directory.
    return host.replace("/", "_").lstrip(".") or "_"


def _read(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def record_failure(layout: SpoolLayout, config: SpoolConfig, host: str, job_id: str, kind: str) -> str | None:
    """Count a transient failure of ``job_id`` on ``host`` (this host); the reason if it is now blocked."""
    if kind in NOT_THE_HOSTS_FAULT:
        return None
    directory = hosts_dir(layout)
    directory.mkdir(parents=True, exist_ok=True)
    name = _safe(host)
    now = time.time()
    # flock: only this host's runners write this file, and flock holds on one host.
    with FileLock(directory / f".{name}.lock"):
        state = _read(directory / f"{name}.json") or {}
        window = config.host_block_window_seconds
        failures = [f for f in state.get("failures", []) if isinstance(f, list) and now - f[0] <= window]
        failures.append([now, job_id, kind])
        write_json_atomic(directory / f"{name}.json", {"host": host, "failures": failures}, durable=False)
        jobs = sorted({str(f[1]) for f in failures})
        if len(jobs) < config.host_block_jobs or blocked(layout, host) is not None:
            return None
        kinds = sorted({str(f[2]) for f in failures})
        reason = (
            f"{len(jobs)} different jobs failed on this host in the last {window:g} s "
            f"({', '.join(kinds)}; e.g. {', '.join(jobs[:3])})"
        )
        marker = {"host": host, "reason": reason, "since": now, "until": now + config.host_block_seconds}
        write_json_atomic(directory / f"{name}.blocked", marker)
    log.error(
        "host %s blocked: %s; it claims nothing for %g s, or until `spoolrender unblock %s`",
        host, reason, config.host_block_seconds, host,
    )  # fmt: skip
    return reason


def blocked(layout: SpoolLayout, host: str, now: float | None = None) -> dict[str, Any] | None:
    """The block marker of ``host`` while it holds (None once its quiet period has passed)."""
    marker = _read(hosts_dir(layout) / f"{_safe(host)}.blocked")
    if marker is None:
        return None
    if float(marker.get("until") or 0) <= (time.time() if now is None else now):
        return None
    return marker


def all_blocked(layout: SpoolLayout) -> list[dict[str, Any]]:
    """Every host blocked now, for ``status``."""
    now = time.time()
    out = []
    for name in sorted(list_names(hosts_dir(layout))):
        if name.endswith(".blocked"):
            marker = blocked(layout, name[: -len(".blocked")], now)
            if marker is not None:
                out.append(marker)
    return out


def unblock(layout: SpoolLayout, host: str) -> bool:
    """Clear ``host``'s block and its failure history; True if it was blocked."""
    was = blocked(layout, host) is not None
    for suffix in (".blocked", ".json"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(hosts_dir(layout) / f"{_safe(host)}{suffix}")
    return was


def online_hosts(layout: SpoolLayout, fs_now: float, lease_seconds: float) -> dict[str, list[dict[str, Any]]]:
    """Beacons of online runners by host (a beacon rewritten within the lease, by the spool's clock)."""
    out: dict[str, list[dict[str, Any]]] = {}
    for name in list_names(layout.runners):
        if not name.endswith(".json"):
            continue
        path = layout.runners / name
        try:
            age = fs_now - os.stat(path).st_mtime
        except OSError:
            continue
        beacon = _read(path)
        if beacon is None or age > lease_seconds or beacon.get("host_blocked"):
            continue
        out.setdefault(str(beacon.get("host")), []).append(beacon)
    return out
