"""Finding claimable jobs: what a scan of incoming/ and retry/ offers to claim, in order.

The directory listing is the truth (events from watchdog only wake the runner early).
A scan yields the candidates in queue order: higher ``priority`` first, then earlier
``not_before``/arrival (incoming) or due time (retry), then name.

Uploads in progress are never claimed: names starting with ``.`` or ending in ``.part``,
``.tmp`` or ``~`` are skipped, and any other file is claimed only once it is complete,
as :mod:`spoolrender.intake.completeness` judges from the local writer check, inotify's per-name
bookkeeping and the settle time (timed on our monotonic clock, or measured against the
spool filesystem's own clock). A file that does not parse is only declared invalid once
settled by time, because an upload still in progress does not parse either. An entry
that cannot be claimed (a directory without write permission cannot be moved: EACCES)
is tried again with a growing delay, and the runner reports why. Retry entries are
scanned by :mod:`spoolrender.intake.retry_scan`; the claim itself is :mod:`spoolrender.intake.claim`.
"""

from __future__ import annotations

import logging
import os
import stat
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from spoolrender import defaults
from spoolrender.config.queues import Route, Subscription, incoming_view, queue_dir_of, route, waiting_groups
from spoolrender.config.spool_config import SpoolConfig
from spoolrender.intake.candidates import Candidate, ScanResult, parse_for_scan
from spoolrender.intake.completeness import UploadTracker, judge
from spoolrender.intake.retry_scan import RetryScan
from spoolrender.intake.upload_writers import Writer, WriterCheck, lease_probe
from spoolrender.jobfile import JobSpec, id_from_filename, is_candidate_name
from spoolrender.spool.clock import Clock
from spoolrender.spool.held_dirs import HeldDir
from spoolrender.spool.layout import SpoolLayout
from spoolrender.spool.netcache import fresh_attributes
from spoolrender.spool.queue_dirs import IncomingView, candidate_dir
from spoolrender.spool.spooldir import SpoolPathRefused

log = logging.getLogger(__name__)


@dataclass
class _Seen:
    """What we know about one file in incoming/ between scans."""

    signature: tuple[int, int, int]  # inode, size, mtime_ns
    first_seen: float  # monotonic time the signature was first seen
    spec: JobSpec | None = None
    invalid: bool = False
    invalid_id: str | None = None  # the id an invalid file is filed under (its readable `id:`)
    parsed_for: tuple[int, int, int] | None = None
    inode: int | None = None  # the file the parse read, and the sha256 of its bytes
    sha256: str | None = None
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
    source: str = "incoming"  # where it is listed ("incoming" or "retry"): forgotten once gone from there


@dataclass(frozen=True)
class _Listing:
    """One listing of incoming/ and what every name in it is judged with."""

    view: IncomingView
    mono: float  # the monotonic time of the listing
    now: float  # the time not_before is judged at (the spool filesystem's clock if known)
    spool_now: float | None  # the spool filesystem's clock, if known
    startup: bool  # the scanner's first listing
    blocked: dict[str, Blocked]  # entries whose claim failed, as the listing began
    writers: WriterCheck
    routes: list[tuple[Route, float]]  # filled in: every listed job's route and order


@dataclass(frozen=True)
class _NotYet:
    """A listed entry to look at again at ``until`` (monotonic); ``upload``: one still
    being uploaded (counted as waiting)."""

    until: float
    upload: bool = False


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
        held_incoming: HeldDir | None = None,
    ) -> None:
        self._layout = layout
        # The runner's incoming/, held open (held_dirs.HeldDir): the check before each claim
        # goes through it instead of opening incoming/ once more per job.
        self._held_incoming = held_incoming
        self._config = config
        self._clock = clock
        self._local = local  # the spool is on a local filesystem: no writers elsewhere
        self._closers_alive = closers_alive or (lambda dev, ino: False)
        self._seen: dict[str, _Seen] = {}
        self.uploads = UploadTracker()
        self._blocked: dict[str, Blocked] = {}
        self._refused_queues: dict[str, str] = {}  # queue dirs not honoured, and why
        self._first_listing = True
        self._lock = threading.Lock()
        self._arrived = True
        # The last listing's candidates in queue order, by name: a dict keeps the order and
        # forgets a claimed one in O(1) (a list rebuilt per claim was O(n^2) on 10k jobs).
        self._cached: dict[str, Candidate] | None = None
        self._last = ScanResult([], 0, None)
        self._listed_at = 0.0
        self._subscription = Subscription(config.queues, frozenset(config.tags))
        self._retry = RetryScan(layout, config, clock, self._subscription, self._lock)

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
        candidate's job file open for writing, or (a network filesystem) has the server
        seen a write that this client's caches hid? Then it stays where it is, waiting."""
        try:
            with candidate_dir(self._layout, candidate, self._held_incoming) as (where, base):
                # Through the held descriptor (spoolrender.spool.spooldir): a queue directory
                # swapped for a symlink since the listing leads nowhere else.
                if candidate.source == "retry" and where.try_stat(base) is None:
                    base = defaults.SUBMITTED_FILENAME  # a discarded run's: its claim copies this
                path = where.anchored(base)
                if candidate.source == "incoming" and not self._local and self._changed_on_server(candidate.name, path):
                    return True
                # The lease alone: ~0.1 ms per claim. Where it cannot decide (another user's
                # file under an unprivileged runner, a filesystem without leases) the
                # listing's /proc verdict, at most one listing old, stands.
                if lease_probe(path) is not Writer.HELD:
                    return False
        except (OSError, SpoolPathRefused):
            return False  # gone, or its directory swapped: the claim finds out and says why
        log.info("not claiming %s/%s yet: a local process still writes it", candidate.source, candidate.name)
        with self._lock:
            if self._cached is not None:
                self._cached.pop(candidate.name, None)
            seen = self._seen.get(candidate.name)
            if seen is not None:
                seen.writer = Writer.HELD
            if candidate.source == "retry":
                self._retry.hold(candidate.name)
            self._arrived = True  # list again: the next listing re-checks it
        return True

    def _changed_on_server(self, name: str, path: Path) -> bool:
        """Settled by attributes this client may have cached (NFS ``actimeo``, FUSE
        ``attr_timeout``, sshfs's ``dir_cache``): does the server still have them?

        One forced revalidation per claim (spoolrender.spool.netcache), not one per file and
        listing. Unchanged since the signature was first seen: it was fetched no later
        than that, so the file has been quiet at least as long as the settle check
        counted. Changed: another host is still writing; it settles again from now.
        """
        with self._lock:
            seen = self._seen.get(name)
        if seen is None:  # not a regular file: claimed and failed with a reason
            return False
        try:
            fresh = fresh_attributes(path)
        except OSError:  # gone (another host claimed it) or not a regular file: the claim says
            return False
        if fresh.signature == seen.signature:
            return False
        log.info(
            "not claiming incoming/%s yet: the server has %d bytes, this host's cache said %d; "
            "another host is still writing it", name, fresh.size, seen.signature[1],
        )  # fmt: skip
        with self._lock:
            self._seen[name] = _Seen(fresh.signature, self._clock.monotonic(), at_startup=seen.at_startup)
            if self._cached is not None:
                self._cached.pop(name, None)
            self._arrived = True  # list again: it settles from now
        return True

    def claim_failed(self, name: str, reason: str) -> None:
        """The claim of ``name`` failed (not a lost race): back off, 1 s doubling to 5 min."""
        with self._lock:
            old = self._blocked.get(name)
            failures = 1 if old is None else old.failures + 1
            delay = defaults.BLOCKED_CLAIM_RETRY.delay(failures)
            next_try = self._clock.monotonic() + delay
            # Where the entry was offered from (the listing's candidate; else as blocked before).
            offered = None if self._cached is None else self._cached.get(name)
            source = offered.source if offered is not None else "incoming" if old is None else old.source
            self._blocked[name] = Blocked(reason, failures, next_try, source)
            if source == "retry":
                # The retry/ listing skips it until then (the incoming/ one checks _blocked):
                # else every listing offered it again, its failures never counted up.
                self._retry.hold(name, next_try)
            if self._cached is not None and self._cached.pop(name, None) is not None:
                # The reused listing must end when the entry may be tried again, as a fresh
                # listing's wake would say; else it came back only at the next full listing
                # (rescan_seconds, or an arrival), not after its backoff.
                wake = self._last.next_wake
                self._last = replace(self._last, next_wake=next_try if wake is None else min(wake, next_try))
        if failures == 1 or failures % 10 == 0:
            log.warning(
                "cannot claim %s/%s: %s (tried %d times; next try in %g s)", source, name, reason, failures, delay
            )

    def blocked(self) -> dict[str, str]:
        """Entries that cannot be claimed now, and why (for the runner's beacon/status):
        also the queue directories not honoured (``q1/``: spoolrender.spool.queue_dirs)."""
        with self._lock:
            refused = {f"{name}/": why for name, why in self._refused_queues.items()}
            return refused | {name: b.reason for name, b in self._blocked.items()}

    def blocked_in(self) -> dict[str, str]:
        """The directory (``incoming`` or ``retry``) of each entry :meth:`blocked` names: a
        retry/ entry whose claim failed is held blocked until its next try too (RetryScan.hold)."""
        with self._lock:
            refused = {f"{name}/": "incoming" for name in self._refused_queues}
            return refused | {name: b.source for name, b in self._blocked.items()}

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
        incoming, waiting, wake = self._scan_incoming(fs_now, routes)
        retry, retry_wake = self._retry.scan(routes, fs_now)
        with self._lock:
            for gone in [n for n, b in self._blocked.items() if b.source == "retry" and n not in self._retry.listed]:
                del self._blocked[gone]  # claimed, or moved on (a retry entry's name changes with every move)
        wakes = [w for w in (wake, retry_wake) if w is not None]
        result = ScanResult(sorted(incoming + retry), waiting, min(wakes) if wakes else None, waiting_groups(routes))
        with self._lock:  # with the listing it describes: claim_failed amends both at once
            self._cached = {c.name: c for c in result.candidates}
            self._last = result
            self._listed_at = now
        return result

    def _scan_incoming(
        self, spool_now: float | None, routes: list[tuple[Route, float]]
    ) -> tuple[list[Candidate], int, float | None]:
        with incoming_view(self._layout.incoming) as view:
            self._note_refused(view.refused)
            return self._scan_listed(view, spool_now, routes)

    def _note_refused(self, refused: dict[str, str]) -> None:
        for name, why in refused.items():
            if self._refused_queues.get(name) != why:
                log.warning("not claiming from %s", why)
        with self._lock:
            self._refused_queues = dict(refused)

    def _scan_listed(
        self, view: IncomingView, spool_now: float | None, routes: list[tuple[Route, float]]
    ) -> tuple[list[Candidate], int, float | None]:
        mono = self._clock.monotonic()
        # not_before is judged on the spool filesystem's clock, like retry due times.
        now = self._clock.wall() if spool_now is None else spool_now
        names = view.names
        startup, self._first_listing = self._first_listing, False
        blocked = self._forget_unlisted(set(names))
        writers = WriterCheck()  # one /proc scan at most for the whole listing
        listing = _Listing(view, mono, now, spool_now, startup, blocked, writers, routes)
        out: list[Candidate] = []
        waiting = 0
        wake: float | None = None
        for name in names:
            offered = self._offer(listing, name)
            if isinstance(offered, Candidate):
                out.append(offered)
            elif offered is not None:
                if offered.upload:
                    waiting += 1
                wake = offered.until if wake is None else min(wake, offered.until)
        return out, waiting, wake

    def _forget_unlisted(self, present: set[str]) -> dict[str, Blocked]:
        """Forget what is known of names gone from incoming/; the blocked entries left."""
        with self._lock:
            for gone in [n for n in self._seen if n not in present]:
                del self._seen[gone]
            for gone in [n for n, b in self._blocked.items() if b.source == "incoming" and n not in present]:
                del self._blocked[gone]
            blocked = dict(self._blocked)
        self.uploads.retain(present)
        return blocked

    def _offer(self, listing: _Listing, name: str) -> Candidate | _NotYet | None:
        """One listed name: its candidate, when to look at it again, or None (no job file's
        name, gone, another runner's job)."""
        queue_dir = queue_dir_of(name)
        base = name.rpartition("/")[2]
        if not is_candidate_name(base):
            return None
        if name in listing.blocked and listing.mono < listing.blocked[name].next_try:
            return _NotYet(listing.blocked[name].next_try)
        # Stat and read through the listing's descriptors, never by path again.
        path = listing.view.anchored(name)
        st = listing.view.stat(name)
        if st is None:
            return None
        if not stat.S_ISREG(st.st_mode):
            # Symlinks, FIFOs, directories: complete as they are; claimed so that they
            # end in failed/ with a reason instead of lingering unexplained.
            return Candidate((0, 0, st.st_mtime, name), name, "incoming", id_from_filename(base), None, queue_dir)
        settle = self._config.settle_seconds
        seen = self._seen_as(listing, name, path, base, st)
        if seen.writer in (None, Writer.HELD):
            seen.writer = listing.writers.check(path, st)
        quiet_for = listing.mono - seen.first_seen
        age = None if listing.spool_now is None else listing.spool_now - st.st_mtime
        settled = quiet_for >= settle or (age is not None and age >= settle)
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
            after = verdict.recheck_after if verdict.complete is False else settle - quiet_for
            return _NotYet(listing.mono + max(0.0, after if after is not None else settle), upload=True)
        return self._ranked(listing, name, base, queue_dir, st, seen)

    def _seen_as(self, listing: _Listing, name: str, path: Path, base: str, st: os.stat_result) -> _Seen:
        """What is known of the regular file ``name`` now: when its signature was first
        seen, and its parse, redone only when the signature changed."""
        sig = (st.st_ino, st.st_size, st.st_mtime_ns)
        seen = self._seen.get(name)
        if seen is None or seen.signature != sig:
            seen = _Seen(sig, listing.mono, at_startup=listing.startup or (seen is not None and seen.at_startup))
            self._seen[name] = seen
        if seen.parsed_for != sig:
            parsed = parse_for_scan(self._config, path, base)
            seen.spec, seen.invalid, seen.invalid_id = parsed.spec, parsed.invalid, parsed.invalid_id
            seen.inode, seen.sha256 = parsed.inode, parsed.sha256
            seen.parsed_for = sig
        return seen

    def _ranked(
        self, listing: _Listing, name: str, base: str, queue_dir: str | None, st: os.stat_result, seen: _Seen
    ) -> Candidate | _NotYet | None:
        """A complete file's place in the queue order; not yet if its not_before is ahead,
        None if its route is another runner's."""
        spec = seen.spec
        if spec is not None and spec.not_before is not None and spec.not_before > listing.now:
            return _NotYet(listing.mono + (spec.not_before - listing.now))
        priority = spec.priority if spec is not None else 0
        order = max(st.st_mtime, spec.not_before or 0.0) if spec is not None else st.st_mtime
        job_id = spec.id if spec is not None else seen.invalid_id or id_from_filename(base)
        rank = 0  # an invalid job (or a queue conflict) is failed by whoever sees it first
        if spec is not None and not (queue_dir and spec.queue and spec.queue != queue_dir):
            job_route = route(queue_dir or spec.queue, spec.requires)
            listing.routes.append((job_route, order))
            found = self._subscription.rank(job_route)
            if found is None:
                return None  # another runner's job (status says when there is none)
            rank = found
        key = (rank, -priority, order, name)
        return Candidate(key, name, "incoming", job_id, None, queue_dir, seen.inode, seen.sha256)
