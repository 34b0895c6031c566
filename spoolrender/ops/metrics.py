"""Prometheus metrics: a runner's counters plus gauges read off the spool.

Written with prometheus-client, never by hand. A runner keeps its counters and
histograms in memory and writes everything to a node_exporter textfile
(``--metrics-textfile``) atomically: prometheus-client writes a temporary file beside the
target and renames it, so the collector never reads half a file. ``status --prometheus``
prints the spool gauges alone, for a cron job.

Series of a runner carry ``runner="<name>"`` (``--runner-name``, default the host name),
so several runners' textfiles on one node_exporter do not collide.
"""

from __future__ import annotations

import logging
from pathlib import Path

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest, write_to_textfile

from spoolrender import defaults
from spoolrender.config.queues import ALL_QUEUES, queue_report
from spoolrender.config.spool_config import SpoolConfig
from spoolrender.errors import SpoolrenderError
from spoolrender.hosts.blocks import BlockState, block_states
from spoolrender.ops.retention_lease import read_lease
from spoolrender.ops.status import SpoolSnapshot, job_counts, take_snapshot
from spoolrender.spool.io_trouble import is_spool_io
from spoolrender.spool.layout import SpoolLayout
from spoolrender.spool.trouble_log import TroubleLog

log = logging.getLogger(__name__)

# Renders take seconds to hours.
DURATION_BUCKETS = (1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1800, 3600, 7200, float("inf"))
ATTEMPT_BUCKETS = (1, 2, 3, 4, 5, 7, 10, 20, float("inf"))
OUTCOMES = ("done", "failed", "retry", "requeue", "lost")


class SpoolGauges:
    """The gauges every view of a spool shares: jobs per state, backlog age, runners online."""

    def __init__(self, registry: CollectorRegistry, labels: dict[str, str]) -> None:
        names = list(labels)
        self._labels = labels
        self.jobs = Gauge("spoolrender_jobs", "Jobs per spool state", [*names, "state"], registry=registry)
        self.backlog_age = Gauge(
            "spoolrender_backlog_age_seconds", "Age of the oldest job waiting in incoming/ (0 if none)", names,
            registry=registry,
        )  # fmt: skip
        self.runners_online = Gauge(
            "spoolrender_runners_online",
            "Runners whose beacon is younger than the lease",
            names,
            registry=registry,
        )

        self.queue_waiting = Gauge(
            "spoolrender_queue_jobs_waiting", "Claimable jobs per queue (incoming and due retries)",
            [*names, "queue"], registry=registry,
        )  # fmt: skip
        self.queue_unserved = Gauge(
            "spoolrender_queue_jobs_unserved", "Waiting jobs per queue that no online runner can take",
            [*names, "queue"], registry=registry,
        )  # fmt: skip
        self.queue_age = Gauge(
            "spoolrender_queue_oldest_age_seconds", "Age of the oldest claimable job per queue",
            [*names, "queue"], registry=registry,
        )  # fmt: skip

        self.host_blocked = Gauge(
            "spoolrender_host_blocked",
            "Hosts with a block marker: 1 while applied (cause=failures: only probe jobs), 0 while held back "
            "so as not to stop the farm (cause says why)", [*names, "host", "cause"], registry=registry,
        )  # fmt: skip
        self.host_block_until = Gauge(
            "spoolrender_host_block_until_seconds", "End of a host's block (epoch seconds, the spool's clock)",
            [*names, "host"], registry=registry,
        )  # fmt: skip

        self.last_purge = Gauge(
            "spoolrender_retention_last_purge_timestamp_seconds",
            "When a runner last finished purging done/ and failed/ by keep_done and the other retention limits "
            "(epoch seconds, the spool's clock; 0: never)", names, registry=registry,
        )  # fmt: skip

    def update(self, layout: SpoolLayout, snap: SpoolSnapshot, blocks: list[BlockState]) -> None:
        lease = read_lease(layout)
        ended = None if lease is None or lease.last is None else lease.last.get("ended")
        last_purge = self.last_purge.labels(**self._labels) if self._labels else self.last_purge
        last_purge.set(ended if isinstance(ended, int | float) else 0)
        for gauge in (self.host_blocked, self.host_block_until):
            gauge.clear()  # a block lifted must not linger
        for b in blocks:
            self.host_blocked.labels(**self._labels, host=b.host, cause=b.cause).set(1 if b.applied else 0)
            self.host_block_until.labels(**self._labels, host=b.host).set(b.until)
        counts, _ = job_counts(layout, snap)  # as status counts them: joining split jobs with split/
        for state in defaults.STATE_DIRS:
            self.jobs.labels(**self._labels, state=state).set(counts[state])
        # prometheus-client: a metric without label names is its own (only) child.
        backlog = self.backlog_age.labels(**self._labels) if self._labels else self.backlog_age
        backlog.set(snap.oldest_incoming_age or 0.0)
        online = self.runners_online.labels(**self._labels) if self._labels else self.runners_online
        online.set(sum(1 for r in snap.runners if r.get("online")))
        queues, _ = queue_report(snap.runners, snap.fs_now)
        for gauge in (self.queue_waiting, self.queue_unserved, self.queue_age):
            gauge.clear()  # a queue nobody waits in or serves any more must not linger
        for name, q in queues.items():
            if name == ALL_QUEUES:
                continue
            self.queue_waiting.labels(**self._labels, queue=name).set(q["waiting"])
            self.queue_unserved.labels(**self._labels, queue=name).set(q["unserved"])
            self.queue_age.labels(**self._labels, queue=name).set(q["oldest_age_seconds"] or 0.0)


class RenderCacheMetrics:
    """The render cache as one runner used it (render_cache_step.CacheMetrics)."""

    def __init__(self, registry: CollectorRegistry, labels: dict[str, str]) -> None:
        names = list(labels)
        self._labels = labels
        self.hits = Counter("spoolrender_render_cache_hits", "Jobs published from the render cache",
                            names, registry=registry)  # fmt: skip
        self.misses = Counter("spoolrender_render_cache_misses", "Cached jobs rendered (no usable entry)",
                              names, registry=registry)  # fmt: skip
        self.stores = Counter("spoolrender_render_cache_stores", "Renders stored in the render cache",
                              names, registry=registry)  # fmt: skip
        self.evictions = Counter(
            "spoolrender_render_cache_evictions", "Entries removed to keep the cache under render_cache_max_bytes",
            names, registry=registry,
        )  # fmt: skip
        self.bytes = Gauge("spoolrender_render_cache_bytes", "Size of the render cache after this runner's last store",
                           names, registry=registry)  # fmt: skip
        for metric in (self.hits, self.misses, self.stores, self.evictions):
            metric.labels(**labels)

    def looked_up(self, hit: bool) -> None:
        (self.hits if hit else self.misses).labels(**self._labels).inc()

    def stored(self, evicted: int, total_bytes: int | None) -> None:
        self.stores.labels(**self._labels).inc()
        self.evictions.labels(**self._labels).inc(evicted)
        if total_bytes is not None:
            self.bytes.labels(**self._labels).set(total_bytes)


class RunnerMetrics:
    """A runner's metrics; thread-safe (prometheus-client locks each value)."""

    def __init__(self, runner_name: str, slots: int) -> None:
        self.registry = CollectorRegistry()
        labels = {"runner": runner_name}
        self._labels = labels
        self.spool = SpoolGauges(self.registry, labels)
        self.slots = Gauge("spoolrender_slots", "Job slots of this runner", ["runner"], registry=self.registry)
        self.slots.labels(**labels).set(slots)
        self.busy = Gauge("spoolrender_slots_busy", "Slots rendering now", ["runner"], registry=self.registry)
        self.claimed = Counter(
            "spoolrender_jobs_claimed", "Jobs claimed by this runner", ["runner"], registry=self.registry
        )
        self.finished = Counter(
            "spoolrender_jobs_finished", "Runs ended, by where they sent the job", ["runner", "outcome"],
            registry=self.registry,
        )  # fmt: skip
        self.duration = Histogram(
            "spoolrender_render_duration_seconds", "Duration of successful runs (claim to done)", ["runner"],
            buckets=DURATION_BUCKETS, registry=self.registry,
        )  # fmt: skip
        self.attempts = Histogram(
            "spoolrender_job_attempts", "Attempts a job used when it reached done/ or failed/", ["runner"],
            buckets=ATTEMPT_BUCKETS, registry=self.registry,
        )  # fmt: skip
        self.spool_io_failing = Gauge(
            "spoolrender_spool_io_failing",
            "1 while this runner's writes to the spool fail (full, over quota, read-only, I/O error, stale, "
            "cut off): "
            "claiming paused",
            ["runner"], registry=self.registry,
        )  # fmt: skip
        self.spool_io_errors = Counter(
            "spoolrender_spool_io_errors", "Spool writes by this runner that failed for the filesystem's reasons",
            ["runner"], registry=self.registry,
        )  # fmt: skip
        self._spool_io_counted = 0
        self.purged = Counter(
            "spoolrender_retention_purged", "Finished jobs this runner forgot by the retention limits (keep_done...)",
            ["runner", "state"], registry=self.registry,
        )  # fmt: skip
        for state in ("done", "failed"):
            self.purged.labels(**labels, state=state)
        # Pre-create every series so dashboards and rate() see zeros, not absences. The
        # per-job series are kept: labels() takes a lock and builds a key per call (P2).
        self._claimed = self.claimed.labels(**labels)
        self._finished = {outcome: self.finished.labels(**labels, outcome=outcome) for outcome in OUTCOMES}
        self._busy = self.busy.labels(**labels)
        self._busy.set(0)
        self.spool_io_failing.labels(**labels).set(0)
        self.spool_io_errors.labels(**labels)
        self.render_cache = RenderCacheMetrics(self.registry, labels)
        self._spool_read = TroubleLog(log, "metrics: reading the spool's figures", level=logging.WARNING)

    def job_claimed(self) -> None:
        self._claimed.inc()

    def job_finished(self, outcome: str, *, duration: float | None, attempts: int | None) -> None:
        finished = self._finished.get(outcome)
        if finished is None:
            finished = self.finished.labels(**self._labels, outcome=outcome)
        finished.inc()
        if outcome == "done" and duration is not None:
            self.duration.labels(**self._labels).observe(duration)
        if outcome in ("done", "failed") and attempts is not None:
            self.attempts.labels(**self._labels).observe(attempts)

    def set_spool_io(self, failing: bool, errors_total: int) -> None:
        """The runner's spool I/O condition (spool/io_trouble.py): whether it fails now, and how
        many operations have failed so far."""
        self.spool_io_failing.labels(**self._labels).set(1 if failing else 0)
        self.spool_io_errors.labels(**self._labels).inc(max(0, errors_total - self._spool_io_counted))
        self._spool_io_counted = max(self._spool_io_counted, errors_total)

    def jobs_purged(self, counts: dict[str, int]) -> None:
        for state, count in counts.items():
            self.purged.labels(**self._labels, state=state).inc(count)

    def set_busy(self, busy: int) -> None:
        self._busy.set(busy)

    def write_textfile(self, path: Path, config: SpoolConfig) -> None:
        try:
            self.spool.update(*_spool_state(config))
        except (OSError, SpoolrenderError) as exc:
            # The spool unreadable now: its gauges keep their last values, and this runner's
            # own are written all the same: spoolrender_spool_io_failing among them tells of
            # the trouble (an OSError raised here left it unwritten for as long as the spool
            # failed, so the metrics never showed a spool cut off). The runner's spool I/O
            # condition logs a spool I/O error; anything else is logged here, once.
            if not is_spool_io(exc):
                self._spool_read.failed(exc)
        else:
            self._spool_read.succeeded()
        try:
            write_to_textfile(str(path), self.registry)
        except OSError as exc:
            raise SpoolrenderError(f"cannot write metrics to {path}: {exc}") from exc


def _spool_state(config: SpoolConfig) -> tuple[SpoolLayout, SpoolSnapshot, list[BlockState]]:
    layout = SpoolLayout(config.spool)
    snap = take_snapshot(layout, config.lease_seconds)
    return layout, snap, block_states(layout, config, snap.fs_now)


def spool_metrics_text(config: SpoolConfig) -> str:
    """The spool gauges in the Prometheus text format (``status --prometheus``)."""
    registry = CollectorRegistry()
    SpoolGauges(registry, {}).update(*_spool_state(config))
    return generate_latest(registry).decode("utf-8")
