"""Retention's policy and its purge lease: one purger per spool at a time.

``keep_done``/``keep_failed`` (an age) and ``keep_done_max``/``keep_failed_max`` (a count)
are applied by whichever runner finds the last purge ``RETENTION_INTERVAL_S`` old, through
the same deletion as ``spoolrender purge`` (:func:`spoolrender.ops.purge.purge`,
:func:`~spoolrender.ops.purge.purge_beyond`). Only done/ and failed/ are ever touched.

One purger at a time, also across hosts on NFS or sshfs where flock is not shared: a
lease is a file ``.spoolrender/retention/lease-<generation>``. Taking it means creating the
next generation's file with O_EXCL, which exactly one contender wins (O_EXCL creates had
one winner in 500 of 500 races between GlusterFS mounts; the classic safe create on NFS
too). The highest
generation is the lease: "held" while its holder rewrites it every ``heartbeat_seconds``,
"free" (with the last purge's report, which status shows) once it is done. A held lease
whose file is older than ``lease_seconds`` by the spool filesystem's own clock (a probe
file's mtime against the lease's, both stamped by the server: no two hosts' clocks are
compared) belongs to a dead or stuck runner and may be taken. A holder that wakes from a
stall to find a newer generation stops renewing; the deletions it is still doing apply
the same rules to the same oldest entries, so the overlap costs work, not jobs.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spoolrender import defaults
from spoolrender.config.spool_config import SpoolConfig
from spoolrender.spool.durable import write_atomic
from spoolrender.spool.heartbeat import HOSTNAME
from spoolrender.spool.layout import SpoolLayout, list_names
from spoolrender.spool.trouble_log import TroubleLog

log = logging.getLogger(__name__)

_LEASE = re.compile(r"lease-(\d{12})")
HELD = "held"
FREE = "free"
FINISHED_STATES = ("done", "failed")


@dataclass(frozen=True)
class RetentionPolicy:
    """How long and how many finished jobs a spool keeps (None: no limit)."""

    keep_done: float | None
    keep_failed: float | None
    keep_done_max: int | None
    keep_failed_max: int | None

    @classmethod
    def of(cls, config: SpoolConfig) -> RetentionPolicy:
        return cls(config.keep_done, config.keep_failed, config.keep_done_max, config.keep_failed_max)

    @property
    def on(self) -> bool:
        return any(v is not None for v in (self.keep_done, self.keep_failed, self.keep_done_max, self.keep_failed_max))

    def limits(self, state: str) -> tuple[float | None, int | None]:
        """(age, count) for ``state``."""
        return (self.keep_done, self.keep_done_max) if state == "done" else (self.keep_failed, self.keep_failed_max)

    def describe(self) -> str:
        """``done/ 30d or 100000 newest, failed/ 90d`` (``off`` if nothing is limited)."""
        parts = []
        for state in FINISHED_STATES:
            age, count = self.limits(state)
            said = [f"{_duration_text(age)}" if age is not None else "", f"{count} newest" if count is not None else ""]
            said = [s for s in said if s]
            if said:
                parts.append(f"{state}/ {' or '.join(said)}")
        return ", ".join(parts) if parts else "off"


def _duration_text(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:g}{unit}"
    return f"{seconds:g}s"


@dataclass(frozen=True)
class LeaseState:
    """What the lease file says: who holds it (or held it last) and the last purge's report."""

    generation: int
    state: str  # HELD or FREE
    holder: str
    host: str
    mtime: float  # the spool filesystem's clock
    last: dict[str, Any] | None  # {"ended", "removed": {"done": n, "failed": n}, "seconds", "host"}


def _lease_dir(layout: SpoolLayout) -> Path:
    return layout.private / defaults.RETENTION_DIR


def read_lease(layout: SpoolLayout) -> LeaseState | None:
    """The current (highest) lease generation, or None if no runner ever purged this spool."""
    directory = _lease_dir(layout)
    generations = sorted((int(m.group(1)) for n in list_names(directory) if (m := _LEASE.fullmatch(n))), reverse=True)
    for generation in generations:
        path = directory / f"lease-{generation:012d}"
        try:
            raw = json.loads(path.read_bytes())
            mtime = os.stat(path).st_mtime
        except FileNotFoundError:
            continue  # replaced by a newer generation meanwhile
        except (OSError, ValueError):
            raw, mtime = {}, 0.0  # unreadable: counts as a stale lease, taken over in time
        return LeaseState(
            generation, str(raw.get("state", HELD)), str(raw.get("holder", "?")), str(raw.get("host", "?")), mtime,
            raw.get("last") if isinstance(raw.get("last"), dict) else None,
        )  # fmt: skip
    return None


class PurgeLease:
    """The retention lease held by this process: renewed by a thread until released."""

    def __init__(
        self, layout: SpoolLayout, generation: int, holder: str, heartbeat_s: float, last: dict[str, Any] | None
    ) -> None:
        self._path = _lease_dir(layout) / f"lease-{generation:012d}"
        self._next = _lease_dir(layout) / f"lease-{generation + 1:012d}"
        self.generation = generation
        self._holder = holder
        self._last = last
        self._stop = threading.Event()
        self.lost = False
        self._trouble = TroubleLog(log, "retention: renewing the purge lease")
        self._thread = threading.Thread(target=self._renew, args=(heartbeat_s,), name="retention-lease", daemon=True)
        self._thread.start()

    def _body(self, state: str) -> bytes:
        return json.dumps({"state": state, "holder": self._holder, "host": HOSTNAME, "pid": os.getpid(),
                           "last": self._last}).encode()  # fmt: skip

    def _taken_over(self) -> bool:
        """Whether another runner took the next generation. A look that fails finds none: a
        spool that does not answer for now (ENOTCONN, EIO) raised it out of the renewing
        thread, which ended, so the lease went stale while its holder still purged; and out
        of release(), so a purge that had ended kept the lease held for a whole lease."""
        try:
            return self._next.exists()
        except OSError:
            return False

    def _renew(self, interval: float) -> None:
        while not self._stop.wait(interval):
            if self._taken_over():
                # Another runner judged this lease stale (we were stalled) and took the next
                # generation: it is the purger now.
                self.lost = True
                log.warning("retention: lease taken over by another runner while purging")
                return
            try:
                # Rewritten, not touched: utime would stamp this host's clock, a write the
                # server's (the clock every observer compares with).
                write_atomic(self._path, self._body(HELD), durable=False)
            except OSError as exc:
                self._trouble.failed(exc)  # tried again at the next interval
            else:
                self._trouble.succeeded()

    def release(self, last: dict[str, Any]) -> None:
        """Stop renewing; mark the lease free with this purge's report (kept for status)."""
        self._stop.set()
        self._thread.join()
        self._last = last
        if not self.lost and not self._taken_over():
            try:
                write_atomic(self._path, self._body(FREE))
            except OSError as exc:
                log.warning("retention: cannot release the purge lease: %s", exc)


def take_lease(config: SpoolConfig, holder: str, now: float) -> PurgeLease | None:
    """The retention lease if no other runner holds it (``now``: the spool's clock); None if
    it is held and alive, or another contender won it just now."""
    layout = SpoolLayout(config.spool)
    directory = _lease_dir(layout)
    directory.mkdir(exist_ok=True)
    current = read_lease(layout)
    if current is not None and current.state == HELD and now - current.mtime < config.lease_seconds:
        log.info("retention: %s on %s is purging; not this runner", current.holder, current.host)
        return None
    generation = 1 if current is None else current.generation + 1
    last = None if current is None else current.last
    body = json.dumps({"state": HELD, "holder": holder, "host": HOSTNAME, "pid": os.getpid(), "last": last})
    try:
        # O_EXCL: of all runners that found the same lease free or stale, exactly one creates
        # the next generation. Not fsynced: a lease lost in a power cut is only taken again.
        fd = os.open(directory / f"lease-{generation:012d}", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return None
    with os.fdopen(fd, "wb") as fh:
        fh.write(body.encode())
    if current is not None:
        # Older generations are history now; only the newest is read.
        for name in list_names(directory):
            m = _LEASE.fullmatch(name)
            if m and int(m.group(1)) < generation:
                with contextlib.suppress(OSError):
                    os.unlink(directory / name)
    return PurgeLease(layout, generation, holder, config.heartbeat_seconds, last)


def retention_report(config: SpoolConfig, fs_now: float) -> dict[str, Any]:
    """Retention as ``status --json`` shows it: the policy, the last purge, a purge under way."""
    policy = RetentionPolicy.of(config)
    lease = read_lease(SpoolLayout(config.spool))
    purging = None
    if lease is not None and lease.state == HELD and fs_now - lease.mtime < config.lease_seconds:
        purging = {"holder": lease.holder, "host": lease.host}
    return {
        "on": policy.on,
        "policy": policy.describe(),
        "keep_done_seconds": policy.keep_done,
        "keep_failed_seconds": policy.keep_failed,
        "keep_done_max": policy.keep_done_max,
        "keep_failed_max": policy.keep_failed_max,
        "last_purge": None if lease is None else lease.last,
        "purging": purging,
    }
