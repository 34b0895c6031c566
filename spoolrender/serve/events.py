"""Server-sent events for `spoolrender serve`: spool snapshots, taken periodically and diffed.

A layer of :mod:`spoolrender.serve` below the HTTP handler and beside the API; it reads
the spool through :mod:`spoolrender.ops.status` and the read model (:mod:`.readmodel`).

Runners keep no event log that a server could tail: the spool's directories are the only
truth, on every host that mounts them. So the hub takes the snapshot `status` takes every
``poll_seconds`` (only while somebody listens), compares it with the previous one and
turns the differences into events:

- ``state``: a job entered a state (``previous`` says where it was, or null for a new
  job; ``removed`` when it left the spool, e.g. purged). Done jobs carry their result,
  failed ones the kind and reason of the failure.
- ``progress``: a running job's progress, stage or staleness changed (the ``running``
  object of ``status --json``), or a split job's chunks (its ``split`` object); progress
  is held at the highest published for the run (:mod:`spoolrender.ops.progress_floor`).
- ``summary``: the ``status --json`` document (its retry queue cut to the first
  ``SUMMARY_RETRY`` entries; ``counts.retry`` has the total) whenever something in it
  changed, and every ``summary_seconds`` anyway so that ages stay fresh.

A job that changes twice between two snapshots shows up with its latest state: a client
always sees the final state, possibly not every intermediate one.

Every event gets a sequence number; the last ``HISTORY`` are kept, so a client that
reconnects with ``Last-Event-ID`` (EventSource does so by itself) misses nothing, and one
that fell further behind gets a fresh summary instead.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from spoolrender import defaults
from spoolrender.config.spool_config import SpoolConfig
from spoolrender.errors import SpoolrenderError
from spoolrender.ops.lookup import PATTERNS, Located, by_relevance, find_job, incoming_id
from spoolrender.ops.progress_floor import ProgressFloor
from spoolrender.ops.running_items import listed_running_info
from spoolrender.ops.split_progress import split_info
from spoolrender.ops.status import read_failure, read_status, spool_clock
from spoolrender.serve.readmodel import result_summary
from spoolrender.spool.layout import SpoolLayout, new_token
from spoolrender.spool.trouble_log import TroubleLog

log = logging.getLogger(__name__)

HISTORY = 1024
SUMMARY_RETRY = 50

Key = tuple[str, str]  # (state, entry name)
Ident = tuple[str, str | None]  # (job id, uid; None in incoming/)


@dataclass(frozen=True)
class Event:
    seq: int
    kind: str  # summary | state | progress
    job: str | None  # the job it is about (None for summaries)
    data: str  # JSON, one line

    def encode(self, boot: str) -> bytes:
        return f"id: {boot}-{self.seq}\nevent: {self.kind}\ndata: {self.data}\n\n".encode()


def encode_unsequenced(kind: str, payload: dict[str, Any]) -> bytes:
    """An event outside the sequence (a job's state when a client starts following it)."""
    return f"event: {kind}\ndata: {json.dumps(payload, default=str)}\n\n".encode()


@dataclass
class _Baseline:
    entries: dict[Key, Ident]
    progress: dict[str, tuple[Any, ...]]  # running entry -> (progress, stage, stale)
    summary: tuple[Any, ...]
    summary_at: float


def _state_payload(layout: SpoolLayout, state: str, name: str, job_id: str, previous: str | None) -> dict[str, Any]:
    payload: dict[str, Any] = {"id": job_id, "state": state, "previous": previous, "entry": f"{state}/{name}"}
    if state == "failed":
        payload["kind"], payload["reason"] = read_failure(layout.failed / name)
    elif state == "done":
        payload["result"] = result_summary(layout.done / name)
    return payload


def _summary_signature(status: dict[str, Any]) -> tuple[Any, ...]:
    # Everything a dashboard shows except ages, which change on every snapshot.
    return (
        tuple(sorted(status["counts"].items())),
        status["paused"],
        tuple((c.get("runner"), c.get("error"), c.get("retry_seconds")) for c in status.get("spool_io", [])),
        tuple((r["entry"], r["progress"], r["stage"], r["stale"], r["eta_seconds"]) for r in status["running"]),
        tuple(r["entry"] for r in status["retry"][:SUMMARY_RETRY]),
        tuple(f["entry"] for f in status["recent_failures"]),
        tuple((r.get("runner"), r.get("busy"), r.get("slots"), r.get("online")) for r in status["runners"]),
    )


class EventHub:
    """Polls the spool while anybody listens and keeps the recent events for the streams."""

    def __init__(self, config: SpoolConfig, *, poll_seconds: float, summary_seconds: float = 5.0) -> None:
        self.config = config
        self.layout = SpoolLayout(config.spool)
        self.poll_seconds = poll_seconds
        self.summary_seconds = summary_seconds
        self.boot = new_token()[:8]  # ids of another server's events are not ours to resume
        self._cond = threading.Condition()
        self._events: deque[Event] = deque(maxlen=HISTORY)
        self._seq = 0
        self._summary: Event | None = None
        self._subscribers = 0
        self._stop = threading.Event()
        self._poll_lock = threading.Lock()  # lock order: _poll_lock, then _cond
        self._baseline: _Baseline | None = None
        self._reset_after = 0  # events up to this one were followed by a gap (nobody polled)
        # Waiting files are parsed once for their id (an explicit `id:` may differ from the
        # file name); kept across baselines, so a big backlog is read once per server.
        self._incoming_ids: dict[str, str] = {}
        # Progress as published never falls back within a run (ops/progress_floor.py): the
        # server's requests (routes.py) publish through it too.
        self.floor = ProgressFloor()
        self._trouble = TroubleLog(log, "event stream: reading the spool", level=logging.WARNING)
        self._thread = threading.Thread(target=self._loop, name="spoolrender-events", daemon=True)

    # --- lifecycle ------------------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        with self._cond:
            self._cond.notify_all()
        if self._thread.is_alive():
            self._thread.join(timeout=10)

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()

    @contextmanager
    def subscription(self) -> Iterator[None]:
        """While held, the hub polls; the first subscriber takes a baseline at once."""
        with self._cond:
            self._subscribers += 1
            self._cond.notify_all()
        try:
            with self._poll_lock:
                if self._baseline is None:
                    self._poll_locked()
            yield
        finally:
            with self._poll_lock, self._cond:
                self._subscribers -= 1
                if self._subscribers == 0:
                    # Nobody listens: forget the baseline, so the next listener does not get
                    # a burst of everything that changed while nobody was looking; what
                    # changed meanwhile is no event, so nobody can resume across this gap.
                    self._baseline = None
                    self._reset_after = self._seq

    # --- what streams read ----------------------------------------------------------------

    def last_seq(self) -> int:
        with self._cond:
            return self._seq

    def latest_summary(self) -> Event:
        with self._poll_lock:
            if self._summary is None:
                self._poll_locked()
        with self._cond:
            assert self._summary is not None
            return self._summary

    def resume_point(self, last_event_id: str | None) -> int | None:
        """The sequence number to resume after, if ``last_event_id`` is ours, still kept, and
        the spool has been watched without a gap since (else the client starts afresh)."""
        boot, _, seq = (last_event_id or "").strip().partition("-")
        if boot != self.boot or not seq.isdigit() or len(seq) > 18:
            return None
        after = int(seq)
        with self._cond:
            oldest = self._events[0].seq if self._events else self._seq + 1
            return after if max(oldest - 1, self._reset_after + 1) <= after <= self._seq else None

    def wait(self, after: int, timeout: float) -> list[Event] | None:
        """Events after sequence ``after`` ([] on timeout); None if some are gone (resync)."""
        with self._cond:
            self._cond.wait_for(lambda: self._seq > after or self._stop.is_set(), timeout)
            if self._events and self._events[0].seq > after + 1:
                return None
            return [e for e in self._events if e.seq > after]

    def job_events(self, job_id: str) -> list[tuple[str, dict[str, Any]]]:
        """:func:`current_job_events`, its progress held as this hub publishes it."""
        events = current_job_events(self.config, job_id)
        for kind, payload in events:
            if kind == "progress":
                self.floor.hold_item(payload["state"], payload)
        return events

    # --- polling --------------------------------------------------------------------------

    def _loop(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._subscribers > 0 or self._stop.is_set())
            if self._stop.is_set():
                return
            try:
                self.poll()
            except (SpoolrenderError, OSError) as exc:
                # Said once, reminded, and once when over: a warning per poll (every
                # poll_seconds) flooded the log while the spool was unreachable.
                self._trouble.failed(exc)
            except Exception:  # the streams depend on this thread: log, keep going
                log.exception("error while reading the spool for the event stream")
            else:
                self._trouble.succeeded()
            self._stop.wait(self.poll_seconds)

    def poll(self) -> None:
        """Take a snapshot now and queue the events of what changed since the last one."""
        with self._poll_lock:
            self._poll_locked()

    def _identify(self, state: str, name: str) -> Ident:
        if state == "incoming":
            if name not in self._incoming_ids:
                self._incoming_ids[name] = incoming_id(
                    self.config, Located("", "incoming", self.layout.incoming / name, name)
                )
            return self._incoming_ids[name], None
        m = PATTERNS[state].fullmatch(name)
        return (m.group("id"), m.group("uid")) if m else (name, None)

    def _poll_locked(self) -> None:
        snap, status = read_status(self.config)
        self.floor.hold_status(status)
        old = self._baseline
        known = old.entries if old is not None else {}
        entries: dict[Key, Ident] = {}
        for state in defaults.STATE_DIRS:
            for name in snap.names[state]:
                key = (state, name)
                entries[key] = known.get(key) or self._identify(state, name)
        waiting = set(snap.names["incoming"])
        self._incoming_ids = {n: i for n, i in self._incoming_ids.items() if n in waiting}
        events: list[tuple[str, str | None, dict[str, Any]]] = []
        if old is not None:
            events += self._state_changes(old.entries, entries)
        progress: dict[str, tuple[Any, ...]] = {}
        for r in status["running"]:
            progress[r["entry"]] = (r["progress"], r["stage"], r["stale"])
            if old is not None and old.progress.get(r["entry"]) != progress[r["entry"]]:
                events.append(("progress", r["id"], {**r, "state": "running"}))
        for r in status["split"]:  # a job rendered in chunks: its chunks' progress (spoolrender.chunks)
            progress[r["entry"]] = (r["progress"], r["chunks"] and tuple(r["chunks"].values()), False)
            if old is not None and old.progress.get(r["entry"]) != progress[r["entry"]]:
                events.append(("progress", r["id"], {**r, "state": "split"}))
        signature = _summary_signature(status)
        now = time.monotonic()
        send_summary = old is None or signature != old.summary or now - old.summary_at >= self.summary_seconds
        if send_summary:
            summary = {**status, "retry": status["retry"][:SUMMARY_RETRY]}
            events.append(("summary", None, summary))
        self._baseline = _Baseline(
            entries=entries,
            progress=progress,
            summary=signature,
            summary_at=now if send_summary or old is None else old.summary_at,
        )
        with self._cond:
            for kind, job, payload in events:
                self._seq += 1
                event = Event(self._seq, kind, job, json.dumps(payload, default=str))
                self._events.append(event)
                if kind == "summary":
                    self._summary = event
            if events:
                self._cond.notify_all()

    def _state_changes(
        self, before: dict[Key, Ident], after: dict[Key, Ident]
    ) -> list[tuple[str, str | None, dict[str, Any]]]:
        vanished: dict[str, list[tuple[str, str | None]]] = {}
        for key, (job_id, uid) in before.items():
            if key not in after:
                vanished.setdefault(job_id, []).append((key[0], uid))
        appeared = sorted(
            (k for k in after if k not in before),
            key=lambda k: (after[k][0], defaults.STATE_DIRS.index(k[0])),
        )
        # A claim makes its running/ entry before it renames the job file in: a poll between
        # the two sees the job in both places. Its waiting file is leaving (claimed), so the
        # running entry came from it, and the file's vanishing later is no removal.
        waiting_ids = {job_id for (state, _), (job_id, uid) in after.items() if state == "incoming" and uid is None}
        running_ids = {job_id for (state, _), (job_id, _uid) in after.items() if state == "running"}
        events: list[tuple[str, str | None, dict[str, Any]]] = []
        moved_ids = set()
        for state, name in appeared:
            job_id, uid = after[(state, name)]
            gone = vanished.get(job_id, [])
            # Where it came from: the same uid, else a waiting file of that id (no uid yet).
            previous = next((s for s, u in gone if u == uid and uid is not None), None) or next(
                (s for s, u in gone if u is None), None
            )
            if previous is None and state == "running" and job_id in waiting_ids:
                previous = "incoming"  # a claim half-way
            moved_ids.add(job_id)
            events.append(("state", job_id, _state_payload(self.layout, state, name, job_id, previous)))
        for (state, name), (job_id, uid) in sorted(before.items()):
            if (state, name) in after or job_id in moved_ids:
                continue
            if state == "incoming" and uid is None and job_id in running_ids:
                continue  # the claim seen half-way, already told as its move into running/
            payload = {"id": job_id, "state": "removed", "previous": state, "entry": f"{state}/{name}"}
            events.append(("state", job_id, payload))
        return events


def current_job_events(config: SpoolConfig, job_id: str) -> list[tuple[str, dict[str, Any]]]:
    """Where a job is now, as the events a follower would have seen: its state, its progress."""
    layout = SpoolLayout(config.spool)
    out: list[tuple[str, dict[str, Any]]] = []
    # A running job whose run ends between the lookup and its heartbeat read is looked up
    # again: read after its move, it would be told as a STALE job without progress.
    for _ in range(defaults.MOVED_READ_ATTEMPTS):
        found = find_job(config, job_id)
        if not found:
            return []
        current = by_relevance(found)[0]
        payload = _state_payload(layout, current.state, current.path.name, job_id, None)
        out = [("state", {**payload, "initial": True})]
        if current.state == "running":
            now, fs_now = spool_clock(layout)
            info = listed_running_info(layout, current.path.name, now=now, fs_now=fs_now,
                                       lease_seconds=config.lease_seconds)  # fmt: skip
            if info is None:
                continue
            out.append(("progress", {**info, "state": "running"}))
        elif current.state == "split":
            # A split job's chunks move on while it stays in split/: a follower that subscribed
            # after its page's first read (or reconnected) gets no state event for a chunk that
            # finished in between, so it is told where the chunks are now (the page then reads
            # its chunk table again). Without it the page shows a finished chunk as running until
            # some other chunk's progress changes, which may be never.
            now, _ = spool_clock(layout)
            split = split_info(layout, config.output_root, current.path.name, now=now)
            out.append(("progress", {**split, "state": "split"}))
        return out
    return out
