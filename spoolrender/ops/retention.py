"""Retention: runners forget old finished jobs in the background (the policy and the
one-purger-at-a-time lease: :mod:`spoolrender.ops.retention_lease`)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from spoolrender import defaults
from spoolrender.config.spool_config import SpoolConfig
from spoolrender.core.failpoints import crash_point
from spoolrender.ops.purge import Purged, purge_beyond, purge_older
from spoolrender.ops.retention_lease import FINISHED_STATES, FREE, RetentionPolicy, read_lease, take_lease
from spoolrender.spool.clock import spool_time
from spoolrender.spool.heartbeat import HOSTNAME
from spoolrender.spool.layout import SpoolLayout

log = logging.getLogger(__name__)


def apply_retention(config: SpoolConfig, policy: RetentionPolicy) -> dict[str, Purged]:
    """Purge done/ and failed/ by ``policy`` (the caller holds the lease): per state, what was
    removed and what could not be."""
    purged: dict[str, Purged] = {}
    for state in FINISHED_STATES:
        age, count = policy.limits(state)
        done = Purged() if age is None else purge_older(config, age, (state,))
        if count is not None:
            done += purge_beyond(config, state, count)
        purged[state] = done
    return purged


class RetentionWorker:
    """A runner's background purger: at most one purge thread, started when one is due."""

    def __init__(
        self, config: SpoolConfig, holder: str, on_purged: Callable[[dict[str, int]], None] | None = None
    ) -> None:
        self.config = config
        self.policy = RetentionPolicy.of(config)
        self._layout = SpoolLayout(config.spool)
        self._holder = holder
        self._on_purged = on_purged
        self._thread: threading.Thread | None = None
        self._next_try = 0.0  # monotonic

    def maybe_start(self) -> None:
        """Start a purge in the background if retention is on, none runs here, and it is due."""
        if not self.policy.on or (self._thread is not None and self._thread.is_alive()):
            return
        if time.monotonic() < self._next_try:
            return
        self._next_try = time.monotonic() + defaults.RETENTION_CHECK_S
        self._thread = threading.Thread(target=self._purge_if_due, name="retention", daemon=True)
        self._thread.start()

    def wait(self) -> None:
        """Wait for a purge under way (a runner stopping: leave no half-deleted job behind)."""
        if self._thread is not None and self._thread.is_alive():
            log.info("waiting for the retention purge under way to finish")
            self._thread.join()

    def _purge_if_due(self) -> None:
        try:
            self._purge_once()
        except OSError as exc:
            # The spool's filesystem failed (full, read-only, gone): the next try does it.
            log.warning("retention: purge failed: %s", exc)
        except Exception:
            # Whatever one entry does to a purge, the thread logs it and the next try runs.
            log.exception("retention: purge failed")

    def _purge_once(self) -> None:
        now = spool_time(self._layout.private, "retention")
        current = read_lease(self._layout)
        ended = None if current is None or current.last is None else current.last.get("ended")
        lately = isinstance(ended, int | float) and now - ended < defaults.RETENTION_INTERVAL_S
        if lately and current is not None and current.state == FREE:
            return  # purged lately, by this runner or another
        lease = take_lease(self.config, self._holder, now)
        if lease is None:
            return
        crash_point("retention-lease-taken")  # tests pause a holder here
        started = time.monotonic()
        purged: dict[str, Purged] = {}
        try:
            purged = apply_retention(self.config, self.policy)
        finally:
            counts = {state: len(purged[state].removed) if state in purged else 0 for state in FINISHED_STATES}
            seconds = round(time.monotonic() - started, 3)
            lease.release({"ended": spool_time(self._layout.private, "retention"), "removed": counts,
                           "seconds": seconds, "host": HOSTNAME, "runner": self._holder})  # fmt: skip
        log.info("retention (%s): purged %d done and %d failed job(s) in %.1f s",
                 self.policy.describe(), counts["done"], counts["failed"], seconds)  # fmt: skip
        kept = [entry for state in FINISHED_STATES for entry, _ in purged.get(state, Purged()).kept]
        if kept:
            # Each was logged with its reason by forget_finished; the next purge tries again.
            log.warning("retention: %d finished job(s) could not be removed (kept): %s",
                        len(kept), ", ".join(kept[:10]))  # fmt: skip
        if self._on_purged is not None:
            self._on_purged(counts)
