"""The spool filesystem's clock when its probe cannot be written (review finding 10): no
clock instead of this host's, and the last measured offset kept. A probe path taken by a
directory stands in for a full or read-only spool: the write fails for real, also as root."""

from __future__ import annotations

import time
from pathlib import Path

from spoolrender.spool.clock import ManualClock, SpoolClock, spool_now, spool_time


def test_a_probe_that_cannot_be_written_gives_no_clock_and_keeps_the_offset(tmp_path: Path) -> None:
    probe = tmp_path / "clock-probe"
    clock = ManualClock(wall=time.time() + 3600)  # this host an hour ahead of the spool
    spool_clock = SpoolClock(probe, clock, reuse_seconds=0)  # every now() probes
    assert spool_clock.now() is not None
    offset = spool_clock.offset()
    assert offset is not None and abs(offset - 3600) < 60
    probe.unlink()
    probe.mkdir()  # the write fails from now on
    assert spool_now(probe) is None
    assert spool_clock.now() is None and spool_clock.offset() == offset
    # One-off commands still get a "now": this host's clock, as documented.
    assert abs(spool_time(tmp_path / "missing", "status") - time.time()) < 60


def test_the_spool_clock_is_probed_once_per_reuse_period_and_moved_on_in_between(tmp_path: Path) -> None:
    probe = tmp_path / "clock-probe"
    spool_clock = SpoolClock(probe, ManualClock(), reuse_seconds=3600)
    first = spool_clock.now()
    assert first is not None
    probe.unlink()  # a probe written again would come back
    time.sleep(0.05)
    reused = spool_clock.now()
    assert not probe.exists()  # no write within the period
    assert reused is not None and reused >= first + 0.04  # moved on by the real seconds passed
    # Past the period: measured again.
    short = SpoolClock(probe, ManualClock(), reuse_seconds=0.1)
    assert short.now() is not None
    probe.unlink()
    deadline = time.monotonic() + 0.1
    while time.monotonic() <= deadline:
        time.sleep(0.02)
    assert short.now() is not None and probe.exists()
