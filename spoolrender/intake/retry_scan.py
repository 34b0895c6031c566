"""Which jobs waiting in retry/ are due and this runner's to claim, in queue order.

An entry's name carries its due time (on the spool filesystem's clock, see
spoolrender.spool.clock) and priority (layout.RETRY_NAME), so the listing is the retry queue in
order. Its route (queue and requirements) and the host its last
attempt failed on are read once per entry: the name changes with every move. A job that
just failed transiently on this host is left to another host that could take it for
``retry_elsewhere_seconds`` (hosts/health.py), then taken if nobody did.
"""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass
from typing import Any

from spoolrender import defaults
from spoolrender.config.queues import QUEUE_FILENAME, Route, Subscription, route
from spoolrender.config.spool_config import SpoolConfig
from spoolrender.hosts.health import NOT_THE_HOSTS_FAULT, online_hosts
from spoolrender.intake.candidates import Candidate, parse_for_scan
from spoolrender.spool.clock import Clock
from spoolrender.spool.heartbeat import HOSTNAME
from spoolrender.spool.layout import RETRY_NAME, SpoolLayout, priority_from_key
from spoolrender.spool.records import RETRY, read_runs
from spoolrender.spool.spooldir import DirHandle, SpoolPathRefused


@dataclass(frozen=True)
class _RetryInfo:
    route: Route | None
    failed_on: str | None  # host of the last attempt, when it failed transiently


class RetryScan:
    """The retry/ half of :class:`spoolrender.intake.scan.SpoolScanner` (which shares its lock)."""

    def __init__(
        self, layout: SpoolLayout, config: SpoolConfig, clock: Clock, subscription: Subscription, lock: threading.Lock
    ) -> None:
        self._layout = layout
        self._config = config
        self._clock = clock
        self._subscription = subscription
        self._lock = lock
        self._retry_held: dict[str, float] = {}  # retry entry -> monotonic time to look again
        self._retry_routes: dict[str, _RetryInfo] = {}  # by retry entry name (unique per move)
        self._others: list[dict[str, Any]] | None = None  # other hosts' online beacons, per listing
        self.listed: frozenset[str] = frozenset()  # the names of the last listing of retry/

    def hold(self, name: str, until: float | None = None) -> None:
        """A local process still writes the job file of entry ``name`` (a discarded run):
        look at it again after a poll; or its claim failed: not before ``until`` (monotonic,
        SpoolScanner.claim_failed's backoff). The caller holds the shared lock."""
        until = self._clock.monotonic() + self._config.poll_seconds if until is None else until
        self._retry_held[name] = max(until, self._retry_held.get(name, until))

    def _retry_info(self, retry: DirHandle, name: str) -> _RetryInfo:
        """A retry entry's route (None: unreadable, any runner takes it to fail it) and the
        host its last attempt failed on; read once per entry (its name changes with every move).
        The entry is read through retry/'s descriptor (spoolrender.spool.spooldir), never by its name
        from the root again."""
        if name not in self._retry_routes:
            try:
                job_dir = retry.sub(name)
            except (OSError, SpoolPathRefused):
                # Moved meanwhile, or not a job directory (never followed): unreadable.
                self._retry_routes[name] = _RetryInfo(None, None)
                return self._retry_routes[name]
            with job_dir:
                self._retry_routes[name] = self._read_info(job_dir)
        return self._retry_routes[name]

    def _read_info(self, job_dir: DirHandle) -> _RetryInfo:
        # The private copy; an entry still without one (spoolrender.intake.owncopy) routes by
        # the submitted file it will be copied from at its claim.
        spec = parse_for_scan(self._config, job_dir.anchored(defaults.JOB_FILENAME), defaults.JOB_FILENAME).spec
        if spec is None and not job_dir.exists(defaults.JOB_FILENAME):
            spec = parse_for_scan(
                self._config, job_dir.anchored(defaults.SUBMITTED_FILENAME), defaults.JOB_FILENAME
            ).spec
        try:
            queue_dir: str | None = job_dir.anchored(QUEUE_FILENAME).read_text(encoding="utf-8").strip() or None
        except OSError:
            queue_dir = None
        failed_on = None
        with contextlib.suppress(OSError):
            runs = read_runs(job_dir.through)
            # Only the host's own failures: a "runner-died" record names the recoverer.
            last = runs[-1] if runs else None
            if last is not None and last.outcome == RETRY and (last.error or {}).get("kind") not in NOT_THE_HOSTS_FAULT:
                failed_on = last.host
        job_route = None if spec is None else route(queue_dir or spec.queue, spec.requires)
        return _RetryInfo(job_route, failed_on)

    def _served_elsewhere(self, job_route: Route, fs_now: float | None) -> bool:
        """Whether an online runner on another host could take a job of ``job_route``."""
        if fs_now is None:
            return False
        if self._others is None:  # once per listing, and only when a retry failed here
            self._others = [
                b for host, beacons in online_hosts(self._layout, fs_now, self._config.lease_seconds).items()
                if host != HOSTNAME for b in beacons
            ]  # fmt: skip
        return any(
            Subscription(tuple(b.get("queues") or ["*"]), frozenset(b.get("tags") or ())).rank(job_route) is not None
            for b in self._others
        )

    def scan(self, routes: list[tuple[Route, float]], fs_now: float | None) -> tuple[list[Candidate], float | None]:
        """Due retry entries this runner may claim, and when the next one may become so.

        ``routes`` collects every due job's route (this runner's or not), for the beacon.
        """
        self._others = None  # other hosts' beacons: read again once per listing
        # Due times are on the spool filesystem's clock (transitions.retry_due), and so is
        # "now": a host whose wall clock is off or stepped neither runs a retry early nor
        # starves it. The wait until then runs on the monotonic clock.
        now = self._clock.wall() if fs_now is None else fs_now
        try:
            retry = DirHandle.open(self._layout.retry)
        except FileNotFoundError:  # a missing retry/ lists as empty: no entry's route is kept
            self._retry_routes.clear()
            self.listed = frozenset()
            return [], None
        with retry:
            return self._scan_held(retry, routes, fs_now, now)

    def _scan_held(
        self, retry: DirHandle, routes: list[tuple[Route, float]], fs_now: float | None, now: float
    ) -> tuple[list[Candidate], float | None]:
        out: list[Candidate] = []
        wake: float | None = None
        names = retry.names()
        self.listed = frozenset(names)
        for gone in set(self._retry_routes) - set(names):
            del self._retry_routes[gone]
        with self._lock:
            held = {n: t for n, t in self._retry_held.items() if t > self._clock.monotonic()}
            self._retry_held = held
        for name in names:
            m = RETRY_NAME.fullmatch(name)
            if m is None:
                continue
            if name in held:  # its job file is still being written (a discarded run)
                wake = held[name] if wake is None else min(wake, held[name])
                continue
            due = int(m.group("due")) / 1000
            if due > now:
                until = self._clock.monotonic() + (due - now)
                wake = until if wake is None else min(wake, until)
                continue
            prio = priority_from_key(m.group("prio"))
            info = self._retry_info(retry, name)
            job_route = info.route
            elsewhere_until = due + self._config.retry_elsewhere_seconds
            if (
                info.failed_on == HOSTNAME
                and job_route is not None
                and now < elsewhere_until
                and self._served_elsewhere(job_route, fs_now)
            ):
                # It just failed on this host: leave it to another host for a while
                # (hosts/health.py); take it afterwards if nobody did.
                until = self._clock.monotonic() + (elsewhere_until - now)
                wake = until if wake is None else min(wake, until)
                continue
            rank = 0
            if job_route is not None:
                routes.append((job_route, due))
                found = self._subscription.rank(job_route)
                if found is None:
                    continue
                rank = found
            out.append(Candidate((rank, -prio, due, name), name, "retry", m.group("id"), m.group("uid")))
        return out, wake
