"""One runner slot driven by hand, for the unit tier: a real spool in a temp dir, the real
scanner, claim and executor, the render done by :class:`spoolrender.testing.FakeRenderer`,
and no runner thread (the caller scans, claims and executes, one step at a time).

Clocks are the caller's (a :class:`~spoolrender.spool.clock.ManualClock` for backoff and settle
times); the heartbeat writer is never started (no thread): a claim's first heartbeat is
written by the claim itself.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from spoolrender.config.spool_config import SpoolConfig
from spoolrender.intake.candidates import Candidate, ScanResult
from spoolrender.intake.claim import Claim, claim
from spoolrender.intake.scan import SpoolScanner
from spoolrender.run.executor import JobExecutor
from spoolrender.run.run_end import RunEnd
from spoolrender.spool.clock import ManualClock
from spoolrender.spool.heartbeat import HeartbeatWriter
from spoolrender.spool.layout import SpoolLayout
from spoolrender.testing import FakeRenderer, make_spool

# Settings of a unit spool: short times, and a retry due at once (no backoff to wait out).
UNIT_SETTINGS: dict[str, Any] = {
    "settle_seconds": 0.3,
    "backoff_base_seconds": 0.01,
    "backoff_cap_seconds": 0.01,
    "slots": 1,
}


def drop_job(layout: SpoolLayout, name: str, job: Mapping[str, Any] | str | bytes, *, age: float = 60.0) -> Path:
    """A job file in incoming/ as a careful submitter leaves it (written aside, renamed in),
    its mtime ``age`` seconds in the past (a file dropped a while ago has settled)."""
    data = yaml.safe_dump(dict(job)).encode() if isinstance(job, Mapping) else job
    data = data.encode() if isinstance(data, str) else data
    target = layout.incoming / name
    target.parent.mkdir(parents=True, exist_ok=True)
    part = target.with_name(f".{target.name}.part")
    part.write_bytes(data)
    os.rename(part, target)
    then = target.stat().st_mtime - age
    os.utime(target, (then, then))
    return target


class Slot:
    """A spool and one slot's scanner, claim and executor, stepped by the test."""

    def __init__(
        self,
        root: Path,
        settings: Mapping[str, Any] | None = None,
        *,
        fake: FakeRenderer | None = None,
        clock: ManualClock | None = None,
    ) -> None:
        self.config: SpoolConfig = make_spool(root, {**UNIT_SETTINGS, **(settings or {})})
        self.layout = SpoolLayout(self.config.spool)
        # The manual clock starts at the real time: files' mtimes (real ones) and the retry
        # due times (this clock's) compare on one time line.
        self.clock = clock or ManualClock(wall=time.time())
        self.config.output_root.mkdir(parents=True, exist_ok=True)  # as `run` makes it
        self.fake = fake or FakeRenderer()
        self.scanner = SpoolScanner(self.layout, self.config, self.clock)
        self.heartbeat = HeartbeatWriter(self.clock, self.config.heartbeat_seconds, "unit-runner")
        self.executor = JobExecutor(
            self.layout, self.config, self.clock, random.Random(27), self.heartbeat, self.fake.factory, threads=1
        )

    def advance(self, seconds: float) -> None:
        """Move the clock ``seconds`` past the spool's newest stamp: then a retry whose
        backoff is under ``seconds`` is due, however long the test's steps took.

        The spool dates what its runners decide by file mtimes, the kernel's real clock (a
        retry is due its backoff after its run record's mtime: chunks.moves.decided_at; a
        `retry` command's "now" is its own real clock). This clock started at the real time
        but moves only when told to: on a busy host the steps before take seconds of real
        time, a record stamped then lay in its future, and ``clock.advance(1)`` left the
        retry not yet due. So it first catches up with real time (never back), then moves on.
        """
        self.clock.advance(max(0.0, time.time() - self.clock.wall()) + seconds)

    def drop(self, name: str, job: Mapping[str, Any] | str | bytes, **kwargs: Any) -> Path:
        return drop_job(self.layout, name, job, **kwargs)

    def scan(self) -> ScanResult:
        # The spool filesystem's "now": this clock's wall time (advance() moves it).
        return self.scanner.scan(self.clock.wall)

    def claim(self, candidate: Candidate) -> Claim | None:
        taken = claim(self.layout, candidate, self.heartbeat, self.clock, max_job_bytes=self.config.max_job_bytes)
        self.scanner.forget(candidate.name)
        return taken

    def run_next(self) -> RunEnd:
        """Scan, claim the first candidate and run it to its next state."""
        candidates = self.scan().candidates
        assert candidates, f"nothing to claim in {self.layout.root} (incoming/: {entries(self.layout, 'incoming')})"
        taken = self.claim(candidates[0])
        assert taken is not None, f"the claim of {candidates[0].name} was lost"
        return self.executor.execute(taken)

    def close(self) -> None:
        self.executor.close()


def entries(layout: SpoolLayout, state: str) -> list[str]:
    """The names in one state's directory, sorted."""
    return sorted(os.listdir(layout.state_dir(state)))
