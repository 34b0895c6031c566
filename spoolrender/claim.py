"""Finding claimable jobs and claiming them with one atomic rename.

The directory listing is the truth (events from watchdog only wake the runner early).
A scan yields the candidates in queue order: higher ``priority`` first, then earlier
``not_before``/arrival (incoming) or due time (retry), then name.

Uploads in progress are never claimed: names starting with ``.`` or ending in ``.part``,
``.tmp`` or ``~`` are skipped, and any other file is claimed only once it is complete,
as :mod:`spoolrender.intake` judges from the local writer check, inotify's per-name
bookkeeping and the settle time (timed on our monotonic clock, or measured against the
spool filesystem's own clock). A file that does not parse is only declared invalid once
settled by time, because an upload still in progress does not parse either. An entry
that cannot be claimed (a directory without write permission cannot be moved: EACCES)
is tried again with a growing delay, and the runner reports why.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import shutil
import stat
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from spoolrender import defaults
from spoolrender.clock import Clock
from spoolrender.config import SpoolConfig
from spoolrender.durable import write_atomic
from spoolrender.errors import ClaimBlocked, ClaimLost, JobInvalid
from spoolrender.failpoints import crash_point
from spoolrender.heartbeat import HOSTNAME, ActiveJob, HeartbeatWriter, JobLock, acquire_job_lock
from spoolrender.hosts import NOT_THE_HOSTS_FAULT, online_hosts
from spoolrender.intake import UploadTracker, judge
from spoolrender.jobfile import JobSpec, id_from_filename, is_candidate_name, parse_job, read_job_bytes
from spoolrender.layout import RETRY_NAME, SpoolLayout, list_names, new_token, priority_from_key, running_name
from spoolrender.queues import QUEUE_FILENAME, Route, Subscription, list_incoming, queue_dir_of, route, waiting_groups
from spoolrender.records import RETRY, next_run_number, read_runs
from spoolrender.renderers.base import CancelToken
from spoolrender.seal import JobFileState
from spoolrender.writers import Writer, WriterCheck, lease_probe

log = logging.getLogger(__name__)


@dataclass(frozen=True, order=True)
class Candidate:
    # (rank of its queue in this runner's order, -priority, arrival or due time, name)
    sort_key: tuple[int, int, float, str]
    name: str = field(compare=False)  # relative to incoming/ (``urgent/a.yaml``) or retry/
    source: str = field(compare=False)  # "incoming" or "retry"
    job_id: str = field(compare=False)
    uid: str | None = field(compare=False, default=None)
    queue_dir: str | None = field(compare=False, default=None)  # dropped into incoming/<queue>/


@dataclass
class _Seen:
    """What we know about one file in incoming/ between scans."""

    signature: tuple[int, int, int]  # inode, size, mtime_ns
    first_seen: float  # monotonic time the signature was first seen
    spec: JobSpec | None = None
    invalid: bool = False
    invalid_id: str | None = None  # the id an invalid file is filed under (its readable `id:`)
    parsed_for: tuple[int, int, int] | None = None
    at_startup: bool = False  # present at the scanner's first listing
    # The writer check's verdict holds while the signature does, unless it found a writer:
    # a deep queue costs one check per file, not one per listing. The runner's lease probe
    # just before each claim catches a writer that opened the file since.
    writer: Writer | None = None
    why: str = ""  # the last verdict's reason (logged when it changes)


@dataclass
class Blocked:
    """An entry whose claim failed for a reason that will not go away by itself soon."""

    reason: str
    failures: int
    next_try: float  # monotonic


@dataclass(frozen=True)
class _RetryInfo:
    route: Route | None
    failed_on: str | None  # host of the last attempt, when it failed transiently


@dataclass(frozen=True)
class ScanResult:
    candidates: list[Candidate]
    waiting_uploads: int  # files present but not yet settled
    next_wake: float | None  # monotonic time something may become claimable
    # Every claimable-now job by route (this runner's or not), for the beacon: see queues.py.
    waiting: list[dict[str, object]] = field(default_factory=list)


class SpoolScanner:
    """Lists incoming/ and retry/ and says what can be claimed now, in order."""

    def __init__(
        self,
        layout: SpoolLayout,
        config: SpoolConfig,
        clock: Clock,
        *,
        local: bool = True,
        closers_alive: Callable[[int, int], bool] | None = None,
    ) -> None:
        self._layout = layout
        self._config = config
        self._clock = clock
        self._local = local  # the spool is on a local filesystem: no writers elsewhere
        self._closers_alive = closers_alive or (lambda dev, ino: False)
        self._seen: dict[str, _Seen] = {}
        self.uploads = UploadTracker()
        self._blocked: dict[str, Blocked] = {}
        self._retry_held: dict[str, float] = {}  # retry entry -> monotonic time to look again
        self._first_listing = True
        self._lock = threading.Lock()
        self._arrived = True
        # The last listing's candidates in queue order, by name: a dict keeps the order and
        # forgets a claimed one in O(1) (a list rebuilt per claim was O(n^2) on 10k jobs).
        self._cached: dict[str, Candidate] | None = None
        self._last = ScanResult([], 0, None)
        self._listed_at = 0.0
        self._subscription = Subscription(config.queues, frozenset(config.tags))
        self._retry_routes: dict[str, _RetryInfo] = {}  # by retry entry name (unique per move)
        self._others: list[dict[str, Any]] | None = None  # other hosts' online beacons, per listing

    def note_event(self, name: str, event: str) -> None:
        """An event for ``name`` in incoming/ (created, modified, closed, moved_in), or
        (empty name) something appeared in retry/. The next scan lists."""
        if name:
            self.uploads.note(name, event)
        with self._lock:
            if event == "modified":
                # Not an arrival (a close follows every write; its event lists again), but
                # a listed candidate that is being written is no candidate any more.
                if self._cached is not None:
                    self._cached.pop(name, None)
            else:
                self._arrived = True

    def forget(self, name: str) -> None:
        """``name`` was claimed (by us or, as a lost race showed, by someone else)."""
        with self._lock:
            self._seen.pop(name, None)
            self._blocked.pop(name, None)
            if self._cached is not None:
                self._cached.pop(name, None)
        self.uploads.forget(name)

    def writer_holds(self, candidate: Candidate) -> bool:
        """The authoritative check just before the claim: does a local process hold the
        candidate's job file open for writing? Then it stays where it is, waiting."""
        if candidate.source == "incoming":
            path = self._layout.incoming / candidate.name
        else:
            path = self._layout.retry / candidate.name / defaults.JOB_FILENAME
        # The lease alone: ~0.1 ms per claim. Where it cannot decide (another user's file
        # under an unprivileged runner, a filesystem without leases) the listing's /proc
        # verdict, at most one listing old, stands.
        if lease_probe(path) is not Writer.HELD:
            return False
        log.info("not claiming %s/%s yet: a local process still writes it", candidate.source, candidate.name)
        with self._lock:
            if self._cached is not None:
                self._cached.pop(candidate.name, None)
            seen = self._seen.get(candidate.name)
            if seen is not None:
                seen.writer = Writer.HELD
            if candidate.source == "retry":
                self._retry_held[candidate.name] = self._clock.monotonic() + self._config.poll_seconds
            self._arrived = True  # list again: the next listing re-checks it
        return True

    def claim_failed(self, name: str, reason: str) -> None:
        """The claim of ``name`` failed (not a lost race): back off, 1 s doubling to 5 min."""
        with self._lock:
            old = self._blocked.get(name)
            failures = 1 if old is None else old.failures + 1
            delay = min(defaults.BLOCKED_RETRY_MAX_S, defaults.BLOCKED_RETRY_MIN_S * 2 ** (failures - 1))
            self._blocked[name] = Blocked(reason, failures, self._clock.monotonic() + delay)
            if self._cached is not None:
                self._cached.pop(name, None)
        if failures == 1 or failures % 10 == 0:
            log.warning(
                "cannot claim incoming/%s: %s (tried %d times; next try in %g s)", name, reason, failures, delay
            )

    def blocked(self) -> dict[str, str]:
        """Entries that cannot be claimed now, and why (for the runner's beacon/status)."""
        with self._lock:
            return {name: b.reason for name, b in self._blocked.items()}

    def scan(self, spool_now: Callable[[], float | None]) -> ScanResult:
        """Claimable candidates in queue order.

        A full listing is costly on a deep queue (a stat per waiting file), so the last
        one is reused, minus what was claimed since, until something arrives (an event),
        something becomes due or settles (``next_wake``), the list runs out, or
        ``rescan_seconds`` pass: watchdog's events only shorten that wait; the listing
        stays the truth.
        """
        now = self._clock.monotonic()
        with self._lock:
            arrived, self._arrived = self._arrived, False
            fresh = (
                not arrived
                and self._cached
                and now - self._listed_at < self._config.rescan_seconds
                and (self._last.next_wake is None or now < self._last.next_wake)
            )
            if fresh and self._cached is not None:
                last = self._last
                return ScanResult(list(self._cached.values()), last.waiting_uploads, last.next_wake, last.waiting)
        routes: list[tuple[Route, float]] = []
        fs_now = spool_now()
        self._others = None
        incoming, waiting, wake = self._scan_incoming(fs_now, routes)
        retry, retry_wake = self._scan_retry(routes, fs_now)
        wakes = [w for w in (wake, retry_wake) if w is not None]
        result = ScanResult(sorted(incoming + retry), waiting, min(wakes) if wakes else None, waiting_groups(routes))
        with self._lock:
            self._cached = {c.name: c for c in result.candidates}
        self._last = result
        self._listed_at = now
        return result

    def _scan_incoming(
        self, spool_now: float | None, routes: list[tuple[Route, float]]
    ) -> tuple[list[Candidate], int, float | None]:
        mono = self._clock.monotonic()
        wall = self._clock.wall()
        settle = self._config.settle_seconds
        out: list[Candidate] = []
        waiting = 0
        wake: float | None = None
        names = list_incoming(self._layout.incoming)
        present = set(names)
        startup, self._first_listing = self._first_listing, False
        with self._lock:
            for gone in [n for n in self._seen if n not in present]:
                del self._seen[gone]
            for gone in [n for n in self._blocked if n not in present]:
                del self._blocked[gone]
            blocked = dict(self._blocked)
        self.uploads.retain(present)
        writers = WriterCheck()  # one /proc scan at most for the whole listing
        for name in names:
            queue_dir = queue_dir_of(name)
            base = name.rpartition("/")[2]
            if not is_candidate_name(base):
                continue
            if name in blocked and mono < blocked[name].next_try:
                wake = blocked[name].next_try if wake is None else min(wake, blocked[name].next_try)
                continue
            path = self._layout.incoming / name
            try:
                st = os.lstat(path)
            except FileNotFoundError:
                continue
            if not stat.S_ISREG(st.st_mode):
                # Symlinks, FIFOs, directories: complete as they are; claimed so that they
                # end in failed/ with a reason instead of lingering unexplained.
                out.append(
                    Candidate((0, 0, st.st_mtime, name), name, "incoming", id_from_filename(base), None, queue_dir)
                )
                continue
            sig = (st.st_ino, st.st_size, st.st_mtime_ns)
            seen = self._seen.get(name)
            if seen is None or seen.signature != sig:
                seen = _Seen(sig, mono, at_startup=startup or (seen is not None and seen.at_startup))
                self._seen[name] = seen
            quiet_for = mono - seen.first_seen
            age = None if spool_now is None else spool_now - st.st_mtime
            settled = quiet_for >= settle or (age is not None and age >= settle)
            if seen.parsed_for != sig:
                seen.spec, seen.invalid, seen.invalid_id = self._parse(path, base)
                seen.parsed_for = sig
            if seen.writer in (None, Writer.HELD):
                seen.writer = writers.check(path, st)
            verdict = judge(
                activity=self.uploads.activity(name),
                writer=seen.writer,
                local=self._local,
                empty=st.st_size == 0,
                settled=settled,
                quiet_for=max(quiet_for, age or 0.0),
                at_startup=seen.at_startup,
                closers_alive=self._closers_alive(st.st_dev, st.st_ino),
                settle=settle,
                recheck=self._config.poll_seconds,
            )
            if verdict.why != seen.why:
                seen.why = verdict.why
                log.debug("incoming/%s: %s", name, verdict.why)
            # A fast signal makes a parsable file complete; one that does not parse may
            # be an upload that has not finished, so only time declares it invalid.
            if not verdict.complete or (seen.invalid and not settled):
                waiting += 1
                after = verdict.recheck_after if verdict.complete is False else settle - quiet_for
                until = mono + max(0.0, after if after is not None else settle)
                wake = until if wake is None else min(wake, until)
                continue
            spec = seen.spec
            if spec is not None and spec.not_before is not None and spec.not_before > wall:
                until = mono + (spec.not_before - wall)
                wake = until if wake is None else min(wake, until)
                continue
            priority = spec.priority if spec is not None else 0
            order = max(st.st_mtime, spec.not_before or 0.0) if spec is not None else st.st_mtime
            job_id = spec.id if spec is not None else seen.invalid_id or id_from_filename(base)
            rank = 0  # an invalid job (or a queue conflict) is failed by whoever sees it first
            if spec is not None and not (queue_dir and spec.queue and spec.queue != queue_dir):
                job_route = route(queue_dir or spec.queue, spec.requires)
                routes.append((job_route, order))
                found = self._subscription.rank(job_route)
                if found is None:
                    continue  # another runner's job (status says when there is none)
                rank = found
            out.append(Candidate((rank, -priority, order, name), name, "incoming", job_id, None, queue_dir))
        return out, waiting, wake

    def _parse(self, path: Path, name: str) -> tuple[JobSpec | None, bool, str | None]:
        try:
            return parse_job(read_job_bytes(path, self._config.max_job_bytes), name, self._config), False, None
        except JobInvalid as exc:
            return None, True, exc.job_id
        except OSError:
            return None, True, None
        except Exception:
            # Whatever a file contains must not stop the scan: the run validates it again
            # and fails it with a reason.
            log.exception("unexpected error parsing %s", name)
            return None, True, None

    def _retry_info(self, name: str) -> _RetryInfo:
        """A retry entry's route (None: unreadable, any runner takes it to fail it) and the
        host its last attempt failed on; read once per entry (its name changes with every move)."""
        if name not in self._retry_routes:
            job_dir = self._layout.retry / name
            spec, _, _ = self._parse(job_dir / defaults.JOB_FILENAME, defaults.JOB_FILENAME)
            try:
                queue_dir: str | None = (job_dir / QUEUE_FILENAME).read_text(encoding="utf-8").strip() or None
            except OSError:
                queue_dir = None
            failed_on = None
            with contextlib.suppress(OSError):
                runs = read_runs(job_dir)
                # Only the host's own failures: a "runner-died" record names the recoverer.
                last = runs[-1] if runs else None
                if (
                    last is not None
                    and last.outcome == RETRY
                    and (last.error or {}).get("kind") not in NOT_THE_HOSTS_FAULT
                ):
                    failed_on = last.host
            job_route = None if spec is None else route(queue_dir or spec.queue, spec.requires)
            self._retry_routes[name] = _RetryInfo(job_route, failed_on)
        return self._retry_routes[name]

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

    def _scan_retry(
        self, routes: list[tuple[Route, float]], fs_now: float | None
    ) -> tuple[list[Candidate], float | None]:
        now = self._clock.wall()
        out: list[Candidate] = []
        wake: float | None = None
        names = list_names(self._layout.retry)
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
            info = self._retry_info(name)
            job_route = info.route
            elsewhere_until = due + self._config.retry_elsewhere_seconds
            if (
                info.failed_on == HOSTNAME
                and job_route is not None
                and now < elsewhere_until
                and self._served_elsewhere(job_route, fs_now)
            ):
                # It just failed on this host: leave it to another host for a while
                # (hosts.py); take it afterwards if nobody did.
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


@dataclass
class Claim:
    """A job this runner owns: its running/ directory, lock, heartbeat and cancel token."""

    job_dir: Path
    job_id: str
    uid: str
    token: str
    run: int
    source_name: str  # the file name the job's default id derives from
    started: float
    cancel: CancelToken
    lock: JobLock | None
    keep_scratch: bool = False  # a decided publish could not be carried out: recovery needs it
    job_file: JobFileState | None = None  # what this run validated (spoolrender.seal)
    sealed: bool = False  # an earlier run was decided: the job file may not change any more

    @property
    def key(self) -> str:
        return self.job_dir.name

    def release(self) -> None:
        if self.lock is not None:
            with contextlib.suppress(OSError):
                self.lock.release()
            self.lock = None


def claim(layout: SpoolLayout, candidate: Candidate, heartbeat: HeartbeatWriter, clock: Clock) -> Claim | None:
    """Try to take ``candidate``; None if another runner was faster (a normal outcome)."""
    if candidate.source == "incoming":
        return _claim_incoming(layout, candidate, heartbeat, clock)
    return _claim_retry(layout, candidate, heartbeat, clock)


def _claim_incoming(
    layout: SpoolLayout, candidate: Candidate, heartbeat: HeartbeatWriter, clock: Clock
) -> Claim | None:
    token = new_token()
    uid = token  # the first claim names the job for the rest of its life
    job_dir = layout.running / running_name(candidate.job_id, uid, token)
    cancel = CancelToken()
    # The directory, its lock and a first heartbeat exist *before* the job file is moved
    # in, so there is no moment at which running/ holds a job that no live lock covers.
    try:
        os.mkdir(job_dir)
    except OSError as exc:
        log.warning("could not claim %s: %s", candidate.name, exc)
        return None
    lock = None
    try:
        lock = acquire_job_lock(job_dir, token)
        started = clock.wall()
        heartbeat.add(_active_job(job_dir, token, 1, started, cancel))
        if candidate.queue_dir is not None:
            # The job's queue came from its drop directory: kept for its retries. Written
            # before the claim, into our own directory, so a failure here loses nothing.
            write_atomic(job_dir / QUEUE_FILENAME, candidate.queue_dir.encode(), durable=False)
        crash_point("claim-before-rename")
        # THE claim: rename is atomic, so of several runners exactly one moves the file;
        # the others get ENOENT. No fsync: until the job is decided, a claim lost in a
        # power cut only means the job is found in incoming/ again, or recovered.
        os.rename(layout.incoming / candidate.name, job_dir / defaults.JOB_FILENAME)
        crash_point("claim-after-rename")
    except (FileNotFoundError, ClaimLost, OSError) as exc:
        heartbeat.remove(token)
        if lock is not None:
            lock.release()
        shutil.rmtree(job_dir, ignore_errors=True)
        if isinstance(exc, FileNotFoundError | ClaimLost):
            # ENOENT for the job file: another runner was faster. ENOENT for our own
            # directory: we stalled past the lease and recovery cleared the claim; the
            # job file is still in incoming/ (or was re-queued), never lost.
            log.debug("lost the race for %s to another runner", candidate.name)
            return None
        if isinstance(exc, OSError) and exc.errno in (errno.EACCES, errno.EPERM, errno.EBUSY, errno.EXDEV):
            # Moving it will fail the same way next time (a directory of mode 555 cannot be
            # renamed: its ".." entry would change): let the scanner back off.
            hint = " (a directory must be writable to be moved)" if stat.S_ISDIR(_lmode(candidate, layout)) else ""
            raise ClaimBlocked(f"{exc.strerror}{hint}") from exc
        log.warning("could not claim %s: %s", candidate.name, exc)
        return None
    source = candidate.name.rpartition("/")[2]  # the default id derives from the file's own name
    return Claim(job_dir, candidate.job_id, uid, token, 1, source, started, cancel, lock)


def _lmode(candidate: Candidate, layout: SpoolLayout) -> int:
    try:
        return os.lstat(layout.incoming / candidate.name).st_mode
    except OSError:
        return 0


def _claim_retry(layout: SpoolLayout, candidate: Candidate, heartbeat: HeartbeatWriter, clock: Clock) -> Claim | None:
    assert candidate.uid is not None
    token = new_token()
    job_dir = layout.running / running_name(candidate.job_id, candidate.uid, token)
    cancel = CancelToken()
    try:
        # THE claim of a retry: the whole job directory moves in one atomic rename. Its
        # old heartbeat (if any) carries an older token than the new name, so nobody
        # takes the moment before our lock and heartbeat exist for a dead owner.
        os.rename(layout.retry / candidate.name, job_dir)
    except FileNotFoundError:
        log.debug("lost the race for retry %s to another runner", candidate.name)
        return None
    except OSError as exc:
        log.warning("could not claim retry %s: %s", candidate.name, exc)
        return None
    crash_point("retry-claim-after-rename")
    try:
        # Lock, records and heartbeat only ever *inside* the directory we renamed: if we
        # stalled here past the lease, another runner has moved the job on, and ENOENT
        # says so; nothing may recreate the directory as an empty phantom.
        lock = acquire_job_lock(job_dir, token)
        started = clock.wall()
        run = next_run_number(job_dir)
    except (ClaimLost, FileNotFoundError):
        log.info("retry %s was taken over by another runner while this one stalled claiming it", candidate.name)
        return None
    heartbeat.add(_active_job(job_dir, token, run, started, cancel))
    # The job's default id came from its original file name; the retry entry's name must
    # not replace it, so the id stands in for the file name from now on.
    filename = f"{candidate.job_id}.yaml"
    return Claim(job_dir, candidate.job_id, candidate.uid, token, run, filename, started, cancel, lock)


def _active_job(job_dir: Path, token: str, run: int, started: float, cancel: CancelToken) -> ActiveJob:
    return ActiveJob(
        job_dir, token, run, started, on_lost=lambda: cancel.cancel("lost"), on_cancel=lambda: cancel.cancel("user")
    )
