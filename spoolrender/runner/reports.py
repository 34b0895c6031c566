"""What a runner tells other processes while it runs: its beacon, read by ``status``, and
its metrics textfile, read by node_exporter.

The beacon is also the runner's probe of a failing spool: once one is written, the
trouble is over. Each beacon looks at the runner's background threads too
(runner/thread_check.py), so a thread that ended is said within a heartbeat interval.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from pathlib import Path

from spoolrender.config.spool_config import SpoolConfig
from spoolrender.core.version import __version__
from spoolrender.intake.scan import SpoolScanner
from spoolrender.ops.metrics import RunnerMetrics
from spoolrender.runner.capacity import Capacity
from spoolrender.runner.summary import RunRecords
from spoolrender.runner.thread_check import ThreadCheck
from spoolrender.spool.beacons import remove_beacon, write_beacon
from spoolrender.spool.clock import Clock
from spoolrender.spool.io_trouble import SpoolIOCondition, is_spool_io
from spoolrender.spool.layout import SpoolLayout


class RunnerReports:
    """One runner's beacon and metrics textfile, and when the next are due."""

    def __init__(
        self,
        config: SpoolConfig,
        layout: SpoolLayout,
        clock: Clock,
        runner_id: str,
        spool_io: SpoolIOCondition,
        metrics: RunnerMetrics,
        metrics_textfile: Path | None,
        *,
        capacity: Capacity,
        watch_mode: str,
        drain: bool,
        scanner: SpoolScanner,
        records: RunRecords,
    ) -> None:
        self._config = config
        self._layout = layout
        self._clock = clock
        self._runner_id = runner_id
        self._spool_io = spool_io
        self._metrics = metrics
        self._metrics_textfile = metrics_textfile
        self._capacity = capacity
        self._watch_mode = watch_mode
        self._drain = drain
        self._scanner = scanner
        self._records = records
        self._thread_check = ThreadCheck()
        self.next_due = 0.0  # monotonic; 0.0: at the loop's next pass
        self.told: float | None = None  # the spool I/O trouble the last beacon told of

    def soon(self) -> None:
        """Write both at the loop's next pass: status should see a change now."""
        self.next_due = 0.0

    def write_beacon(
        self,
        *,
        busy: int,
        waiting: list[dict[str, object]],
        host_blocked: str | None,
        threads_alive: Mapping[str, bool],
        retried: bool = True,
    ) -> None:
        # Runners announce themselves for `status`; losing one in a crash is harmless.
        self.told = self._spool_io.since()
        # A thread that ended is said at once; after trouble, every one (runner/thread_check.py).
        self._thread_check.look(threads_alive, trouble=self._spool_io.active)
        try:
            write_beacon(
                self._layout,
                self._runner_id,
                {
                    "slots": self._capacity.slots,
                    "threads_per_job": self._capacity.threads_per_job,
                    "busy": busy,
                    "watch": self._watch_mode,
                    "blocked": self._scanner.blocked(),
                    "blocked_in": self._scanner.blocked_in(),
                    "drain": self._drain,
                    "queues": list(self._config.queues),
                    "tags": list(self._config.tags),
                    "waiting": waiting,
                    "host_blocked": host_blocked,
                    "version": __version__,
                    "updated": self._clock.wall(),
                    "spool_io": self._spool_io.report(),
                    "warnings": self._records.warnings_report(),
                },
            )
        except OSError as exc:
            if is_spool_io(exc):
                self._spool_io.failed(exc, "writing this runner's beacon", retried=retried)
            return
        if self._spool_io.active:
            self._spool_io.succeeded()
            self.next_due = 0.0  # the beacon just written still tells of the trouble

    def write_metrics(self) -> None:
        """Raises SpoolrenderError if the textfile cannot be written."""
        if self._metrics_textfile is None:
            return
        self._metrics.set_spool_io(self._spool_io.active, self._spool_io.total)
        self._metrics.write_textfile(self._metrics_textfile, self._config)

    def remove_beacon(self) -> None:
        """The beacon and the clock probes, at stop: the last metrics must count this runner offline."""
        remove_beacon(self._layout, self._runner_id)

    def remove_metrics_textfile(self) -> None:
        if self._metrics_textfile is not None and not self._drain:
            # A runner that stopped on purpose must not look alive (and stale) in
            # node_exporter; a drain's figures stay for the scrape after it.
            with contextlib.suppress(OSError):
                self._metrics_textfile.unlink()
