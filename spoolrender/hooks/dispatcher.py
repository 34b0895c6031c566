"""Completion hooks: delivered at least once, in the background, by any runner.

What a run owes is planned with the job's move (:mod:`spoolrender.hooks.plan`): a marker
in ``.spoolrender/hooks/pending/`` and the delivery state ``hook-<run>-<event>.json`` in
the job's directory (the record sent; per hook its attempts, last outcome, next try).
Every attempt also goes into the job's ``hooks.log``.

Delivery (:class:`HookDispatcher`) runs in threads of its own, so a slow or dead
receiver never delays a claim or a render, nor another hook: each delivery runs in a
thread of its own, at most ``HOOK_DELIVERIES_PER_HOOK`` per hook at once. A dispatcher
takes a due marker by renaming it into ``taken/`` (one rename: of several runners exactly
one gets it) when one of its hooks has a free slot, starts at once every due delivery
whose hook has one (the others wait in the marker for the next take), and when they have
ended renames the marker back to ``pending/`` under its next due time, or deletes it when
every hook has succeeded or given up. So a take lasts at most its longest hook's
``timeout_seconds`` (one absolute deadline per delivery, :mod:`spoolrender.hooks.delivery`).
A taken marker whose dispatcher died (its rename time, the ctime, is older than the
longest hook timeout plus the lease, measured on the spool filesystem's clock) is put
back by whoever sees it: at-least-once, so a receiver may see a delivery twice and should
use the delivery id to drop the repeat; a live dispatcher's take is never taken over.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from spoolrender import defaults
from spoolrender.config.hooks import HookSpec, read_secret
from spoolrender.config.spool_config import SpoolConfig
from spoolrender.hooks.delivery import Delivery, deliver
from spoolrender.hooks.plan import (
    Marker,
    marker_name,
    open_job_dir,
    parse_marker,
    pending_dir,
    state_filename,
    taken_dir,
)
from spoolrender.intake.owncopy import prepare_private_file
from spoolrender.spool.durable import write_json_atomic
from spoolrender.spool.io_trouble import is_spool_io
from spoolrender.spool.job_file_modes import private_file_mode
from spoolrender.spool.layout import SpoolLayout, list_names
from spoolrender.spool.trouble_log import TroubleLog

log = logging.getLogger(__name__)

# A marker whose job directory cannot be found (purged, or an operator moved it) is
# dropped after this long; a job between two renames is found again within seconds.
ORPHAN_AFTER_S = 3600.0
NOT_FOUND_RETRY_S = 2.0
HOOKS_LOG = "hooks.log"


@dataclass
class _Take:
    """A marker this dispatcher took, while the deliveries started with it run."""

    marker: Marker
    state: dict[str, Any]
    body: bytes
    meta: dict[str, str]
    due: list[float] = field(default_factory=list)  # next tries of its unfinished hooks
    running: int = 0
    lost: bool = False  # the job could not be found to save the state: look again soon
    lock: threading.Lock = field(default_factory=threading.Lock)


class HookDispatcher:
    """Delivers due hooks of the whole spool: a background thread takes markers, a thread per delivery delivers."""

    def __init__(
        self,
        layout: SpoolLayout,
        config: SpoolConfig,
        rng: random.Random,
        spool_now: Callable[[], float | None],
    ) -> None:
        self._layout = layout
        self._config = config
        self._rng = rng
        self._spool_now = spool_now
        # Read now: a secret file others can read stops the runner at start, with the fix.
        self._secrets = {name: read_secret(spec, config.spool) for name, spec in config.hooks.items()}
        # A take's deliveries run at once, each within its timeout: the longest bounds a take.
        self._stale_after = max((s.timeout_seconds for s in config.hooks.values()), default=0.0) + config.lease_seconds
        self._lock = threading.Lock()
        self._in_flight: Counter[str] = Counter()  # deliveries running, by hook
        self._stop = threading.Event()
        self._force = threading.Event()
        self._wake = threading.Event()
        self._trouble = TroubleLog(log, "hooks: looking for due deliveries in the spool")
        self._thread = threading.Thread(target=self._loop, name="hooks", daemon=True)

    def start(self) -> None:
        for directory in (pending_dir(self._layout), taken_dir(self._layout)):
            directory.mkdir(parents=True, exist_ok=True)
        self._thread.start()

    def wake(self) -> None:
        """A job changed state: look for due deliveries now."""
        self._wake.set()

    def running(self) -> bool:
        """Whether the dispatching thread runs (started and not ended)."""
        return self._thread.is_alive()

    def stop(self, *, force: bool = False) -> None:
        """Stop after one last pass over what is due now (``force``: after the delivery in hand)."""
        if force:
            self._force.set()
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive():
            # Bounded: what is not delivered by then stays on disk for the next runner.
            self._thread.join(1.0 if force else self._stale_after)

    def _loop(self) -> None:
        while True:
            waiting = False
            try:
                next_due, waiting = self.deliver_due()
            except OSError as exc:
                # Tried again each pass, but said once, reminded, and once when it is over:
                # an ERROR per pass flooded the log of a host cut off from its spool.
                self._trouble.failed(exc)
                next_due = time.time() + self._config.rescan_seconds
            else:
                self._trouble.succeeded()
            if self._stop.is_set() and (self._force.is_set() or not (waiting or self._busy())):
                return
            wait = self._config.rescan_seconds if next_due is None else next_due - time.time()
            self._wake.wait(max(0.0, min(wait, self._config.rescan_seconds)))
            self._wake.clear()

    def _busy(self) -> bool:
        with self._lock:
            return any(self._in_flight.values())

    def _free_slot(self, name: str) -> bool:
        with self._lock:
            return self._in_flight[name] < defaults.HOOK_DELIVERIES_PER_HOOK

    def deliver_due(self) -> tuple[float | None, bool]:
        """One pass: start every due delivery that has a free slot; the wall time of the
        next due one, and whether a due one waits for a slot (a delivery ending wakes us)."""
        self._return_abandoned()
        now = time.time()
        next_due: float | None = None
        waiting = False
        for name in sorted(list_names(pending_dir(self._layout))):
            marker = parse_marker(name)
            if marker is None:
                continue
            if marker.due > now:
                next_due = marker.due if next_due is None else min(next_due, marker.due)
                continue
            if self._force.is_set():
                break
            hooks = [n for n, s in self._config.hooks.items() if marker.event in s.events]
            if hooks and not any(self._free_slot(n) for n in hooks):
                waiting = True  # taken only when a delivery can start: a take never waits
                continue
            try:
                # THE take: one rename; of several dispatchers exactly one moves the marker.
                os.rename(pending_dir(self._layout) / name, taken_dir(self._layout) / name)
            except FileNotFoundError:
                continue
            due = self._process(marker)
            if due is not None:
                next_due = due if next_due is None else min(next_due, due)
        return next_due, waiting

    def _return_abandoned(self) -> None:
        """Put back markers taken by a dispatcher that died (its runner was killed)."""
        names = list_names(taken_dir(self._layout))
        if not names:
            return
        fs_now = self._spool_now()
        if fs_now is None:
            return
        for name in names:
            path = taken_dir(self._layout) / name
            try:
                # rename() stamped ctime with the filesystem's clock when it was taken.
                taken_at = os.lstat(path).st_ctime
            except FileNotFoundError:
                continue
            if fs_now - taken_at > self._stale_after:
                with contextlib.suppress(FileNotFoundError):
                    os.rename(path, pending_dir(self._layout) / name)
                    log.warning("hooks: %s was taken by a dispatcher that stopped; delivering it again", name)

    def _refile(self, marker: Marker, due: float) -> float:
        new = marker_name(due, marker.run, marker.event, marker.job_id, marker.uid)
        os.rename(taken_dir(self._layout) / marker.name, pending_dir(self._layout) / new)
        return due

    def _process(self, marker: Marker) -> float | None:
        """Deliver the due hooks of one taken marker; the next due time, or None when finished."""
        try:
            take = self._read_take(marker)
        except OSError:
            # The spool failed before any delivery started: the marker goes back now if it
            # can, rather than wait out a dead dispatcher's take (_return_abandoned).
            with contextlib.suppress(OSError):
                os.rename(taken_dir(self._layout) / marker.name, pending_dir(self._layout) / marker.name)
            raise
        if not isinstance(take, _Take):
            return take
        return self._start_deliveries(take)

    def _read_take(self, marker: Marker) -> _Take | float | None:
        """The taken marker's delivery state; else the marker filed again (its next due
        time) or dropped (None)."""
        taken = taken_dir(self._layout) / marker.name
        state_name = state_filename(marker.run, marker.event)
        with open_job_dir(self._layout, marker.job_id, marker.uid) as job_dir:
            try:
                state = None if job_dir is None else json.loads((job_dir.through / state_name).read_bytes())
            except FileNotFoundError:
                state = None
            except (OSError, ValueError) as exc:
                if is_spool_io(exc):
                    # The spool's condition (unreachable, I/O errors), not the state's: the
                    # marker is kept and tried again; dropped, its hooks were never sent.
                    raise
                where = job_dir.path / state_name if job_dir is not None else state_name
                log.error("hooks: unreadable delivery state %s (%s); dropping it", where, exc)
                taken.unlink(missing_ok=True)
                return None
        if state is None:
            fs_now = self._spool_now() or time.time()
            try:
                age = fs_now - os.lstat(taken).st_mtime  # created when the run was decided
            except FileNotFoundError:
                return None
            if age > ORPHAN_AFTER_S:
                log.warning("hooks: job %s.%s is gone (purged?); dropping its %s hooks", marker.job_id,
                            marker.uid, marker.event)  # fmt: skip
                taken.unlink(missing_ok=True)
                return None
            # Between two renames, or decided but not yet moved: look again shortly.
            return self._refile(marker, time.time() + NOT_FOUND_RETRY_S)
        body = json.dumps({**state["record"], "event": marker.event}, sort_keys=True, default=str).encode()
        meta = {"event": marker.event, "job_id": marker.job_id, "job_uid": marker.uid, "delivery": state["delivery"]}
        return _Take(marker, state, body, meta)

    def _start_deliveries(self, take: _Take) -> float | None:
        """Start each due delivery of ``take`` that has a free slot; the next due time, or
        None when the deliveries file the marker (or it is finished)."""
        state = take.state
        with take.lock:
            for name, hook_state in state["hooks"].items():
                if hook_state.get("delivered_at") or hook_state.get("gave_up_at"):
                    continue
                spec = self._config.hooks.get(name)
                if hook_state.get("next_at", 0) > time.time() or self._force.is_set():
                    take.due.append(float(hook_state.get("next_at", 0)))
                elif spec is None:
                    self._record(take, name, hook_state, None, None)
                elif not self._free_slot(name):
                    take.due.append(time.time())  # its slots are busy: at the next take
                else:
                    with self._lock:
                        self._in_flight[name] += 1
                    take.running += 1
                    args = (take, name, spec, hook_state)
                    threading.Thread(target=self._deliver, args=args, name=f"hook-{name}", daemon=True).start()
            if take.running:
                return None  # the last delivery to end files the marker and wakes the loop
            return self._finish(take)

    def _deliver(self, take: _Take, name: str, spec: HookSpec, hook_state: dict[str, Any]) -> None:
        """One delivery, in a thread of its own; then its record, and the marker's filing if last."""
        try:
            result = deliver(spec, take.body, take.meta, self._secrets.get(name))
        except Exception as exc:  # a bug in one delivery must not strand its marker in taken/
            result = Delivery(False, f"{type(exc).__name__}: {exc}")
        try:
            with take.lock:
                try:
                    self._record(take, name, hook_state, spec, result)
                except OSError as exc:
                    log.error("hooks: cannot save the delivery state of job %s (%s)", take.meta["job_id"], exc)
                    take.lost = True
                take.running -= 1
                if take.running == 0:
                    with contextlib.suppress(OSError):  # a marker left taken is put back later
                        self._finish(take)
        finally:
            with self._lock:
                self._in_flight[name] -= 1
            self._wake.set()

    def _finish(self, take: _Take) -> float | None:
        """File the marker once its take's deliveries have ended: the next due time, or None."""
        if take.lost:
            return self._refile(take.marker, time.time() + NOT_FOUND_RETRY_S)
        if take.due:
            return self._refile(take.marker, min(take.due))
        (taken_dir(self._layout) / take.marker.name).unlink(missing_ok=True)
        return None

    def _record(
        self, take: _Take, name: str, hook_state: dict[str, Any], spec: HookSpec | None, result: Delivery | None
    ) -> None:
        """Note one attempt (``take.lock`` held) and save the state at once: a crash re-sends
        at most the deliveries in hand."""
        due, line = self._attempt(name, hook_state, spec, result, take.meta)
        if due is not None:
            take.due.append(due)
        if not self._save(take.marker, take.state, line):
            # The job cannot be found now: what was just delivered may be sent once
            # more (at-least-once); the rest waits for the job to reappear.
            take.lost = True

    def _save(self, marker: Marker, state: dict[str, Any], line: str) -> bool:
        """Write the delivery state and a log line into the job's directory, wherever it is now."""
        for _ in range(5):
            # The job may move while we deliver (a retry claimed again, a run finishing):
            # the rename carries the old state along, so find it and write there.
            with open_job_dir(self._layout, marker.job_id, marker.uid) as job_dir:
                if job_dir is None:
                    return False
                mode = private_file_mode(job_dir.through)  # the payload's: no more readable than the job
                try:
                    write_json_atomic(job_dir.through / state_filename(marker.run, marker.event), state, mode=mode)
                except FileNotFoundError:
                    continue  # removed meanwhile (a purge)
                with contextlib.suppress(OSError):
                    # A hook's line can quote what it was sent (the job's props): no wider
                    # than the job's private copy (job_file_modes.private_file_mode).
                    log_file = prepare_private_file(job_dir.through / HOOKS_LOG, job_dir.through, mode)
                    with open(log_file, "a", encoding="utf-8") as fh:
                        fh.write(line + "\n")
                return True
        return False

    def _attempt(
        self,
        name: str,
        hook_state: dict[str, Any],
        spec: HookSpec | None,
        result: Delivery | None,
        meta: dict[str, str],
    ) -> tuple[float | None, str]:
        """The outcome of one delivery of hook ``name`` (None: not configured any more) into
        ``hook_state``; (the next try's time or None, a log line)."""
        line = f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} {meta['event']} {name} "
        if spec is None or result is None:
            hook_state.update(gave_up_at=time.time(), last="no longer configured in spoolrender.yaml")
            log.warning("hooks: job %s: hook %r is no longer configured; not delivering", meta["job_id"], name)
            return None, line + "not delivered: no longer configured"
        attempts = int(hook_state.get("attempts", 0)) + 1
        hook_state.update(attempts=attempts, last=result.detail)
        line += f"attempt {attempts}: "
        due = None
        wait = None if result.ok else spec.retry.retry_in(attempts, self._rng)
        if result.ok:
            hook_state["delivered_at"] = time.time()
            line += f"delivered ({result.detail})"
            log.info("hooks: job %s: %s hook %r delivered (%s)", meta["job_id"], meta["event"], name, result.detail)
        elif wait is None:  # its attempts used up
            hook_state["gave_up_at"] = time.time()
            line += f"failed ({result.detail}); giving up after {attempts} attempt(s)"
            log.error("hooks: job %s: %s hook %r failed %d time(s), giving up: %s", meta["job_id"], meta["event"],
                      name, attempts, result.detail)  # fmt: skip
        else:
            due = time.time() + wait
            hook_state["next_at"] = due
            line += f"failed ({result.detail}); next try in {due - time.time():.1f} s"
            log.warning("hooks: job %s: %s hook %r failed (attempt %d of %d): %s", meta["job_id"], meta["event"],
                        name, attempts, spec.attempts, result.detail)  # fmt: skip
        return due, line
