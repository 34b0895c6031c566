"""The spool's upkeep without a runner: the start-up filesystem probe, leftover probe
directories of dead probers, and retention's purge of finished jobs."""

from __future__ import annotations

import os
import time
from pathlib import Path

from support.unit_spool import Slot, entries

from spoolrender import defaults
from spoolrender.ops.purge import Purged
from spoolrender.ops.retention import apply_retention
from spoolrender.ops.retention_lease import RetentionPolicy
from spoolrender.runner.fscheck import check_filesystem
from spoolrender.spool.heartbeat import HOSTNAME
from spoolrender.spool.probe_dirs import PROBE_PREFIX, Prober, make_probe_dir, remove_dead_probes, start_ticks

NO_SUCH_PID = 4_194_305  # above Linux's largest pid_max: never a process


def test_the_filesystem_probe_passes_on_a_local_disk_and_leaves_nothing(tmp_path: Path) -> None:
    check_filesystem(tmp_path, "spool")
    assert list(tmp_path.iterdir()) == []


def test_a_probe_directory_names_its_prober(tmp_path: Path) -> None:
    probe = make_probe_dir(tmp_path)
    assert probe.name.startswith(PROBE_PREFIX)
    assert Prober.parse(probe.name) == Prober(HOSTNAME, os.getpid(), start_ticks(os.getpid()))
    assert Prober.parse(f"{PROBE_PREFIX}my-host.example-42-abcd") == Prober("my-host.example", 42, None)
    for bad in (f"{PROBE_PREFIX}nodashes", f"{PROBE_PREFIX}host-x1-abcd", f"{PROBE_PREFIX}host-1.x-abcd"):
        assert Prober.parse(bad) is None, bad
    assert Prober(HOSTNAME, os.getpid(), start_ticks(os.getpid())).is_dead_here() is None
    assert Prober(HOSTNAME, NO_SUCH_PID, None).is_dead_here() is True
    assert Prober(HOSTNAME, os.getpid(), 1).is_dead_here() is True  # the pid was reused since


def test_only_dead_probers_leftovers_are_removed(tmp_path: Path) -> None:
    dead_here = tmp_path / f"{PROBE_PREFIX}{HOSTNAME}-{NO_SUCH_PID}.5-aaaa"
    alive_here = tmp_path / f"{PROBE_PREFIX}{HOSTNAME}-{os.getpid()}.{start_ticks(os.getpid())}-bbbb"
    young_elsewhere = tmp_path / f"{PROBE_PREFIX}other-host-77.9-cccc"
    old_elsewhere = tmp_path / f"{PROBE_PREFIX}other-host-78.9-dddd"
    for directory in (dead_here, alive_here, young_elsewhere, old_elsewhere):
        (directory / "inside").mkdir(parents=True)
    old = time.time() - defaults.PROBE_LEFTOVER_AGE_S - 60
    os.utime(old_elsewhere, (old, old))  # another host's: judged by age on this filesystem's clock
    own = make_probe_dir(tmp_path)
    assert sorted(remove_dead_probes(tmp_path, own)) == sorted([dead_here.name, old_elsewhere.name])
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([alive_here.name, young_elsewhere.name, own.name])


def test_retention_keeps_the_newest_finished_jobs(tmp_path: Path) -> None:
    slot = Slot(tmp_path / "spool", {"keep_done_max": 1})
    for age, name in ((300, "a"), (200, "b"), (100, "c")):
        slot.drop(f"{name}.yaml", {"composition": "Intro", "output": f"{name}.mp4"}, age=age)
        slot.scanner.note_event(f"{name}.yaml", "moved_in")
        assert slot.run_next().state == "done"
        slot.clock.advance(1)
    policy = RetentionPolicy.of(slot.config)
    assert (policy.on, policy.describe()) == (True, "done/ 1 newest")
    removed = apply_retention(slot.config, policy)
    [kept] = entries(slot.layout, "done")
    assert kept.startswith("c.")
    assert sorted(r.split("/")[1].split(".")[0] for r in removed["done"].removed) == ["a", "b"]
    assert removed["done"].kept == () and removed["failed"] == Purged()
    assert all((slot.config.output_root / f"{n}.mp4").exists() for n in "abc")  # outputs are never purged
    assert RetentionPolicy(None, None, None, None).describe() == "off"
