"""The runner: claims jobs into free slots, keeps them alive, recovers the dead, drains.

One main loop decides everything from directory listings; watchdog events and finished
jobs only wake it early (a missed event costs at most ``rescan_seconds``). Each slot
runs one job at a time in its own thread with its own, long-lived renderers; one
heartbeat thread refreshes every running job's heartbeat.

When to stop and why (SIGTERM/SIGINT, ``max_jobs``, ``max_runtime``) is
runner/stopping.py's; which job runs in which slot, and the shutdown's grace before
running jobs are cancelled, runner/running_jobs.py's.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

from spoolrender.chunks.sweep import SplitSweeper
from spoolrender.config.spool_config import SpoolConfig
from spoolrender.errors import ClaimBlocked, SpoolIOError, SpoolLayoutError, SpoolrenderError
from spoolrender.intake.candidates import ScanResult
from spoolrender.intake.claim import Claim, SpoolScanner, claim
from spoolrender.intake.upload_closers import CloserTracker
from spoolrender.intake.watch import SpoolWatcher, choose_watch_mode, is_network_filesystem
from spoolrender.lifecycle.recovery import Recoverer
from spoolrender.lifecycle.transitions import log_transition
from spoolrender.ops.control import is_paused
from spoolrender.ops.metrics import RunnerMetrics
from spoolrender.ops.retention import RetentionWorker
from spoolrender.ops.runner_view import RunnerView, SlotView, eta_seconds
from spoolrender.renderers.base import RendererFactory
from spoolrender.renderers.registry import renderer_factory
from spoolrender.run.executor import JobExecutor
from spoolrender.run.split_runs import CHUNK_OUTCOME_PREFIX
from spoolrender.runner.capacity import Capacity, plan_capacity
from spoolrender.runner.fscheck import check_filesystem
from spoolrender.runner.host_block import HostBlockWatch
from spoolrender.runner.reports import RunnerReports
from spoolrender.runner.running_jobs import RunningJobs
from spoolrender.runner.stopping import StopControl
from spoolrender.runner.summary import RunRecords, RunSummary
from spoolrender.spool.beacons import LIVENESS_DIR, expire_runners, hooks_probe_path, new_runner_id, probe_path
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

__all__ = ["RunSummary", "Runner"]  # RunSummary lives in runner/summary.py; importable here as it always was

log = logging.getLogger(__name__)


def _open_spool(config: SpoolConfig) -> SpoolLayout:
    """The spool's layout, checked, and the output root, made if need be."""
    layout = SpoolLayout(config.spool)
    layout.check()
    set_fsync(config.fsync)
    try:
        config.output_root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SpoolLayoutError(f"cannot create output root {config.output_root}: {exc.strerror}") from exc
    return layout


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
        self.config = config
        self.clock = clock or SystemClock()
        self._records = RunRecords()
        self.summary = self._records.summary
        self._wake = threading.Event()
        self._stopping = StopControl(self.summary, self.clock, self._wake, log,
                                     max_jobs=max_jobs, max_runtime=max_runtime)  # fmt: skip
        self.layout = _open_spool(config)
        self.drain = drain
        # Full disk, read-only, I/O errors (spool/io_trouble.py): shared by every thread of this runner.
        self._spool_io = SpoolIOCondition(self.clock, HOSTNAME)
        self._check_filesystems()
        self._waiting: list[dict[str, object]] = []  # the last scan's waiting jobs by route (beacon)
        self.rng = rng or random.Random()
        self.capacity = capacity or plan_capacity(config)
        self.runner_id = new_runner_id(id(self))
        self._host_block = HostBlockWatch(
            self.layout, config, self.clock, self.summary, on_change=self._tell_soon, log=log
        )
        self._make_intake()
        self._make_upkeep()
        self.metrics = RunnerMetrics(runner_name or HOSTNAME, self.capacity.slots)
        self._make_slots(make_renderer or renderer_factory(config))
        self.watch_mode = choose_watch_mode(config.watch, config.spool)
        self._watcher: SpoolWatcher | None = None  # while run() runs
        self._reports = RunnerReports(
            config, self.layout, self.clock, self.runner_id, self._spool_io, self.metrics, metrics_textfile,
            capacity=self.capacity, watch_mode=self.watch_mode, drain=drain, scanner=self._scanner,
            records=self._records,
        )  # fmt: skip
        self._hooks = self._make_hooks()

    def _make_intake(self) -> None:
        # Who closed an upload, and whether it still runs (fanotify; root, inotify only).
        self._closers = CloserTracker(on_change=self._writer_exited, settle_seconds=self.config.settle_seconds)
        # On a network filesystem job files are read past the client's caches (spool/netcache.py).
        self._uncached = is_network_filesystem(self.config.spool)
        # incoming/ and running/ held open for the runner's life (each use checks that the
        # name still is the directory held: held_dirs.HeldDir), not opened per job.
        self._held = HeldSpoolDirs(self.layout)
        self._scanner = SpoolScanner(
            self.layout,
            self.config,
            self.clock,
            local=not self._uncached,
            closers_alive=self._closers.alive,
            held_incoming=self._held.incoming,
        )

    def _make_upkeep(self) -> None:
        """The heartbeat, the spool's clock, recovery, the split sweep and retention."""
        self._heartbeat = HeartbeatWriter(self.clock, self.config.heartbeat_seconds, self.runner_id, self._spool_io)
        # Observations shared by every process on this host, so that short cron drains
        # add up to a lease (see LivenessTracker).
        tracker = LivenessTracker(self.clock, self.layout.private / LIVENESS_DIR / f"{HOSTNAME}.json")
        self._probe = probe_path(self.layout, self.runner_id)
        self._spool_clock = SpoolClock(self._probe, self.clock)
        self._recoverer = Recoverer(self.layout, self.config, self.clock, self.rng, tracker,
                                    spool_io=self._spool_io, spool_clock=self._spool_clock)  # fmt: skip
        self._split_sweeper = SplitSweeper(self.layout, self.config, self.clock)
        # keep_done and the other limits: purged in the background, one runner per spool at a time.
        self._retention = RetentionWorker(self.config, self.runner_id, on_purged=self._purged)

    def _make_slots(self, factory: RendererFactory) -> None:
        """Each slot: its executor (with its long-lived renderers) and its thread."""
        self._executors = [
            JobExecutor(
                self.layout,
                self.config,
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
        self._running = RunningJobs(self.capacity.slots, self._run_slot, self._slot_finished, self.metrics, log)

    def _make_hooks(self) -> HookDispatcher | None:
        # Completion hooks are delivered by a thread of their own: a slow receiver must
        # never hold up a claim or a render.
        self._hooks_probe = hooks_probe_path(self.layout, self.runner_id)
        if not self.config.hooks:
            return None
        from spoolrender.hooks.dispatcher import HookDispatcher  # http/ssl only for spools that use hooks

        return HookDispatcher(self.layout, self.config, self.rng, lambda: spool_now(self._hooks_probe))

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
        self._stopping.request(force=force)

    def install_signal_handlers(self) -> None:
        """SIGTERM/SIGINT: the first stops claiming, a second cancels running jobs."""
        self._stopping.install_signal_handlers()

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
        self._stopping.start()
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
            self._running.end_all(self.config.grace_seconds, self._stopping.forced, self.clock)
            self._running.stop_threads()
            if not self._stopping.forced.is_set():
                self._retention.wait()  # a purge cut short leaves a half-deleted job directory
            if self._hooks is not None:
                # One last pass over what is due now (a drain's own jobs get notified);
                # what still fails stays on disk for the next runner.
                self._hooks.stop(force=self._stopping.forced.is_set())
            watcher.stop()
            self._watcher = None
            self._closers.stop()
            self._held.close()
            self._heartbeat.stop()
            # Beacon (and the clock probes, the hooks thread's too: it has stopped) gone
            # before the last metrics: they must count this runner offline.
            self._reports.remove_beacon()
            self._write_metrics()
            self._reports.remove_metrics_textfile()
            for executor in self._executors:
                executor.close()
        log.info("runner %s stopped: %s", self.runner_id, self.summary.describe())
        return self.summary

    def _loop(self) -> None:
        self._next_sweep = 0.0
        self._reports.soon()
        while not self._stopping.requested.is_set():
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
        self._running.reap()
        now = self.clock.monotonic()
        if self._stopping.limit_reached(now, self._running.idle):
            return None
        limited = self._stopping.max_jobs_reached()
        io_wait = self._spool_io.wait_seconds()
        if io_wait > 0:
            return self._wait_out_spool_io(now, io_wait)
        if now >= self._reports.next_due or self._spool_io.active:
            self._report(now)
        swept = now >= self._next_sweep
        if swept:
            self._sweep(now)
        paused = self._check_paused()
        fs_now = self._spool_clock.now()
        paused, probing = self._host_block.check(paused, fs_now)
        self._held.recheck()  # the held incoming/ and running/ are checked once per pass (HeldDir)
        scan = self._scanner.scan(lambda: fs_now)
        self._waiting = scan.waiting
        paused, limited = self._claim_candidates(scan, paused=paused, probing=probing, limited=limited)
        if probing:
            self._host_block.probe_unclaimed()
        if swept:
            # Housekeeping after claiming, so that it never delays a claim.
            fs_now = self._spool_clock.now()
            if fs_now is not None:
                expire_runners(self.layout, fs_now, self.config.lease_seconds)
        return self._next_wait(scan, paused=paused, limited=limited)

    def _wait_out_spool_io(self, now: float, io_wait: float) -> float | None:
        """The spool's filesystem is failing: no claims, no sweeps, no beacon until the
        next try is due (running jobs wait for it on their own, keeping their claims)."""
        if self.drain and self._running.idle():
            log.error("drain stopped: the spool's filesystem fails (%s); the next run tries again",
                      self._spool_io.text())  # fmt: skip
            self.summary.stopped_by = "spool-io"
            return None
        if self._reports.told != self._spool_io.since() or now >= self._reports.next_due:
            # Status must learn of the trouble now, and see this runner online while it
            # lasts (written in place if need be): a periodic write, not a retry.
            self._report(now, retried=False)
        return max(0.0, min(self._spool_io.wait_seconds() or io_wait, self._reports.next_due - now))

    def _report(self, now: float, *, retried: bool = True) -> None:
        """The beacon and the metrics textfile, and when they are due next."""
        self._write_beacon(retried=retried)
        self._write_metrics()
        self._reports.next_due = now + self.config.heartbeat_seconds

    def _sweep(self, now: float) -> None:
        self._recoverer.sweep(self._running.keys())
        self._split_sweeper.sweep(self._spool_clock.now())
        self._retention.maybe_start()
        self._next_sweep = now + self.config.rescan_seconds

    def _check_paused(self) -> bool:
        paused = is_paused(self.layout)
        if paused and not self.summary.paused:
            log.info("spool is paused (`spoolrender resume` lifts it): not claiming")
        self.summary.paused = paused
        return paused

    def _claim_candidates(self, scan: ScanResult, *, paused: bool, probing: bool, limited: bool) -> tuple[bool, bool]:
        """Claim the scan's candidates into free slots, in order. Whether claiming is now
        paused (a probe job claimed) and limited (--max-jobs reached)."""
        for candidate in scan.candidates:
            if not self._running.has_free_slot() or self._stopping.requested.is_set() or paused or limited:
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
                    self._host_block.probe_claimed(claimed)
                    paused = True  # one probe at a time
                self._start(claimed)
                if self._stopping.max_jobs_reached():
                    limited = True
                    log.info("--max-jobs %d reached: claiming no more; finishing the claimed job(s)",
                             self._stopping.max_jobs)  # fmt: skip
        return paused, limited

    def _next_wait(self, scan: ScanResult, *, paused: bool, limited: bool) -> float | None:
        """The wait before the next pass, or None: drained."""
        if self.drain and self._running.idle() and (paused or (not scan.candidates and scan.waiting_uploads == 0)):
            why = "this host is blocked" if self._host_block.reason else "the spool is paused"
            log.info("drained: %s", why if paused else "nothing left to claim")
            self.summary.stopped_by = "drained"
            return None
        timeout = self._next_sweep - self.clock.monotonic()
        if scan.next_wake is not None:
            timeout = min(timeout, scan.next_wake - self.clock.monotonic())
        if (runtime_left := self._stopping.runtime_left(self.clock.monotonic())) is not None:
            timeout = min(timeout, runtime_left)
        if self._spool_io.active:
            timeout = min(timeout, self._spool_io.wait_seconds())
        elif scan.candidates and self._running.has_free_slot() and not paused and not limited:
            # Every candidate was lost to other runners (or unclaimable): look again
            # soon, but not in a hot loop if something keeps failing.
            timeout = 0.05
        return timeout

    def _tell_soon(self) -> None:
        self._reports.soon()

    def _start(self, claimed: Claim) -> None:
        slot = self._running.hand(claimed)
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
        self._host_block.run_ended(claimed, end)
        if end is not None and (end.outcome.startswith(CHUNK_OUTCOME_PREFIX) or end.outcome == "split"):
            # It queued chunks or woke a job in retry/: list again now, not after an event
            # that a busy host may deliver after a drain has decided there is nothing left.
            self._scanner.note_event("", "")
        if end is not None:
            self.metrics.job_finished(end.outcome, duration=end.duration, attempts=end.attempts)
            self._records.record(claimed.job_id, end)

    def _slot_finished(self) -> None:
        # After the slot's done is set (SlotThread): the loop woken here finds the slot free.
        if self._hooks is not None:
            self._hooks.wake()
        self._wake.set()

    def view(self) -> RunnerView:
        """What this runner does now, for the live display (any thread may ask)."""
        wall = self.clock.wall()
        by_slot = self._running.by_slot()
        summary, failures = self._records.snapshot()
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
            sum(n for g in self._waiting if isinstance(n := g.get("count"), int)), self.drain,
            self._stopping.requested.is_set(), summary.paused, failures,
        )  # fmt: skip

    def _purged(self, counts: dict[str, int]) -> None:
        self.metrics.jobs_purged(counts)
        self._reports.soon()  # new figures (the metrics textfile) at the next pass
        self._wake.set()

    def _write_metrics(self) -> None:
        try:
            self._reports.write_metrics()
        except SpoolrenderError as exc:
            log.warning("%s", exc)  # metrics trouble must never stop rendering

    def threads_alive(self) -> dict[str, bool]:
        """This runner's background threads (those started) and whether each runs."""
        alive: dict[str, bool | None] = {
            "heartbeat": self._heartbeat.running(),
            "hooks": None if self._hooks is None else self._hooks.running(),
            "watch": None if self._watcher is None else self._watcher.running(),
            "closers": self._closers.running(),
            **self._running.threads_alive(),
        }
        return {name: running for name, running in alive.items() if running is not None}

    def _write_beacon(self, *, retried: bool = True) -> None:
        # It is also this runner's probe of a failing spool: written, the trouble is over.
        self._reports.write_beacon(busy=self._running.count(), waiting=self._waiting,
                                   host_blocked=self._host_block.reason, threads_alive=self.threads_alive(),
                                   retried=retried)  # fmt: skip
