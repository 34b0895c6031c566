"""What runners leave behind and tell operators (issue 12, items 21-24), with real runner
processes and real signals: beacons of SIGKILLed runners expire, a taken-over runner logs
no ERROR, `resume` wakes runners at once, a drain's last metrics say it is offline."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from support.processes import spoolrender_cmd, stopped
from support.spool_jobs import allow_steps, command_job, drop, entries, write_spool_config
from support.waiting import wait_for

from spoolrender.spool import records
from spoolrender.spool.beacons import expire_runners, hooks_probe_path, probe_path
from spoolrender.spool.heartbeat import HOSTNAME, process_start, read_heartbeat
from spoolrender.spool.layout import SpoolLayout
from spoolrender.spool.records import RunRecord


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(spoolrender_cmd(*args), capture_output=True, text=True, check=False, timeout=120)


def listed_runners(layout: SpoolLayout) -> list[str]:
    status = json.loads(cli("status", "--json", "--spool", str(layout.root)).stdout)
    return sorted(r["runner"] for r in status["runners"])


def beacons(layout: SpoolLayout) -> list[str]:
    return sorted(n.removesuffix(".json") for n in os.listdir(layout.runners) if n.endswith(".json"))


def probes(layout: SpoolLayout) -> list[str]:
    return sorted(n for n in os.listdir(layout.private) if n.startswith("clock-"))


def foreign_beacon(layout: SpoolLayout, runner: str, age: float) -> None:
    path = layout.runners / f"{runner}.json"
    path.write_text(json.dumps({"runner": runner, "host": "elsewhere", "pid": 1, "slots": 2, "busy": 2}))
    then = time.time() - age
    os.utime(path, (then, then))


def render_started(job_dir: Path) -> bool:
    hb = read_heartbeat(job_dir)
    return hb is not None and hb.pgid is not None


def test_beacons_and_probes_of_dead_runners_expire(spool: SpoolLayout, start_runner: Any) -> None:
    """Item 21: a SIGKILLed runner's beacon and clock probe are not listed by `status` and are
    removed by the next runner; a silent runner of another host is listed OFFLINE until
    it has been quiet for a day; a beacon whose pid now belongs to another process expires."""
    victim = start_runner()
    wait_for(lambda: len(beacons(spool)) == 1 and len(probes(spool)) == 1, timeout=30)
    (dead,) = beacons(spool)
    assert listed_runners(spool) == [dead]
    victim.send_signal(signal.SIGKILL)
    victim.wait()  # reaped, as its service manager or cron's shell would
    assert listed_runners(spool) == []  # provably dead: never shown, not even OFFLINE
    foreign_beacon(spool, "elsewhere-7-aaaa", age=600)  # silent for 10 min: offline, kept
    foreign_beacon(spool, "elsewhere-8-bbbb", age=2 * 86400)  # silent for 2 days: expired
    # Same host, a live pid (ours) that started at another time: the pid was reused.
    reused = spool.runners / f"{HOSTNAME}-{os.getpid()}-cccc.json"
    reused.write_text(json.dumps({"runner": reused.stem, "host": HOSTNAME, "pid": os.getpid(), "started": 1}))
    old_probe = spool.private / "clock-status-4242-1"  # a `status` killed mid-way, long ago
    old_probe.write_text("x")
    os.utime(old_probe, (time.time() - 3600, time.time() - 3600))

    survivor = start_runner()
    wait_for(lambda: dead not in beacons(spool) and not reused.exists() and not old_probe.exists(), timeout=30)
    (alive,) = [b for b in beacons(spool) if b.startswith(f"{HOSTNAME}-{survivor.pid}-")]
    assert beacons(spool) == sorted([alive, "elsewhere-7-aaaa"])
    assert probes(spool) == [f"clock-{alive}"]
    status = json.loads(cli("status", "--json", "--spool", str(spool.root)).stdout)
    online = {r["runner"]: r["online"] for r in status["runners"]}
    assert online == {alive: True, "elsewhere-7-aaaa": False}


@pytest.mark.parametrize("beacon_before", [True, False], ids=["a-beacon-before", "first-write"])
def test_a_runner_killed_mid_beacon_write_leaves_nothing(
    spool: SpoolLayout, start_runner: Any, beacon_before: bool
) -> None:
    """ci14's leftover: a runner SIGKILLed between its beacon's temporary file and the rename
    (failpoint `beacon-before-replace`). The next runner removes the temporary file with the
    dead runner's beacon and probes at once, not after an hour of silence; also when the
    kill came at the runner's first write and no beacon names it."""
    victim = start_runner(env={"SPOOLRENDER_CRASH_AT": "beacon-before-replace"})
    assert victim.wait(timeout=120) == -signal.SIGKILL
    (temp,) = [n for n in os.listdir(spool.runners) if n.endswith(".tmp")]
    dead = temp.removeprefix(".").split(".json.")[0]
    assert dead.startswith(f"{HOSTNAME}-{victim.pid}-")
    if beacon_before:  # what an earlier heartbeat's write left: the same bytes, renamed
        (spool.runners / f"{dead}.json").write_bytes((spool.runners / temp).read_bytes())
    survivor = start_runner()
    wait_for(lambda: not any(dead in n for n in os.listdir(spool.runners) + os.listdir(spool.private)), timeout=60)
    assert survivor.poll() is None


@pytest.mark.parametrize("freeze", ["after-claim", "mid-render"])
def test_a_taken_over_runner_logs_no_error(spool: SpoolLayout, start_runner: Any, tmp_path: Path, freeze: str) -> None:
    """Item 22: a runner frozen (right after its claim, or mid-render) past the lease wakes to
    find its job recovered and done elsewhere. Nothing is left for a person to do: no
    ERROR, no "unreadable run record"."""
    write_spool_config(spool, {"slots": 1})
    steps = tmp_path / "steps"  # the render goes on only once its runner is frozen
    drop(spool, "long.yaml", command_job(steps_file=str(steps), content="the one video"))
    frozen_log = tmp_path / "frozen.log"
    if freeze == "after-claim":
        frozen = start_runner(log=frozen_log, env={"SPOOLRENDER_PAUSE_AT": "claim-after-rename"})
        wait_for(lambda: stopped(frozen), timeout=60)
    else:
        frozen = start_runner(log=frozen_log)
        wait_for(lambda: len(entries(spool, "running")) == 1, timeout=60)
        (entry,) = entries(spool, "running")
        wait_for(lambda: render_started(spool.running / entry), timeout=60)
        frozen.send_signal(signal.SIGSTOP)  # a VM pause: heartbeats stop, the render goes on
    allow_steps(steps, 10)
    other_log = tmp_path / "other.log"
    other = start_runner(log=other_log)
    wait_for(lambda: len(entries(spool, "done")) == 1 and not entries(spool, "running"), timeout=90)
    frozen.send_signal(signal.SIGCONT)
    # Mid-render: another runner took the run over. Right after the claim's rename (no private
    # copy yet): recovery gave the file back to incoming/, and the claim is lost.
    woke = ("took it over", "lost the claim", " ERROR ")
    wait_for(lambda: any(w in frozen_log.read_text() for w in woke), timeout=120)
    for proc in (frozen, other):
        proc.terminate()
        assert proc.wait(timeout=30) == 0
    text = frozen_log.read_text() + other_log.read_text()
    alarming = [line for line in text.splitlines() if " ERROR " in line or "unreadable run record" in line]
    assert alarming == []
    assert entries(spool, "failed") == [] and len(entries(spool, "done")) == 1


def test_a_directory_moving_while_its_runs_are_read_is_not_an_unreadable_record(
    spool: SpoolLayout, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Item 22: run files listed, then the job directory moved on: the caller learns that
    the directory moved (FileNotFoundError), and no record is blamed."""
    job_dir = spool.running / "x.aaaaaaaaaaaa.bbbbbbbbbbbb"
    job_dir.mkdir()
    record = RunRecord(run=1, outcome="retry", host="h", pid=1, token="t", ended=0.0)
    (job_dir / "run-0001.json").write_bytes(record.to_json())
    real = records.run_numbers

    def run_numbers(path: Path) -> list[int]:
        listed = real(path)
        os.rename(job_dir, spool.retry / "moved")
        return listed

    monkeypatch.setattr(records, "run_numbers", run_numbers)
    with pytest.raises(FileNotFoundError):
        records.read_runs(job_dir)
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []


@pytest.mark.parametrize("watch", ["inotify", "polling"])
def test_resume_wakes_runners_at_once(spool: SpoolLayout, start_runner: Any, tmp_path: Path, watch: str) -> None:
    """Item 23: after `resume`, claiming restarts at once (inotify) or at the next poll, not at
    the next rescan (a minute here, so only a wake-up can pass the deadline)."""
    write_spool_config(spool, {"rescan_seconds": 60, "watch": watch})
    root = str(spool.root)
    assert cli("pause", "--reason", "maintenance", "--spool", root).returncode == 0
    log = tmp_path / "runner.log"
    start_runner(log=log)
    drop(spool, "a.yaml", command_job())
    wait_for(lambda: "spool is paused" in log.read_text(), timeout=30)
    assert entries(spool, "incoming") == ["a.yaml"]
    assert cli("resume", "--spool", root).returncode == 0
    wait_for(lambda: len(entries(spool, "done")) == 1, timeout=30)


def test_a_drains_last_metrics_say_it_is_offline(spool: SpoolLayout, tmp_path: Path) -> None:
    """Item 24: the textfile a drain leaves for the scrape after it counts no runner online."""
    textfile = tmp_path / "drain.prom"
    drop(spool, "a.yaml", command_job())
    result = cli("run", "--drain", "--spool", str(spool.root), "--metrics-textfile", str(textfile))
    assert result.returncode == 0, result.stderr
    samples = {
        s.name: s.value for family in text_string_to_metric_families(textfile.read_text()) for s in family.samples
    }
    assert samples["spoolrender_runners_online"] == 0
    assert samples["spoolrender_slots_busy"] == 0
    assert beacons(spool) == [] and probes(spool) == []


def test_a_dead_runners_hooks_clock_probe_expires_with_its_beacon(spool: SpoolLayout) -> None:
    """The hooks thread probes the clock as ``clock-<runner>-hooks``: a provably dead runner's
    is removed at once with its beacon and main probe, not left for a lease of silence."""
    dead = f"{HOSTNAME}-{os.getpid()}-dddd"  # our pid, another start time: a reused pid
    (spool.runners / f"{dead}.json").write_text(
        json.dumps({"runner": dead, "host": HOSTNAME, "pid": os.getpid(), "started": 1})
    )
    alive = f"{HOSTNAME}-{os.getpid()}-eeee"  # our pid and start time: alive
    (spool.runners / f"{alive}.json").write_text(
        json.dumps({"runner": alive, "host": HOSTNAME, "pid": os.getpid(), "started": process_start(os.getpid())})
    )
    for runner in (dead, alive):
        probe_path(spool, runner).write_text("x")  # fresh: never expired for silence
        hooks_probe_path(spool, runner).write_text("x")
    assert expire_runners(spool, fs_now=time.time(), lease_seconds=3600) == [dead]
    assert probes(spool) == sorted([f"clock-{alive}", f"clock-{alive}-hooks"])
