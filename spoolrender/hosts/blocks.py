"""Whether a host's block is applied: a rule meant to route around one bad host must
never stop the farm.

A block marker (spoolrender.hosts.health) is applied only while all of these hold, judged in the
order the blocks were placed, from the spool's files alone (every host decides alike):

- its failures still count against the host (a job that failed the same way on another
  host since is the job's fault, and no longer counts);
- the host is not the last online one serving a queue, or a queue and tags that a job
  waits for: another online host whose block is not applied must serve it too;
- fewer than ``host_block_max_share`` of the online hosts (rounded down) are blocked
  already: none of one host, one of two or three, two of four or five.

A blocked host is not idle: its runners claim one job at a time (host-wide, a flock: the
same host only) as a probe, one every ``host_probe_seconds``; when a probe job (or a
chunk of one) is done, the block is lifted. A probe that neither rendered nor failed
(requeued, taken over, split into chunks) says nothing of the host: the next one need not
wait. The quiet period ends a block too (``until``), and ``spoolrender unblock HOST``.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
from dataclasses import dataclass
from typing import Any

from spoolrender.config.queues import ALL_QUEUES, DEFAULT_QUEUE, Route, Subscription, route
from spoolrender.config.spool_config import SpoolConfig
from spoolrender.hosts.health import (
    failed_elsewhere,
    hosts_fault,
    marker_path,
    markers,
    online_hosts,
    probe_lock_path,
    unblock,
)
from spoolrender.spool.layout import SpoolLayout

log = logging.getLogger(__name__)

# BlockState.cause: why a block is applied, or why it is held back.
APPLIED = "failures"
HELD_JOBS_FAULT = "jobs-fault"  # its failed jobs failed the same way on other hosts too
HELD_SHARE = "share"  # host_block_max_share of the online hosts are blocked already
HELD_LAST = "last-server"  # it is the last online host serving a queue
HELD_OFFLINE = "offline"
CAUSES = (APPLIED, HELD_JOBS_FAULT, HELD_SHARE, HELD_LAST, HELD_OFFLINE)
# A probe job's RunEnd.outcome (a chunk's is "chunk-" + it): rendered, or a neutral end (a
# requeue for a shutdown, a spool I/O stop or an unfinished upload; taken over; split).
PROBE_PASSED = ("done", "chunk-done")
PROBE_NEUTRAL = ("requeue", "lost", "split", "chunk-requeue", "chunk-lost")


@dataclass(frozen=True)
class BlockState:
    host: str
    reason: str  # why it was blocked
    since: float  # the spool filesystem's clock
    until: float  # end of the quiet period
    cause: str  # APPLIED, or why it is held back (HELD_*)
    held_back: str | None  # why the block is not applied now, in words (None: it is)

    def __post_init__(self) -> None:
        if self.cause not in CAUSES:
            raise ValueError(f"unknown block cause {self.cause!r}")
        if (self.cause == APPLIED) != (self.held_back is None):
            raise ValueError("a block is applied exactly when nothing holds it back")

    @property
    def applied(self) -> bool:
        """Its runners claim only one probe job at a time."""
        return self.cause == APPLIED

    def to_json(self) -> dict[str, Any]:
        return {
            "host": self.host, "reason": self.reason, "since": self.since, "until": self.until,
            "applied": self.applied, "cause": self.cause, "held_back": self.held_back,
        }  # fmt: skip


def _subscriptions(beacons: list[dict[str, Any]]) -> list[Subscription]:
    return [Subscription(tuple(b.get("queues") or [ALL_QUEUES]), frozenset(b.get("tags") or ())) for b in beacons]


def _routes(online: dict[str, list[dict[str, Any]]]) -> list[Route]:
    """The queues (and queue + tags) that must stay served: every queue an online runner
    names, the default queue, and every route a runner saw jobs waiting for."""
    found = {Route(DEFAULT_QUEUE)}
    for beacons in online.values():
        for b in beacons:
            found.update(Route(str(q)) for q in b.get("queues") or () if q != ALL_QUEUES)
            for group in b.get("waiting") or ():
                if isinstance(group, dict):
                    found.add(route(str(group.get("queue")), [str(t) for t in group.get("requires") or ()]))
    return sorted(found)


def _describe(r: Route) -> str:
    return f"queue {r.queue!r}" + (f" with tag(s) {', '.join(r.requires)}" if r.requires else "")


def _last_server(host: str, held: set[str], online: dict[str, list[dict[str, Any]]]) -> Route | None:
    """A route that ``host`` serves and no other online host outside ``held`` does."""
    subs = {h: _subscriptions(beacons) for h, beacons in online.items()}
    for r in _routes(online):
        if not any(s.rank(r) is not None for s in subs[host]):
            continue
        if not any(s.rank(r) is not None for h, ss in subs.items() if h != host and h not in held for s in ss):
            return r
    return None


def block_states(layout: SpoolLayout, config: SpoolConfig, fs_now: float) -> list[BlockState]:
    """Every block whose quiet period lasts, and whether it is applied (module docstring)."""
    found = markers(layout, fs_now)
    if not found:
        return []
    online = online_hosts(layout, fs_now, config.lease_seconds, with_blocked=True)
    most = int(len(online) * config.host_block_max_share)  # rounded down
    held: set[str] = set()
    out = []
    for marker in found:
        host = str(marker["host"])
        failures = [f for f in marker.get("failures") or () if isinstance(f, list) and len(f) == 3]
        elsewhere = failed_elsewhere(layout, host, fs_now, config.host_block_window_seconds)
        cause, why = APPLIED, None
        if failures and len(hosts_fault(failures, elsewhere)) < config.host_block_jobs:
            cause, why = HELD_JOBS_FAULT, "its failed jobs failed the same way on other hosts too (the jobs' fault)"
        elif host not in online:
            cause, why = HELD_OFFLINE, "the host is offline"
        elif (last := _last_server(host, held, online)) is not None:
            cause, why = HELD_LAST, f"it is the last online host serving {_describe(last)}"
        elif len(held) >= most:
            cause = HELD_SHARE
            why = (
                f"{len(held)} of {len(online)} online hosts are blocked already, the most allowed "
                f"({config.host_block_max_share:.0%} of them, rounded down)"
            )
        if cause == APPLIED:
            held.add(host)
        out.append(
            BlockState(
                host, str(marker.get("reason")), float(marker.get("since") or 0), float(marker.get("until") or 0),
                cause=cause, held_back=why,
            )
        )  # fmt: skip
    return out


def block_of(layout: SpoolLayout, config: SpoolConfig, host: str, fs_now: float) -> BlockState | None:
    """``host``'s block (None: it has none); one stat when it has none, as nearly always."""
    if not os.path.lexists(marker_path(layout, host)):
        return None
    return next((s for s in block_states(layout, config, fs_now) if s.host == host), None)


def probe_succeeded(layout: SpoolLayout, host: str, job_id: str) -> None:
    """A blocked host's probe job is done: the host works again."""
    if unblock(layout, host):
        log.warning("host %s unblocked: its probe job %s was rendered and published", host, job_id)


class ProbeSlot:
    """The one probe job a blocked host may run at a time, across all its runners.

    A flock on ``.spoolrender/hosts/.<host>.probe``: every runner of a host uses the same
    spool mount, and the kernel frees the lock when its holder dies (SIGKILL included), so
    a killed probe never keeps its host from probing again. Each slot opens its own file
    description, so two runners (or two slots of one) never both hold it.
    """

    def __init__(self, layout: SpoolLayout, host: str) -> None:
        self._layout = layout
        self._host = host
        self._path = probe_lock_path(layout, host)
        self._fd: int | None = None

    def due(self, since: float, fs_now: float, interval: float) -> bool:
        """Whether the next probe may start: ``interval`` after the block began and after
        the last probe ended (the lock file's mtime, on the spool's clock), so that a host
        that is still broken burns one job's attempt per interval, not one a second."""
        try:
            st = os.stat(self._path)
        except OSError:
            st = None
        # Still empty: made by a take(), no probe has failed yet (a failed one writes).
        last = since if st is None or st.st_size == 0 else max(since, st.st_mtime)
        return fs_now >= last + interval

    def take(self) -> bool:
        if self._fd is not None:
            return False  # one probe at a time, also within this runner
        try:
            self._path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self._path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            return False
        self._fd = fd
        return True

    def ended(self, job_id: str, outcome: str | None) -> None:
        """The probe job's run ended (``outcome``: RunEnd.outcome; None: not recorded): a
        success lifts the block, a neutral end frees the slot at once, else the next waits."""
        if outcome in PROBE_PASSED:
            probe_succeeded(self._layout, self._host, job_id)
        self.release(probed=outcome not in PROBE_PASSED + PROBE_NEUTRAL)

    def release(self, *, probed: bool = False) -> None:
        """Free the slot; ``probed``: a probe ran (and failed), the next waits an interval."""
        if self._fd is not None:
            if probed:
                with contextlib.suppress(OSError):
                    os.write(self._fd, b"x")  # a write: the spool's clock stamps the mtime
            with contextlib.suppress(OSError):
                os.close(self._fd)  # closing the only description releases the flock
            self._fd = None
