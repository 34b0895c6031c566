"""The spool filesystem's clock when its probe cannot be written (review finding 10): no
clock instead of this host's, and the last measured offset kept. A probe path taken by a
directory stands in for a full or read-only spool: the write fails for real, also as root."""

from __future__ import annotations

import time
from pathlib import Path

from spoolrender.clock import ManualClock, SpoolClock, spool_now, spool_time


def test_a_probe_that_cannot_be_written_gives_no_clock_and_keeps_the_offset(tmp_path: Path) -> None:
    probe = tmp_path / "clock-probe"
    clock = ManualClock(wall=time.time() + 3600)  # this host an hour ahead of the spool
    spool_clock = SpoolClock(probe, clock)
    assert spool_clock.now() is not None
    offset = spool_clock.offset()
    assert offset is not None and abs(offset - 3600) < 60
    probe.unlink()
    probe.mkdir()  # the write fails from now on
    assert spool_now(probe) is None
    assert spool_clock.now() is None and spool_clock.offset() == offset
    # One-off commands still get a "now": this host's clock, as documented.
    assert abs(spool_time(tmp_path / "missing", "status") - time.time()) < 60
