"""The runner: claims jobs into free slots, keeps them alive, recovers the dead, drains.

One main loop decides everything from directory listings; watchdog events and finished
jobs only wake it early (a missed event costs at most ``rescan_seconds``). Each slot
runs one job at a time in its own thread with its own, long-lived renderers; one
heartbeat thread refreshes every running job's heartbeat.

Stopping: the first SIGTERM/SIGINT stops claiming and gives running jobs
``grace_seconds`` to finish; then they are cancelled and go back to retry/ without using
an attempt. A second signal cancels at once.

Limits, for workers that a supervisor recycles: ``max_jobs`` stops claiming after that
many claims and exits once those jobs have finished (never cutting one short);
``max_runtime`` stops like a SIGTERM once that much time has passed, so the runner's
life is bounded by ``max_runtime + grace_seconds``. ``RunSummary.stopped_by`` says which
ended the run.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import functools
import logging
import random
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

from spoolrender import defaults
from spoolrender.chunks.sweep import SplitSweeper
from spoolrender.config.spool_config import SpoolConfig
from spoolrender.core.version import __version__
from spoolrender.core.vocabulary import CancelReason
from spoolrender.errors import ClaimBlocked, SpoolIOError, SpoolLayoutError, SpoolrenderError
from spoolrender.hosts.blocks import BlockState, ProbeSlot, block_of
from spoolrender.intake.claim import Claim, SpoolScanner, claim
from spoolrender.intake.upload_closers import CloserTracker
from spoolrender.intake.watch import SpoolWatcher, choose_watch_mode, is_network_filesystem
from spoolrender.lifecycle.recovery import Recoverer
from spoolrender.lifecycle.transitions import log_transition
from spoolrender.ops.control import is_paused
from spoolrender.ops.metrics import RunnerMetrics
from spoolrender.ops.retention import RetentionWorker
from spoolrender.ops.runner_view import RECENT_FAILURES_SHOWN, FailureView, RunnerView, SlotView, eta_seconds
from spoolrender.renderers.base import RendererFactory
from spoolrender.renderers.registry import renderer_factory
from spoolrender.run.executor import JobExecutor
from spoolrender.run.split_runs import CHUNK_OUTCOME_PREFIX
from spoolrender.runner.capacity import Capacity, plan_capacity
from spoolrender.runner.fscheck import check_filesystem
from spoolrender.runner.slot_threads import SlotThread
from spoolrender.runner.thread_check import ThreadCheck
from spoolrender.spool.beacons import (
    LIVENESS_DIR,
    expire_runners,
    hooks_probe_path,
    new_runner_id,
    probe_path,
    remove_beacon,
    write_beacon,
)
from spoolrender.spool.chunk_names import is_chunk_name
from spoolrender.spool.clock import Clock, SpoolClock, SystemClock, spool_now
from spoolrender.spool.durable import set_fsync
from spoolrender.spool.heartbeat import HOSTNAME, HeartbeatWriter, LivenessTracker
from spoolrender.spool.held_dirs import HeldSpoolDirs
from spoolrender.spool.io_trouble import SpoolIOCondition, is_spool_io
from spoolrender.spool.layout import SpoolLayout
from spoolrender.spool.publish import SCRATCH_DIR
from spoolrender.spool.trusted_dirs import shared_root_warning

if TYPE_CHECKING:
    from spoolrender.hooks.dispatcher import HookDispatcher

log = logging.getLogger(__name__)


@dataclass
class _Active:
    claim: Claim
    done: threading.Event  # set by the slot's thread once the run has ended (SlotThread)
    slot: int


@dataclass
class RunSummary:
    claimed: int = 0
    done: int = 0
    failed: int = 0
    retried: int = 0
    lost: int = 0
    requeued: int = 0
    split: int = 0  # runs that split a job into chunks (or sent it back to wait for them)
    chunks: int = 0  # runs of chunks (spoolrender.chunks), whatever their outcome
    paused: bool = False
    blocked: bool = False  # this host was blocked for failing many jobs (hosts/health.py)
    # Why the run ended: "drained", "signal", "max-jobs", "max-runtime" or "spool-io" (a
    # drain that found the spool's filesystem failing: full, read-only...).
    stopped_by: str = "signal"

    def describe(self) -> str:
        """One line for people: ``drained: 48 claimed, 45 done, 1 to retry, 0 put back, 2 failed``."""
        text = (
            f"{self.stopped_by}: {self.claimed} claimed, {self.done} done, {self.retried} to retry, "
            f"{self.requeued} put back, {self.failed} failed"
        )
        extra = [f"{n} {what}" for n, what in ((self.lost, "lost to another runner"), (self.split, "split into chunks"),
                                                (self.chunks, "chunk runs")) if n]  # fmt: skip
        text += "".join(f", {e}" for e in extra)
        if self.paused:
            text += " (spool paused)"
        if self.blocked:
            text += " (this host blocked)"
        return text


class Runner:
    def __init__(
        self,
        config: SpoolConfig,
        *,
        drain: bool = False,
        clock: Clock | None = None,
        rng: random.Random | None = None,
        make_renderer: RendererFactory | None = None,
        capacity: Capacity | None = None,
        metrics_textfile: Path | None = None,
        runner_name: str | None = None,
        max_jobs: int | None = None,
        max_runtime: float | None = None,
    ) -> None:
        if max_jobs is not None and max_jobs < 1:
            raise SpoolrenderError(f"max_jobs must be at least 1, got {max_jobs}")
        if max_runtime is not None and not max_runtime > 0:
            raise SpoolrenderError(f"max_runtime must be more than 0 seconds, got {max_runtime}")
        self.config = config
        self.layout = SpoolLayout(config.spool)
        self.layout.check()
        set_fsync(config.fsync)
        try:
            config.output_root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise SpoolLayoutError(f"cannot create output root {config.output_root}: {exc.strerror}") from exc
        self.drain = drain
        self.max_jobs = max_jobs
        self.max_runtime = max_runtime
        self.clock = clock or SystemClock()
        # Full disk, read-only, I/O errors (spool/io_trouble.py): shared by every thread of this runner.
        self._spool_io = SpoolIOCondition(self.clock, HOSTNAME)
        self._check_filesystems()
        self._started_mono = self.clock.monotonic()
        self._blocked: str | None = None  # why this host is blocked (hosts/health.py), while it is
        self._beacon_told: float | None = None  # the spool I/O trouble the last beacon told of
        self._block_held: str | None = None  # why this host's block is not applied (hosts/blocks.py)
        self._probe_slot = ProbeSlot(self.layout, HOSTNAME)
        self._probe_job: str | None = None  # the key of this runner's probe job while it runs
        self._waiting: list[dict[str, object]] = []  # the last scan's waiting jobs by route (beacon)
        self.rng = rng or random.Random()
        self.capacity = capacity or plan_capacity(config)
        self.runner_id = new_runner_id(id(self))
        self.summary = RunSummary()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._force = threading.Event()
        # Who closed an upload, and whether it still runs (fanotify; root, inotify only).
        self._closers = CloserTracker(on_change=self._writer_exited, settle_seconds=config.settle_seconds)
        # On a network filesystem job files are read past the client's caches (spool/netcache.py).
        self._uncached = is_network_filesystem(config.spool)
        # incoming/ and running/ held open for the runner's life (each use checks that the
        # name still is the directory held: held_dirs.HeldDir), not opened per job.
        self._held = HeldSpoolDirs(self.layout)
        self._scanner = SpoolScanner(
            self.layout,
            config,
            self.clock,
            local=not self._uncached,
            closers_alive=self._closers.alive,
            held_incoming=self._held.incoming,
        )
        self._heartbeat = HeartbeatWriter(self.clock, config.heartbeat_seconds, self.runner_id, self._spool_io)
        # Observations shared by every process on this host, so that short cron drains
        # add up to a lease (see LivenessTracker).
        tracker = LivenessTracker(self.clock, self.layout.private / LIVENESS_DIR / f"{HOSTNAME}.json")
        self._probe = probe_path(self.layout, self.runner_id)
        self._spool_clock = SpoolClock(self._probe, self.clock)
        self._recoverer = Recoverer(
            self.layout, config, self.clock, self.rng, tracker, spool_io=self._spool_io, spool_clock=self._spool_clock
        )
        self._split_sweeper = SplitSweeper(self.layout, config, self.clock)
        # keep_done and the other limits: purged in the background, one runner per spool at a time.
        self._retention = RetentionWorker(config, self.runner_id, on_purged=self._purged)
        factory = make_renderer or renderer_factory(config)
        self.metrics = RunnerMetrics(runner_name or HOSTNAME, self.capacity.slots)
        self._executors = [
            JobExecutor(
                self.layout,
                config,
                self.clock,
                self.rng,
                self._heartbeat,
                factory,
                self.capacity.threads_per_job,
                self.metrics.render_cache,
                spool_io=self._spool_io,
                spool_clock=self._spool_clock,
            )
            for _ in range(self.capacity.slots)
        ]
        self._free = list(range(self.capacity.slots))
        self._slots = [
            SlotThread[Claim](f"slot-{slot}", functools.partial(self._run_slot, slot), self._slot_finished)
            for slot in range(self.capacity.slots)
        ]
        self._failures: collections.deque[FailureView] = collections.deque(maxlen=RECENT_FAILURES_SHOWN)
        # Each warning this runner's runs went ahead despite (mixed Remotion versions...),
        # with the job that last had it, newest last: told in the beacon for `status`.
        self._warnings: dict[str, str] = {}
        self._active: dict[str, _Active] = {}
        self._lock = threading.Lock()
        self.watch_mode = choose_watch_mode(config.watch, config.spool)
        self._watcher: SpoolWatcher | None = None  # while run() runs
        self._thread_check = ThreadCheck()
        self._metrics_textfile = metrics_textfile
        # Completion hooks are delivered by a thread of their own: a slow receiver must
        # never hold up a claim or a render.
        self._hooks_probe = hooks_probe_path(self.layout, self.runner_id)
        self._hooks: HookDispatcher | None = None
        if config.hooks:
            from spoolrender.hooks.dispatcher import HookDispatcher  # http/ssl only for spools that use hooks

            self._hooks = HookDispatcher(self.layout, config, self.rng, lambda: spool_now(self._hooks_probe))

    def _check_filesystems(self) -> None:
        """Refuse at once a filesystem that lacks an operation the protocol needs (some
        network and FUSE filesystems), instead of failing jobs obscurely later. A probe
        that fails for the filesystem's condition (full, read-only...) says so and, but
        for a drain, is tried again with the spool I/O backoff until it passes."""
        while True:
            try:
                check_filesystem(self.layout.private, "spool")
                # The output root's probe in the scratch dir: consumers watch the output tree.
                check_filesystem(self.config.output_root, "output root", probe_in=self.config.output_root / SCRATCH_DIR)
            except SpoolIOError as exc:
                if self.drain:
                    raise
                delay = self._spool_io.failed(OSError(exc.errno, exc.strerror), "probing the spool's filesystem")
                time.sleep(delay)  # before run(): SIGTERM still ends the process at once
                continue
            self._spool_io.succeeded()
            if (shared := shared_root_warning(self.config.output_root)) is not None:
                log.warning("%s", shared)
            return

    # --- control ---------------------------------------------------------------------

    def request_stop(self, *, force: bool = False) -> None:
        """Stop claiming; with ``force`` (or a second request), cancel running jobs now."""
        if self._stop.is_set() or force:
            self._force.set()
        if not self._stop.is_set():
            self.summary.stopped_by = "signal"
        self._stop.set()
        self._wake.set()

    def install_signal_handlers(self) -> None:
        def handler(signum: int, frame: FrameType | None) -> None:
            log.info(
                "received %s: %s",
                signal.Signals(signum).name,
                "cancelling running jobs" if self._stop.is_set() else "stopping after running jobs",
            )
            self.request_stop()

        signal.signal(signal.SIGTERM, handler)
        signal.signal(signal.SIGINT, handler)

    def _writer_exited(self) -> None:
        # A process that closed an upload has exited: that upload may be complete now.
        self._scanner.note_event("", "")
        self._wake.set()

    # --- main loop -------------------------------------------------------------------

    def run(self) -> RunSummary:
        log.info(
            "runner %s: spool %s, %d slot(s) x %d thread(s) (%s), watch=%s%s, queues %s%s",
            self.runner_id, self.config.spool, self.capacity.slots, self.capacity.threads_per_job,
            self.capacity.reason, self.watch_mode, ", drain" if self.drain else "", ",".join(self.config.queues),
            f", tags {','.join(self.config.tags)}" if self.config.tags else "",
        )  # fmt: skip
        if self.max_jobs is not None or self.max_runtime is not None:
            log.info(
                "limits: %s, %s",
                "no job limit" if self.max_jobs is None else f"at most {self.max_jobs} job(s)",
                "no runtime limit" if self.max_runtime is None else f"at most {self.max_runtime:g} s of claiming",
            )
        self._started_mono = self.clock.monotonic()
        self._watcher = watcher = SpoolWatcher(self.watch_mode, self.config.poll_seconds)
        watcher.start(self.layout.incoming, self.layout.retry, self._wake, self._scanner.note_event)
        # `resume` (from any host) wakes us at once instead of at the next rescan.
        watcher.watch_pause_marker(self.layout.private, self._wake)
        if self.watch_mode == "inotify" and self._closers.start(self.layout.incoming):
            log.debug("following who closes uploads in %s (fanotify)", self.layout.incoming)
        self._heartbeat.start()
        if self._hooks is not None:
            self._hooks.start()
        try:
            self._loop()
        finally:
            self._shutdown_jobs()
            for slot_thread in self._slots:
                slot_thread.stop()
            if not self._force.is_set():
                self._retention.wait()  # a purge cut short leaves a half-deleted job directory
            if self._hooks is not None:
                # One last pass over what is due now (a drain's own jobs get notified);
                # what still fails stays on disk for the next runner.
                self._hooks.stop(force=self._force.is_set())
            watcher.stop()
            self._watcher = None
            self._closers.stop()
            self._held.close()
            self._heartbeat.stop()
            # Beacon (and the clock probes, the hooks thread's too: it has stopped) gone
            # before the last metrics: they must count this runner offline.
            remove_beacon(self.layout, self.runner_id)
            self._write_metrics()
            if self._metrics_textfile is not None and not self.drain:
                # A runner that stopped on purpose must not look alive (and stale) in
                # node_exporter; a drain's figures stay for the scrape after it.
                with contextlib.suppress(OSError):
                    self._metrics_textfile.unlink()
            for executor in self._executors:
                executor.close()
        log.info("runner %s stopped: %s", self.runner_id, self.summary.describe())
        return self.summary

    def _loop(self) -> None:
        self._next_sweep = 0.0
        self._next_beacon = 0.0
        while not self._stop.is_set():
            try:
                timeout = self._tick()
            except OSError as exc:
                # The spool's filesystem failed under us (read-only, full, briefly gone).
                # Waiting loses nothing: every state is on disk; try again shortly.
                if is_spool_io(exc):
                    timeout = self._spool_io.failed(exc, "scanning the spool")
                else:
                    log.error("spool trouble (%s); trying again in %g s", exc, self.config.rescan_seconds)
                    timeout = self.config.rescan_seconds
            if timeout is None:
                return
            self._wake.wait(max(0.0, min(timeout, self.config.rescan_seconds)))

    def _tick(self) -> float | None:
        """One pass: recover, claim into free slots. The wait before the next, or None: drained."""
        self._wake.clear()
        self._reap()
        now = self.clock.monotonic()
        if self.max_runtime is not None and now - self._started_mono >= self.max_runtime:
            log.info("--max-runtime %g s reached: stopping like on SIGTERM", self.max_runtime)
            self.request_stop()
            self.summary.stopped_by = "max-runtime"
            return None
        limited = self.max_jobs is not None and self.summary.claimed >= self.max_jobs
        if limited:
            with self._lock:
                idle = not self._active
            if idle:
                log.info("--max-jobs %d reached and every claimed job finished: exiting", self.max_jobs)
                self.summary.stopped_by = "max-jobs"
                return None
        io_wait = self._spool_io.wait_seconds()
        if io_wait > 0:
            # The spool's filesystem is failing: no claims, no sweeps, no beacon until the
            # next try is due (running jobs wait for it on their own, keeping their claims).
            with self._lock:
                idle = not self._active
            if self.drain and idle:
                log.error("drain stopped: the spool's filesystem fails (%s); the next run tries again",
                          self._spool_io.text())  # fmt: skip
                self.summary.stopped_by = "spool-io"
                return None
            if self._beacon_told != self._spool_io.since() or now >= self._next_beacon:
                # Status must learn of the trouble now, and see this runner online while it
                # lasts (written in place if need be): a periodic write, not a retry.
                self._write_beacon(retried=False)
                self._write_metrics()
                self._next_beacon = now + self.config.heartbeat_seconds
            return max(0.0, min(self._spool_io.wait_seconds() or io_wait, self._next_beacon - now))
        if now >= self._next_beacon or self._spool_io.active:
            self._write_beacon()
            self._write_metrics()
            self._next_beacon = now + self.config.heartbeat_seconds
        swept = now >= self._next_sweep
        if swept:
            self._recoverer.sweep(set(self._active))
            self._split_sweeper.sweep(self._spool_clock.now())
            self._retention.maybe_start()
            self._next_sweep = now + self.config.rescan_seconds
        paused = is_paused(self.layout)
        if paused and not self.summary.paused:
            log.info("spool is paused (`spoolrender resume` lifts it): not claiming")
        self.summary.paused = paused
        fs_now = self._spool_clock.now()
        block_now = self.clock.wall() if fs_now is None else fs_now
        block = block_of(self.layout, self.config, HOSTNAME, block_now)
        self._note_block(block, fs_now)
        probing = False
        if self._blocked is not None and not paused:
            self.summary.blocked = True
            # A blocked host claims one job at a time, host-wide, as a probe (hosts/blocks.py).
            probing = (
                block is not None
                and self._probe_job is None
                and self._probe_slot.due(block.since, block_now, self.config.host_probe_seconds)
                and self._probe_slot.take()
            )
            paused = not probing
        self._held.recheck()  # the held incoming/ and running/ are checked once per pass (HeldDir)
        scan = self._scanner.scan(lambda: fs_now)
        self._waiting = scan.waiting
        for candidate in scan.candidates:
            if not self._free or self._stop.is_set() or paused or limited:
                break
            if self._scanner.writer_holds(candidate):
                continue  # an upload still in progress: it waits in place
            try:
                claimed = claim(self.layout, candidate, self._heartbeat, self.clock,
                                max_job_bytes=self.config.max_job_bytes, uncached=self._uncached,
                                held=self._held)  # fmt: skip
            except ClaimBlocked as exc:
                self._scanner.claim_failed(candidate.name, str(exc))
                continue
            except OSError as exc:
                if not is_spool_io(exc):
                    raise
                # Every claim would fail alike: pause claiming for the backoff, and keep the
                # candidate (nothing of the claim was left behind).
                self._spool_io.failed(exc, f"claiming {candidate.source}/{candidate.name}")
                break
            self._spool_io.succeeded()
            # Claimed or lost: either way not a candidate any more until the next listing.
            self._scanner.forget(candidate.name)
            if claimed is not None:
                if probing:
                    self._probe_job = claimed.key
                    paused = True  # one probe at a time
                    log.info("host %s is blocked: job %s is its probe", HOSTNAME, claimed.job_id)
                self._start(claimed)
                if self.max_jobs is not None and self.summary.claimed >= self.max_jobs:
                    limited = True
                    log.info("--max-jobs %d reached: claiming no more; finishing the claimed job(s)", self.max_jobs)
        if probing and self._probe_job is None:
            self._probe_slot.release()  # nothing to probe with: another runner may
        if swept:
            # Housekeeping after claiming, so that it never delays a claim.
            fs_now = self._spool_clock.now()
            if fs_now is not None:
                expire_runners(self.layout, fs_now, self.config.lease_seconds)
        with self._lock:
            idle = not self._active
        if self.drain and idle and (paused or (not scan.candidates and scan.waiting_uploads == 0)):
            why = "this host is blocked" if self._blocked else "the spool is paused"
            log.info("drained: %s", why if paused else "nothing left to claim")
            self.summary.stopped_by = "drained"
            return None
        timeout = self._next_sweep - self.clock.monotonic()
        if scan.next_wake is not None:
            timeout = min(timeout, scan.next_wake - self.clock.monotonic())
        if self.max_runtime is not None:
            timeout = min(timeout, self._started_mono + self.max_runtime - self.clock.monotonic())
        if self._spool_io.active:
            timeout = min(timeout, self._spool_io.wait_seconds())
        elif scan.candidates and self._free and not paused and not limited:
            # Every candidate was lost to other runners (or unclaimable): look again
            # soon, but not in a hot loop if something keeps failing.
            timeout = 0.05
        return timeout

    def _note_block(self, block: BlockState | None, fs_now: float | None) -> None:
        """Log a change of this host's block (applied or held back), and tell status at once."""
        reason = None if block is None or not block.applied else block.reason
        held = None if block is None or block.applied else block.held_back
        if (reason, held) == (self._blocked, self._block_held):
            return
        if block is not None and reason is not None:
            left = block.until - (self.clock.wall() if fs_now is None else fs_now)
            log.error(
                "host %s is blocked: %s; claiming one job at a time as a probe (for %.0f s more, or until "
                "`spoolrender unblock %s`)", HOSTNAME, reason, left, HOSTNAME,
            )  # fmt: skip
        elif block is not None:
            log.warning("host %s would be blocked (%s), but %s: claiming as usual", HOSTNAME, block.reason, held)
        elif self._blocked is not None:
            log.info("host %s is no longer blocked: claiming again", HOSTNAME)
        self._blocked, self._block_held = reason, held
        self._next_beacon = 0.0

    def _start(self, claimed: Claim) -> None:
        slot = self._free.pop(0)
        done = threading.Event()
        with self._lock:
            self._active[claimed.key] = _Active(claimed, done, slot)
            self.metrics.set_busy(len(self._active))
        self.summary.claimed += 1
        self.metrics.job_claimed()
        log_transition(
            log,
            claimed.job_id,
            "incoming" if claimed.run == 1 and not is_chunk_name(claimed.job_id) else "retry",
            "running",
            run=claimed.run,
            slot=slot,
        )
        self._slots[slot].hand(claimed, done)

    def _run_slot(self, slot: int, claimed: Claim) -> None:
        try:
            end = self._executors[slot].execute(claimed)
        except OSError as exc:
            # The spool could not record the run's outcome (read-only, full, gone). The
            # job stays in running/, its lock now free: our next sweep (or any runner's)
            # recovers it once the filesystem is back.
            log.error("job %s: spool I/O failed (%s); it will be recovered", claimed.job_id, exc)
            end = None
        except Exception:
            # A bug must not take the runner down: the job stays in running/ and is
            # recovered (as "runner died") once its lock is released or its lease ends.
            log.exception("job %s: internal error; leaving it for recovery", claimed.job_id)
            end = None
        if claimed.key == self._probe_job:
            self._probe_slot.ended(claimed.job_id, None if end is None else end.outcome)
            self._probe_job = None
        if end is not None and (end.outcome.startswith(CHUNK_OUTCOME_PREFIX) or end.outcome == "split"):
            # It queued chunks or woke a job in retry/: list again now, not after an event
            # that a busy host may deliver after a drain has decided there is nothing left.
            self._scanner.note_event("", "")
        if end is not None:
            self.metrics.job_finished(end.outcome, duration=end.duration, attempts=end.attempts)
            with self._lock:
                if end.state in ("failed", "retry") and not end.outcome.startswith(CHUNK_OUTCOME_PREFIX):
                    failure = FailureView(claimed.job_id, end.state, end.error_kind, end.error_message, time.time())
                    self._failures.appendleft(failure)
                field = {"retry": "retried", "requeue": "requeued"}.get(end.outcome, end.outcome)
                if end.outcome.startswith(CHUNK_OUTCOME_PREFIX):
                    field = "chunks"
                setattr(self.summary, field, getattr(self.summary, field) + 1)
                for warning in end.warnings:
                    self._warnings.pop(warning, None)
                    self._warnings[warning] = claimed.job_id
                while len(self._warnings) > defaults.RUNNER_WARNINGS_SHOWN:
                    del self._warnings[next(iter(self._warnings))]

    def _slot_finished(self) -> None:
        # After the slot's done is set (SlotThread): the loop woken here finds the slot free.
        if self._hooks is not None:
            self._hooks.wake()
        self._wake.set()

    def view(self) -> RunnerView:
        """What this runner does now, for the live display (any thread may ask)."""
        wall = self.clock.wall()
        with self._lock:
            by_slot = {a.slot: a.claim for a in self._active.values()}
            summary = dataclasses.replace(self.summary)
            failures = tuple(self._failures)
        slots = []
        for slot in range(self.capacity.slots):
            claimed = by_slot.get(slot)
            if claimed is None:
                slots.append(SlotView(slot, None))
                continue
            progress, stage = self._heartbeat.progress_of(claimed.token)
            elapsed = wall - claimed.started
            slots.append(SlotView(slot, claimed.job_id, claimed.run, progress, stage, elapsed,
                                  eta_seconds(elapsed, progress)))  # fmt: skip
        return RunnerView(
            tuple(slots), summary.claimed, summary.done, summary.failed, summary.retried, summary.requeued,
            sum(n for g in self._waiting if isinstance(n := g.get("count"), int)), self.drain, self._stop.is_set(),
            summary.paused, failures,
        )  # fmt: skip

    def _reap(self) -> None:
        with self._lock:
            finished = [key for key, a in self._active.items() if a.done.is_set()]
            for key in finished:
                active = self._active.pop(key)
                self._free.append(active.slot)
            self.metrics.set_busy(len(self._active))

    def _shutdown_jobs(self) -> None:
        with self._lock:
            active = list(self._active.values())
        if not active:
            return
        if not self._force.is_set():
            log.info("waiting up to %g s for %d running job(s)", self.config.grace_seconds, len(active))
            deadline = self.clock.monotonic() + self.config.grace_seconds
            for a in active:
                while not a.done.is_set() and not self._force.is_set():
                    remaining = deadline - self.clock.monotonic()
                    if remaining <= 0:
                        break
                    a.done.wait(min(remaining, 0.2))
        for a in active:
            if not a.done.is_set():
                a.claim.cancel.cancel(CancelReason.SHUTDOWN)
        for a in active:
            a.done.wait()
        self._reap()

    def _purged(self, counts: dict[str, int]) -> None:
        self.metrics.jobs_purged(counts)
        self._next_beacon = 0.0  # new figures (the metrics textfile) at the next pass
        self._wake.set()

    def _write_metrics(self) -> None:
        if self._metrics_textfile is None:
            return
        self.metrics.set_spool_io(self._spool_io.active, self._spool_io.total)
        try:
            self.metrics.write_textfile(self._metrics_textfile, self.config)
        except SpoolrenderError as exc:
            log.warning("%s", exc)  # metrics trouble must never stop rendering

    def _warnings_report(self) -> list[dict[str, str]]:
        with self._lock:
            return [{"message": message, "job": job} for message, job in reversed(self._warnings.items())]

    def threads_alive(self) -> dict[str, bool]:
        """This runner's background threads (those started) and whether each runs."""
        alive: dict[str, bool | None] = {
            "heartbeat": self._heartbeat.running(),
            "hooks": None if self._hooks is None else self._hooks.running(),
            "watch": None if self._watcher is None else self._watcher.running(),
            "closers": self._closers.running(),
            **{slot.name: slot.running() for slot in self._slots},
        }
        return {name: running for name, running in alive.items() if running is not None}

    def _write_beacon(self, *, retried: bool = True) -> None:
        # Runners announce themselves for `status`; losing one in a crash is harmless. It
        # is also this runner's probe of a failing spool: written, the trouble is over.
        self._beacon_told = self._spool_io.since()
        # A thread that ended is said at once; after trouble, every one (runner/thread_check.py).
        self._thread_check.look(self.threads_alive(), trouble=self._spool_io.active)
        try:
            write_beacon(
                self.layout,
                self.runner_id,
                {
                    "slots": self.capacity.slots,
                    "threads_per_job": self.capacity.threads_per_job,
                    "busy": len(self._active),
                    "watch": self.watch_mode,
                    "blocked": self._scanner.blocked(),
                    "blocked_in": self._scanner.blocked_in(),
                    "drain": self.drain,
                    "queues": list(self.config.queues),
                    "tags": list(self.config.tags),
                    "waiting": self._waiting,
                    "host_blocked": self._blocked,
                    "version": __version__,
                    "updated": self.clock.wall(),
                    "spool_io": self._spool_io.report(),
                    "warnings": self._warnings_report(),
                },
            )
        except OSError as exc:
            if is_spool_io(exc):
                self._spool_io.failed(exc, "writing this runner's beacon", retried=retried)
            return
        if self._spool_io.active:
            self._spool_io.succeeded()
            self._next_beacon = 0.0  # the beacon just written still tells of the trouble
