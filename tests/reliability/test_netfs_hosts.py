"""Several hosts on one spool over a real network filesystem: sshfs (FUSE over SFTP).

OpenSSH's sshd serves a directory from a network namespace of its own; four "hosts", each
with its own network (a veth link to the server), UTS, PID and mount namespaces, mount it
with sshfs (`netfs_lab.SSHFS_OPTIONS`) and share a spool through it: two long-running
runners, one with its wall clock an hour fast, and a cron-style host that starts
`spoolrender run --drain` again and again. Jobs are dropped on the server's disk, as scp
would. Then the host rendering a long job is killed (SIGKILL of every process in its
namespace, sshfs included) and another one frozen (SIGSTOP of all of them, a VM pause)
past the lease, and thawed.

Judged from the server's disk: every job rendered (counted by a file per render) and
published exactly once, nothing lost or duplicated, no partial or hidden files, the two
victims' jobs recovered after the lease by other hosts, the frozen host never publishing.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest
import yaml
from invariants import audit, probe_leftovers, render_orphans
from netfs_lab import Host, NetfsLab, beacon_hosts, missing, runner_argv, unexplained_hidden_files, wait_until
from support.chunk_jobs import FRAMES_CONFIG, chunk_leftovers, frames_job, video

from spoolrender.spool.heartbeat import Heartbeat, read_heartbeat
from spoolrender.spool.layout import SpoolLayout, init_spool
from spoolrender.spool.publish import SCRATCH_DIR

pytestmark = pytest.mark.skipif(missing() is not None, reason=str(missing()))

RENDER_PROPS = Path(__file__).resolve().parent.parent / "programs" / "render_props.py"
LEASE = 4.0
JOBS = 100
LONG = 6.0  # seconds a long job renders: long enough to be caught mid-render


def drop(layout: SpoolLayout, name: str, job: dict[str, object]) -> None:
    # Written on the server's disk under a hidden name, renamed into place (as scp or
    # rsync leave a finished upload).
    tmp = layout.incoming / f".{name}.part"
    tmp.write_text(yaml.safe_dump(job))
    os.rename(tmp, layout.incoming / name)


def rendering(layout: SpoolLayout, job_id: str) -> tuple[str, Heartbeat] | None:
    for name in os.listdir(layout.running):
        if name.startswith(f"{job_id}."):
            hb = read_heartbeat(layout.running / name)
            if hb is not None and hb.pgid is not None:
                return name, hb
    return None


def test_sshfs_hosts_exactly_once_kill_freeze_and_cron_drain(tmp_path: Path) -> None:
    share = tmp_path / "share"  # the server's disk
    layout = init_spool(share / "spool")
    (share / "renders").mkdir()
    lab = NetfsLab(tmp_path, share)
    mounted = lab.mountpoint  # where every host sees the share
    # One file per render, named by job, host and pid: counts renders without appends
    # from several sshfs clients into one file.
    quick = ["sh", "-c", 'echo "$2" > "$3/$2.$(hostname).$$" && echo "$2" > "$1"',
             "sh", "{output}", "{job_id}", str(mounted / "renders")]  # fmt: skip
    config = {
        "settle_seconds": 0.3, "heartbeat_seconds": 0.4, "lease_seconds": LEASE, "rescan_seconds": 0.5,
        "poll_seconds": 0.3, "backoff_base_seconds": 0.05, "backoff_cap_seconds": 0.1, "slots": 2,
        "commands": {"quick": quick, "props": [sys.executable, str(RENDER_PROPS), "{output}", "{props_file}"]},
    }  # fmt: skip
    (layout.root / "spoolrender.yaml").write_text(yaml.safe_dump(config))
    spool = mounted / "spool"
    logs = {name: tmp_path / f"{name}.log" for name in ("host-a", "host-b", "host-c", "host-d")}
    hosts: dict[str, Host] = {}
    figures: dict[str, float] = {}
    try:
        hosts["host-a"] = lab.host("host-a", runner_argv(spool), logs["host-a"])
        hosts["host-b"] = lab.host("host-b", runner_argv(spool), logs["host-b"], skew=3600.0)
        hosts["host-c"] = lab.host("host-c", runner_argv(spool), logs["host-c"])
        hosts["host-d"] = lab.host("host-d", runner_argv(spool, drain=True), logs["host-d"])
        # Every long-running host up (its beacon written) before the jobs arrive.
        wait_until(lambda: {"host-a", "host-b", "host-c"} <= beacon_hosts(layout), 90, "runners up")

        # 1. A burst of jobs for everyone, the cron host's drains included.
        for i in range(JOBS):
            drop(layout, f"j{i:04d}.yaml", {"renderer": "command", "command": "quick"})
        figures["burst"] = wait_until(lambda: len(os.listdir(layout.done)) == JOBS, 240, "burst done")

        # 2. Power cut: the host rendering a long job loses every process at once.
        drop(layout, "killed.yaml", {"renderer": "command", "command": "props", "props": {"sleep": LONG}})
        wait_until(lambda: rendering(layout, "killed"), 60, "killed job rendering")
        found = rendering(layout, "killed")
        assert found is not None
        killed_entry, hb = found
        killed = hosts[hb.host]
        killed.kill()
        figures["kill_recovered"] = wait_until(
            lambda: killed_entry not in os.listdir(layout.running), LEASE * 6, "killed host's job recovered"
        )
        wait_until(lambda: len(os.listdir(layout.done)) == JOBS + 1, 120, "killed host's job done elsewhere")

        # 3. A VM pause: the host rendering the next long job is frozen whole past the lease.
        drop(layout, "frozen.yaml", {"renderer": "command", "command": "props", "props": {"sleep": LONG}})
        wait_until(lambda: rendering(layout, "frozen"), 60, "frozen job rendering")
        found = rendering(layout, "frozen")
        assert found is not None
        frozen_entry, hb = found
        frozen = hosts[hb.host]
        frozen.freeze()
        figures["freeze_recovered"] = wait_until(
            lambda: frozen_entry not in os.listdir(layout.running), LEASE * 6, "frozen host's job recovered"
        )
        wait_until(lambda: len(os.listdir(layout.done)) == JOBS + 2, 120, "both long jobs done elsewhere")
        frozen.thaw()
        # The thawed runner finds its job taken over and lets it go (fencing).
        wait_until(lambda: "took it over" in logs[frozen.name].read_text(), 60, "thawed host lets go")
        # A job is in done/ before its runner removes its scratch dir: let every runner
        # finish (or sweep) before the hosts go, so the audit judges a quiet spool.
        scratch = layout.root / "output" / SCRATCH_DIR
        wait_until(lambda: not os.listdir(scratch), 60, "scratch dirs removed")
        # Every host stopped whole (a power cut: the lab kills), then started once more for one
        # drain. A cron drain killed in its start-up probe leaves the probe's directory in the
        # scratch dir, and only its own host can tell that it is dead before an hour has passed
        # (spoolrender.spool.probe_dirs): its next start removes it. Audited straight after the
        # kill, 1 in 15 such kills of an sshfs cron host left one (measured).
        for stopped in hosts.values():
            stopped.stop()
        back = [lab.host(name, [*runner_argv(spool), "--drain"], logs[name]) for name in hosts]
        for started in back:
            assert started.proc.wait(timeout=240) == 0, logs[started.name].read_text()[-3000:]
    finally:
        lab.close()
    assert str(tmp_path) not in Path("/proc/mounts").read_text(), "a mount outlived the lab"
    assert render_orphans(str(mounted)) == []
    assert probe_leftovers(layout) == []

    # Exactly once: one render per quick job, each published once (audit below).
    per_job: dict[str, int] = {}
    by_host: dict[str, int] = {}
    for name in os.listdir(share / "renders"):
        job_id, host, _pid = name.split(".")
        per_job[job_id] = per_job.get(job_id, 0) + 1
        by_host[host] = by_host.get(host, 0) + 1
    assert len(per_job) == JOBS and set(per_job.values()) == {1}, per_job
    assert set(by_host) == set(hosts), by_host  # every host rendered, the cron host too
    for name in ("host-a", "host-b", "host-c"):
        assert "watch=polling" in logs[name].read_text()  # chose polling on fuse.sshfs
    for name, path in logs.items():
        text = path.read_text()
        # Nothing a person must act on, and no claim left behind by a lost race (a
        # heartbeat written while the claim dir was removed, once seen over sshfs).
        assert "ERROR" not in text and "Traceback" not in text, (name, text[-3000:])
        assert "removed abandoned claim" not in text, name

    ids = {f"j{i:04d}" for i in range(JOBS)} | {"killed", "frozen"}
    result = audit(layout, ids, check_processes=False)
    assert not result.lost and not result.duplicated and not result.partial_files, result.problems()
    assert not result.bad_outputs and not result.attempt_violations, result.problems()
    assert result.states["done"] == JOBS + 2, result.states
    hidden = unexplained_hidden_files(share)
    assert not hidden, hidden

    runs = {}
    for name in os.listdir(layout.done):
        record = json.loads((layout.done / name / "result.json").read_text())
        runs[record["id"]] = record
    for job_id, victim in (("killed", killed), ("frozen", frozen)):
        record = runs[job_id]
        died = [r for r in record["runs"] if (r.get("error") or {}).get("kind") == "runner-died"]
        assert len(died) == 1, record["runs"]
        assert "heartbeat unchanged" in died[0]["error"]["message"]
        assert died[0]["host"] != victim.name and record["host"] != victim.name
    # Nobody else was ever judged dead: the skewed clock and sshfs's latency fooled no one.
    skewed = [r for rec in runs.values() for r in rec["runs"] if r["host"] == "host-b"]
    assert skewed and all(r["ended"] > time.time() + 3000 for r in skewed)  # the skew was real
    others = [r for job_id, rec in runs.items() if job_id not in ("killed", "frozen") for r in rec["runs"]]
    assert all(r["outcome"] == "publishing" for r in others)
    # Recovery came from the lease, measured from the kill or the freeze: never before it,
    # and not from host-b's clock (an hour ahead, it would judge at once or never). The upper
    # bound is the GlusterFS test's: a loaded machine delays the recoverers' rescans (9.3 s
    # seen at load 62, against the 10 s this bound was), and speed is the benchmarks' business.
    for key in ("kill_recovered", "freeze_recovered"):
        assert LEASE - 1.0 <= figures[key] <= LEASE + 60, figures
    print(f"\nsshfs hosts: {JOBS} jobs, 4 hosts, 1 killed, 1 frozen; "
          + ", ".join(f"{k} {v:.1f} s" for k, v in figures.items()) + f"; renders by host {by_host}")  # fmt: skip


def test_sshfs_hosts_render_the_chunks_of_split_jobs_on_every_host(tmp_path: Path) -> None:
    """Issue 14: split jobs on four sshfs hosts (one skewed an hour, one a cron drain), one
    slot each: the chunks of one job spread over every host (each chunk waits until all
    four have started, so no host can render two), and every video is published once with
    every frame in order, nothing of its chunks left."""
    share = tmp_path / "share"
    layout = init_spool(share / "spool")
    (share / "hosts").mkdir()
    (share / "barrier").mkdir()
    lab = NetfsLab(tmp_path, share)
    mounted = lab.mountpoint
    config = {
        "settle_seconds": 0.3, "heartbeat_seconds": 0.4, "lease_seconds": LEASE, "rescan_seconds": 0.5,
        "poll_seconds": 0.3, "backoff_base_seconds": 0.05, "backoff_cap_seconds": 0.1, "slots": 1,
        **FRAMES_CONFIG,
    }  # fmt: skip
    (layout.root / "spoolrender.yaml").write_text(yaml.safe_dump(config))
    spool = mounted / "spool"
    names = ("host-a", "host-b", "host-c", "host-d")
    logs = {name: tmp_path / f"{name}.log" for name in names}
    try:
        lab.host("host-a", runner_argv(spool), logs["host-a"])
        lab.host("host-b", runner_argv(spool), logs["host-b"], skew=3600.0)
        lab.host("host-c", runner_argv(spool), logs["host-c"])
        lab.host("host-d", runner_argv(spool, drain=True), logs["host-d"])
        wait_until(lambda: {"host-a", "host-b", "host-c"} <= beacon_hosts(layout), 90, "runners up")
        wide = frames_job(4, barrier_dir=str(mounted / "barrier"), barrier=4, host_dir=str(mounted / "hosts"))
        drop(layout, "wide.yaml", wide)
        wait_until(lambda: len(os.listdir(layout.done)) == 1, 240, "the wide job done")
        drop(layout, "many.yaml", frames_job(8, frames=80, sleep=0.02))
        wait_until(lambda: len(os.listdir(layout.done)) == 2, 240, "the 8-chunk job done")
        wait_until(lambda: chunk_leftovers(layout, layout.root / "output") == [], 60, "chunk files removed")
        wait_until(lambda: not os.listdir(layout.root / "output" / SCRATCH_DIR), 60, "scratch dirs removed")
    finally:
        lab.close()
    assert str(tmp_path) not in Path("/proc/mounts").read_text(), "a mount outlived the lab"
    rendered = [name.split(".") for name in os.listdir(share / "hosts")]
    assert sorted(int(index) for index, _, _ in rendered) == [0, 1, 2, 3]
    assert {host for _, host, _ in rendered} == set(names), rendered  # every host rendered a chunk
    for name, path in logs.items():
        text = path.read_text()
        assert "ERROR" not in text and "Traceback" not in text, (name, text[-3000:])
    result = audit(layout, {"wide", "many"}, output_ok={"wide": video(40).encode(), "many": video(80).encode()},
                   check_processes=False)  # fmt: skip
    assert result.ok, result.problems()
    for name in os.listdir(layout.done):
        outcomes = [r["outcome"] for r in json.loads((layout.done / name / "result.json").read_text())["runs"]]
        # Split once, joined once. Between the two, only more "split" runs, each of which
        # queued a chunk again: a host whose sshfs view lagged (seen once in a loaded full
        # run) either found a chunk neither waiting, running nor finished for a lease (the
        # sweep wakes the job) or a finished chunk's files not there at the join; the first
        # copy to finish is the chunk, and the audit above holds (published once, every frame
        # in order). Never a retry, a failure or a second join.
        assert outcomes[0] == "split" and outcomes[-1] == "publishing", outcomes
        assert set(outcomes[1:-1]) <= {"split"}, outcomes


def test_a_host_killed_whole_logs_nothing_after_its_mount_dies(tmp_path: Path) -> None:
    """ci14's ERROR: the lab SIGKILLed a host's processes one by one, and a runner listed after
    sshfs (pids wrapped around; a cron host's drains always) met its dead mount, logged
    `ERROR spool trouble ([Errno 103] Software caused connection abort ...)` and only then
    died. Host.kill stops every process first: here sshfs is killed a whole second before
    the rest (the gap a wrapped order gives in microseconds), and no host logs a thing."""
    share = tmp_path / "share"
    layout = init_spool(share / "spool")
    (layout.root / "spoolrender.yaml").write_text(yaml.safe_dump({"rescan_seconds": 0.2, "poll_seconds": 0.2}))
    lab = NetfsLab(tmp_path, share)
    spool = lab.mountpoint / "spool"
    logs = {name: tmp_path / f"{name}.log" for name in ("host-a", "host-d")}
    try:
        hosts = {
            "host-a": lab.host("host-a", runner_argv(spool), logs["host-a"]),
            "host-d": lab.host("host-d", runner_argv(spool, drain=True), logs["host-d"]),
        }
        wait_until(lambda: "drained" in logs["host-d"].read_text(), 120, "a cron drain done")
        wait_until(lambda: "host-a" in beacon_hosts(layout), 90, "host-a's runner up")
        for host in hosts.values():
            assert host.kill(mount_first_gap=1.0)
    finally:
        lab.close()
    for name, path in logs.items():
        text = path.read_text()
        assert "ERROR" not in text and "Traceback" not in text, (name, text[-2000:])
