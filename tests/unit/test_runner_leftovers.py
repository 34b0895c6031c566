"""What a SIGKILLed runner leaves in .spoolrender/ and who removes it when: its beacon, its
clock probes and the temporary file of a beacon write cut short (beacons.expire_runners),
judged on a spool made here, without a runner process."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from spoolrender import defaults
from spoolrender.spool.beacons import expire_runners, new_runner_id
from spoolrender.spool.heartbeat import HOSTNAME
from spoolrender.spool.layout import SpoolLayout, init_spool

NO_SUCH_PID = 4_194_305  # above Linux's largest pid_max: never a process
LEASE = 2.0


def runner_of(pid: int, token: str = "7e90") -> str:
    return f"{HOSTNAME}-{pid}-{token}"


def beacon(layout: SpoolLayout, runner: str, pid: int, host: str = HOSTNAME) -> bytes:
    data = json.dumps({"runner": runner, "host": host, "pid": pid, "busy": 1}).encode()
    (layout.runners / f"{runner}.json").write_bytes(data)
    return data


def beacon_temp(layout: SpoolLayout, runner: str, data: bytes, hex_digits: str = "edbf3877b623") -> Path:
    """What a kill between the write and the rename of a beacon leaves (durable's temp name)."""
    path = layout.runners / f".{runner}.json.{hex_digits}.tmp"
    path.write_bytes(data)
    return path


def names(directory: Path) -> list[str]:
    return sorted(os.listdir(directory))


def test_runner_ids_name_this_process() -> None:
    assert new_runner_id(0x1_7E90) == f"{HOSTNAME}-{os.getpid()}-7e90"


def test_a_dead_runners_beacon_write_cut_short_goes_with_its_beacon(tmp_path: Path) -> None:
    """ci14: a runner SIGKILLed between writing its beacon's temporary file and the rename.
    The next runner's pass removes the beacon (its pid is gone) and, in the same pass, the
    temporary file: not an hour later, when the temp would have been silent long enough."""
    layout = init_spool(tmp_path / "spool")
    dead = runner_of(NO_SUCH_PID)
    temp = beacon_temp(layout, dead, beacon(layout, dead, NO_SUCH_PID))
    (layout.private / f"clock-{dead}").write_text("x")
    fs_now = os.stat(temp).st_mtime + LEASE / 2  # written just now: a live writer would be mid-write
    assert expire_runners(layout, fs_now, LEASE) == [dead]
    assert names(layout.runners) == []
    assert [n for n in names(layout.private) if n.startswith("clock-")] == []


def test_throwaways_named_after_a_dead_runner_of_this_host_go_without_a_beacon(tmp_path: Path) -> None:
    """Killed during its first beacon write (or its beacon expired by a version that left
    the temp): the name's pid proves it dead here. A live pid, another host's runner and
    names of no runner keep their hour of silence."""
    layout = init_spool(tmp_path / "spool")
    dead, alive = runner_of(NO_SUCH_PID, "aaaa"), runner_of(os.getpid(), "bbbb")
    kept = [
        beacon_temp(layout, alive, b"{}"),  # this process: mid-write, for all we know
        beacon_temp(layout, f"elsewhere-{NO_SUCH_PID}-cccc", b"{}"),  # its pids mean nothing here
        beacon_temp(layout, f"{HOSTNAME}-x{NO_SUCH_PID}-dddd", b"{}"),  # no runner id
    ]
    status_probe = layout.private / f"clock-status-{NO_SUCH_PID}-0123abcd"  # not a runner's
    status_probe.write_text("x")
    gone = [beacon_temp(layout, dead, b'{"runner": "'), layout.private / f"clock-{dead}"]
    gone[1].write_text("x")
    (layout.private / f"clock-{dead}-hooks").write_text("x")
    gone.append(layout.private / f"clock-{dead}-hooks")
    fs_now = time.time()
    assert expire_runners(layout, fs_now, LEASE) == []
    assert [p.name for p in gone if p.exists()] == []
    assert [p.name for p in [*kept, status_probe] if not p.exists()] == []
    # Silent for an hour, they go too (the rule for runners that may live: issue 26).
    later = fs_now + defaults.PROBE_LEFTOVER_AGE_S + 1
    assert expire_runners(layout, later, LEASE) == []
    assert names(layout.runners) == [] and not status_probe.exists()


def test_a_live_runners_beacon_temp_is_never_taken(tmp_path: Path) -> None:
    layout = init_spool(tmp_path / "spool")
    alive = runner_of(os.getpid())
    temp = beacon_temp(layout, alive, beacon(layout, alive, os.getpid()))
    assert expire_runners(layout, os.stat(temp).st_mtime + 10 * LEASE, LEASE) == []
    assert names(layout.runners) == sorted([f"{alive}.json", temp.name])
