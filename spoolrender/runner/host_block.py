"""This host's block (hosts/blocks.py) as one runner meets it, pass by pass.

A blocked host claims one job at a time, host-wide, as a probe: the runner that takes the
probe slot claims it, and its outcome ends the probe (or the block). A block held back (too
few hosts left to take the work...) is only said, and claiming goes on as usual.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from spoolrender.config.spool_config import SpoolConfig
from spoolrender.hosts.blocks import BlockState, ProbeSlot, block_of
from spoolrender.intake.claim import Claim
from spoolrender.run.run_end import RunEnd
from spoolrender.runner.summary import RunSummary
from spoolrender.spool.clock import Clock
from spoolrender.spool.heartbeat import HOSTNAME
from spoolrender.spool.layout import SpoolLayout


class HostBlockWatch:
    """One runner's view of this host's block, and the probe job it runs while blocked."""

    def __init__(
        self,
        layout: SpoolLayout,
        config: SpoolConfig,
        clock: Clock,
        summary: RunSummary,
        *,
        on_change: Callable[[], None],
        log: logging.Logger,
    ) -> None:
        self._layout = layout
        self._config = config
        self._clock = clock
        self._summary = summary
        self._on_change = on_change
        # The runner's logger: these lines have always named the runner's loop.
        self._log = log
        self.reason: str | None = None  # why this host is blocked (hosts/health.py), while it is
        self._held: str | None = None  # why this host's block is not applied (hosts/blocks.py)
        self._probe_slot = ProbeSlot(layout, HOSTNAME)
        self._probe_job: str | None = None  # the key of this runner's probe job while it runs

    def check(self, paused: bool, fs_now: float | None) -> tuple[bool, bool]:
        """Whether to claim nothing this pass, and whether to claim a blocked host's probe job."""
        block_now = self._clock.wall() if fs_now is None else fs_now
        block = block_of(self._layout, self._config, HOSTNAME, block_now)
        self._note(block, fs_now)
        probing = False
        if self.reason is not None and not paused:
            self._summary.blocked = True
            probing = (
                block is not None
                and self._probe_job is None
                and self._probe_slot.due(block.since, block_now, self._config.host_probe_seconds)
                and self._probe_slot.take()
            )
            paused = not probing
        return paused, probing

    def _note(self, block: BlockState | None, fs_now: float | None) -> None:
        """Log a change of this host's block (applied or held back), and tell status at once."""
        reason = None if block is None or not block.applied else block.reason
        held = None if block is None or block.applied else block.held_back
        if (reason, held) == (self.reason, self._held):
            return
        if block is not None and reason is not None:
            left = block.until - (self._clock.wall() if fs_now is None else fs_now)
            self._log.error(
                "host %s is blocked: %s; claiming one job at a time as a probe (for %.0f s more, or until "
                "`spoolrender unblock %s`)", HOSTNAME, reason, left, HOSTNAME,
            )  # fmt: skip
        elif block is not None:
            self._log.warning("host %s would be blocked (%s), but %s: claiming as usual", HOSTNAME, block.reason, held)
        elif self.reason is not None:
            self._log.info("host %s is no longer blocked: claiming again", HOSTNAME)
        self.reason, self._held = reason, held
        self._on_change()

    def probe_claimed(self, claimed: Claim) -> None:
        self._probe_job = claimed.key
        self._log.info("host %s is blocked: job %s is its probe", HOSTNAME, claimed.job_id)

    def probe_unclaimed(self) -> None:
        """After a pass that took the probe slot: give it up if no job was claimed with it."""
        if self._probe_job is None:
            self._probe_slot.release()  # nothing to probe with: another runner may

    def run_ended(self, claimed: Claim, end: RunEnd | None) -> None:
        """A run ended (a slot's thread); ``end`` None: it ended in an error of the runner's."""
        if claimed.key == self._probe_job:
            self._probe_slot.ended(claimed.job_id, None if end is None else end.outcome)
            self._probe_job = None
