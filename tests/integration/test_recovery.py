"""Recovery decisions on a real spool, with an injected clock instead of sleeps."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import pytest
from support.spool_jobs import entries

from spoolrender import defaults
from spoolrender.config.spool_config import SpoolConfig
from spoolrender.errors import ClaimLost
from spoolrender.lifecycle.recovery import Recoverer
from spoolrender.spool.clock import ManualClock
from spoolrender.spool.durable import create_exclusive
from spoolrender.spool.heartbeat import (
    HOSTNAME,
    ActiveJob,
    Heartbeat,
    HeartbeatWriter,
    LivenessTracker,
    acquire_job_lock,
    lock_is_free,
    lock_path,
)
from spoolrender.spool.layout import SpoolLayout, new_token, running_name
from spoolrender.spool.publish import scratch_dir
from spoolrender.spool.records import PUBLISHING, REQUEUE, RETRY, SPOOL_IO, RunRecord, decide, run_path

JOB = b"renderer: command\ncommand: props\noutput: out/x.mp4\n"


def foreign_job(layout: SpoolLayout, host: str = "elsewhere", counter: int = 1, run: int = 1) -> Path:
    uid = new_token()
    token = uid
    job_dir = layout.running / running_name("x", uid, token)
    job_dir.mkdir()
    (job_dir / "job.yaml").write_bytes(JOB)
    beat(job_dir, host, token, counter, run)
    return job_dir


def beat(job_dir: Path, host: str, token: str, counter: int, run: int = 1) -> None:
    # A clock on the owner's host far off from ours: it must not matter.
    hb = Heartbeat(host=host, pid=999999, token=token, run=run, counter=counter, updated=4e9)
    (job_dir / "heartbeat").write_bytes(hb.to_json())


def test_foreign_owner_is_dead_only_after_lease_of_unchanged_heartbeat(spool: SpoolLayout, config: SpoolConfig) -> None:
    clock = ManualClock()
    rec = Recoverer(spool, config, clock, random.Random(1))
    job_dir = foreign_job(spool)
    token = job_dir.name.rsplit(".", 1)[1]
    assert rec.sweep(set()) == []
    clock.advance(config.lease_seconds - 0.1)
    assert rec.sweep(set()) == []
    beat(job_dir, "elsewhere", token, counter=2)  # alive after all: the lease starts again
    assert rec.sweep(set()) == []
    clock.advance(config.lease_seconds - 0.1)
    assert rec.sweep(set()) == []
    clock.advance(0.2)
    assert rec.sweep(set()) == [job_dir.name]
    (entry,) = entries(spool, "retry")
    run = json.loads((spool.retry / entry / "run-0001.json").read_text())
    assert run["outcome"] == RETRY and run["attempt"] == 1
    assert "heartbeat unchanged for 2 s" in run["error"]["message"]
    assert (spool.retry / entry / "job.yaml").read_bytes() == JOB


def test_missing_or_corrupt_heartbeat_falls_back_to_the_lease(spool: SpoolLayout, config: SpoolConfig) -> None:
    clock = ManualClock()
    rec = Recoverer(spool, config, clock, random.Random(1))
    job_dir = foreign_job(spool)
    (job_dir / "heartbeat").write_bytes(b"\x00garbage")
    assert rec.sweep(set()) == []
    clock.advance(config.lease_seconds)
    assert rec.sweep(set()) == [job_dir.name]


def test_same_host_released_lock_is_proof_at_once(spool: SpoolLayout, config: SpoolConfig) -> None:
    rec = Recoverer(spool, config, ManualClock(), random.Random(1))
    job_dir = foreign_job(spool, host=HOSTNAME)
    token = job_dir.name.rsplit(".", 1)[1]
    lock_path(job_dir, token).touch()  # left by a dead owner; nobody holds it
    assert rec.sweep(set()) == [job_dir.name]


def test_same_host_held_lock_is_alive(spool: SpoolLayout, config: SpoolConfig) -> None:
    clock = ManualClock()
    rec = Recoverer(spool, config, clock, random.Random(1))
    job_dir = foreign_job(spool, host=HOSTNAME)
    lock = acquire_job_lock(job_dir, job_dir.name.rsplit(".", 1)[1])
    try:
        assert rec.sweep(set()) == []
        clock.advance(1.0)
        assert rec.sweep(set()) == []
    finally:
        assert lock is not None
        lock.release()


def test_abandoned_claim_without_job_file_is_removed(spool: SpoolLayout, config: SpoolConfig) -> None:
    rec = Recoverer(spool, config, ManualClock(), random.Random(1))
    job_dir = foreign_job(spool, host=HOSTNAME)
    lock_path(job_dir, job_dir.name.rsplit(".", 1)[1]).touch()  # the dead owner's, released
    (job_dir / "job.yaml").unlink()
    assert rec.sweep(set()) == [job_dir.name]
    assert entries(spool, "running") == entries(spool, "retry") == []


def test_decided_publish_is_rolled_forward(spool: SpoolLayout, config: SpoolConfig) -> None:
    """The owner died after verifying and deciding, before publishing: finish its work."""
    clock = ManualClock()
    rec = Recoverer(spool, config, clock, random.Random(1))
    job_dir = foreign_job(spool)
    token = job_dir.name.rsplit(".", 1)[1]
    scratch = scratch_dir(config.output_root, job_dir.name)
    scratch.mkdir(parents=True)
    temp = scratch / "output.mp4"
    temp.write_bytes(b"finished video")
    publish = {
        "temp": str(temp),
        "output": "out/x.mp4",
        "replace": False,
        "bytes": 14,
        "inode": temp.stat().st_ino,
    }
    record = RunRecord(
        run=1, outcome=PUBLISHING, host="elsewhere", pid=1, token=token, ended=clock.wall(),
        started=clock.wall(), attempt=1, publish=publish,
    )  # fmt: skip
    assert create_exclusive(run_path(job_dir, 1), record.to_json())
    rec.sweep(set())
    clock.advance(config.lease_seconds)
    rec.sweep(set())
    (entry,) = entries(spool, "done")
    result = json.loads((spool.done / entry / "result.json").read_text())
    assert result["attempts"] == 1 and result["bytes"] == 14
    assert (config.output_root / "out" / "x.mp4").read_bytes() == b"finished video"
    assert not scratch.exists()


def test_decided_publish_already_linked_is_recognised_without_its_inode_number(
    spool: SpoolLayout, config: SpoolConfig
) -> None:
    """The owner died after linking the output and removing its temp, before done/.

    Simulated: over sshfs the recovering host sees another inode number than the one the
    owner recorded (tests/integration/test_fscheck.py shows that on real mounts); here the recorded
    number is made wrong. Size and mtime still recognise the output: done/, not failed/.
    """
    clock = ManualClock()
    rec = Recoverer(spool, config, clock, random.Random(1))
    job_dir = foreign_job(spool)
    token = job_dir.name.rsplit(".", 1)[1]
    scratch = scratch_dir(config.output_root, job_dir.name)
    scratch.mkdir(parents=True)
    temp = scratch / "output.mp4"
    temp.write_bytes(b"finished video")
    st = temp.stat()
    publish = {
        "temp": str(temp.relative_to(config.output_root)),
        "output": "x.mp4",
        "replace": False,
        "bytes": st.st_size,
        "inode": st.st_ino + 1,
        "mtime_ns": st.st_mtime_ns,
    }
    os.link(temp, config.output_root / "x.mp4")
    temp.unlink()
    record = RunRecord(
        run=1, outcome=PUBLISHING, host="elsewhere", pid=1, token=token, ended=clock.wall(),
        started=clock.wall(), attempt=1, publish=publish,
    )  # fmt: skip
    assert create_exclusive(run_path(job_dir, 1), record.to_json())
    rec.sweep(set())
    clock.advance(config.lease_seconds)
    rec.sweep(set())
    assert entries(spool, "failed") == []
    (entry,) = entries(spool, "done")
    result = json.loads((spool.done / entry / "result.json").read_text())
    assert result["bytes"] == 14 and (config.output_root / "x.mp4").read_bytes() == b"finished video"


def test_decided_retry_is_moved_without_counting_twice(spool: SpoolLayout, config: SpoolConfig) -> None:
    clock = ManualClock()
    rec = Recoverer(spool, config, clock, random.Random(1))
    job_dir = foreign_job(spool)
    token = job_dir.name.rsplit(".", 1)[1]
    record = RunRecord(
        run=1,
        outcome=RETRY,
        host="elsewhere",
        pid=1,
        token=token,
        ended=clock.wall(),
        attempt=1,
        due=clock.wall() + 5,
        error={"kind": "x", "message": "m", "transient": True},
    )
    assert create_exclusive(run_path(job_dir, 1), record.to_json())
    rec.sweep(set())
    clock.advance(config.lease_seconds)
    rec.sweep(set())
    (entry,) = entries(spool, "retry")
    assert sorted(p.name for p in (spool.retry / entry).glob("run-*.json")) == ["run-0001.json"]
    # Due 5 s after the decision by the spool's clock (the record's mtime), whatever the
    # decider's or the recoverer's wall clock says (ManualClock's is years off).
    decided = (spool.retry / entry / "run-0001.json").stat().st_mtime
    assert int(entry.split("-")[0]) == int((decided + 5) * 1000)


def test_last_attempt_lost_to_a_dead_runner_fails_the_job(spool: SpoolLayout, config: SpoolConfig) -> None:
    clock = ManualClock()
    rec = Recoverer(spool, config, clock, random.Random(1))
    job_dir = foreign_job(spool, run=3)
    token = job_dir.name.rsplit(".", 1)[1]
    for n in (1, 2):
        r = RunRecord(
            run=n,
            outcome=RETRY,
            host="h",
            pid=1,
            token=token,
            ended=0.0,
            attempt=n,
            error={"kind": "x", "message": "m", "transient": True},
        )
        assert create_exclusive(run_path(job_dir, n), r.to_json())
    rec.sweep(set())
    clock.advance(config.lease_seconds)
    rec.sweep(set())
    (entry,) = entries(spool, "failed")
    failure = json.loads((spool.failed / entry / "failure.json").read_text())
    assert failure["attempts"] == 3 and "no attempts left (3 of 3)" in failure["reason"]


def test_short_cron_drains_add_up_to_a_lease(spool: SpoolLayout) -> None:
    """A dead host's job is recovered by drains that each last less than the lease."""
    import subprocess
    import time

    from support.processes import spoolrender_cmd

    from spoolrender.spool.beacons import LIVENESS_DIR

    job_dir = foreign_job(spool)  # heartbeat from "elsewhere", never changing again
    shared = spool.private / LIVENESS_DIR / f"{HOSTNAME}.json"

    def sighting_on_record() -> float | None:
        """When this host's drains first saw the heartbeat unchanged (monotonic), if so far."""
        try:
            return float(json.loads(shared.read_bytes())["seen"][job_dir.name][1])
        except (FileNotFoundError, KeyError):
            return None

    started = time.monotonic()
    drains = 0
    while entries(spool, "running") and time.monotonic() - started < 120:
        before, t0 = sighting_on_record(), time.monotonic()
        subprocess.run(spoolrender_cmd("run", "--drain", "--spool", str(spool.root)), capture_output=True, check=False)
        drains += 1
        time.sleep(0.3)  # cron's interval, in short
    assert entries(spool, "running") == [], "never recovered"
    assert drains >= 2
    # The drain that recovered it built on a sighting an earlier drain left on record: the
    # lease was added up across processes. (Not a wall-clock bound on each drain: on a
    # loaded machine a drain's start-up alone can take longer than the lease.)
    assert before is not None and before < t0
    # Recovered to retry/ (due within the tiny test backoff, so the same drain may already
    # have run it on to done/ or failed/): exactly once, and its first run is the dead one.
    (where,) = [spool.state_dir(s) / e for s in ("retry", "done", "failed") for e in entries(spool, s)]
    assert where.name.endswith(job_dir.name.rsplit(".", 1)[0].split(".", 1)[1])
    first = json.loads((where / "run-0001.json").read_text())
    assert first["error"]["kind"] == "runner-died"


def test_wall_clock_jumps_never_make_a_live_owner_look_dead(spool: SpoolLayout, config: SpoolConfig) -> None:
    clock = ManualClock()
    rec = Recoverer(spool, config, clock, random.Random(1))
    job_dir = foreign_job(spool)
    token = job_dir.name.rsplit(".", 1)[1]
    for counter in range(2, 8):
        clock.jump_wall(7200 if counter % 2 else -7200)  # steps of two hours, both ways
        clock.advance(config.lease_seconds / 3)
        beat(job_dir, "elsewhere", token, counter)  # the owner keeps beating
        assert rec.sweep(set()) == []
    clock.jump_wall(86400)  # a day ahead: still only the monotonic lease counts
    clock.advance(config.lease_seconds)
    assert rec.sweep(set()) == [job_dir.name]


def test_nothing_recreates_a_running_entry_that_moved_away(spool: SpoolLayout, config: SpoolConfig) -> None:
    """Issue 12 item 2, the whole class: every write a claim's owner (or an observer) makes
    into running/<job>/ fails with ENOENT once the entry moved; none creates it again."""
    job_dir = foreign_job(spool, host=HOSTNAME)
    token = job_dir.name.rsplit(".", 1)[1]
    job_dir.rename(spool.retry / "moved-away")  # recovered by another runner meanwhile
    with pytest.raises(ClaimLost):
        acquire_job_lock(job_dir, token)
    assert not lock_is_free(job_dir, token)
    lost: list[str] = []
    writer = HeartbeatWriter(ManualClock(), 1.0, "r")
    writer.add(ActiveJob(job_dir, token, 1, 0.0, on_lost=lambda: lost.append("lost")))
    assert lost == ["lost"]
    record = RunRecord(run=1, outcome=RETRY, host=HOSTNAME, pid=1, token=token, ended=0.0)
    with pytest.raises(FileNotFoundError):
        decide(job_dir, record)
    assert not job_dir.exists() and entries(spool, "running") == []


def test_a_signature_seen_again_after_a_change_is_not_one_long_silence(tmp_path: Path) -> None:
    """A heartbeat file missing now and again is the same "no file" each time. A stale sighting
    of it written back by another process on the host (the owner itself, which never
    observes its own job) must not make the observer count the time in between as silence:
    test_faults' deleted-and-corrupted heartbeat got a live job taken away that way."""
    clock = ManualClock()
    state = tmp_path / "liveness.json"
    observer, owner = LivenessTracker(clock, state), LivenessTracker(clock, state)
    assert observer.silent_for("x", None) == 0.0  # heartbeat missing for a moment
    observer.save()
    owner.load()  # the owner merges it and writes it back on each of its sweeps
    clock.advance(0.5)
    assert observer.silent_for("x", ["token", 7]) == 0.0  # rewritten: alive
    clock.advance(0.5)
    assert observer.silent_for("x", None) == 0.0  # missing again, a new streak
    observer.save()
    owner.save()  # the stale sighting from a second ago
    observer.load()
    clock.advance(1.5)
    assert observer.silent_for("x", None) == 1.5  # not 2.5


def test_attempt_hosts_name_the_host_a_dead_runners_attempt_ran_on(spool: SpoolLayout, config: SpoolConfig) -> None:
    """The runner-died record is written by the recovering host; `attempt_hosts` names the
    host that ran the attempt and died (from its heartbeat), and the recoverer beside it."""
    clock = ManualClock()
    rec = Recoverer(spool, config, clock, random.Random(1))
    job_dir = foreign_job(spool, host="render-07")
    (job_dir / "job.yaml").write_bytes(JOB + b"max_attempts: 1\n")  # recovered straight to failed/
    assert rec.sweep(set()) == []
    clock.advance(config.lease_seconds + 0.1)
    assert rec.sweep(set()) == [job_dir.name]
    (entry,) = entries(spool, "failed")
    failure = json.loads((spool.failed / entry / "failure.json").read_text())
    assert failure["attempt_hosts"] == [
        {"attempt": 1, "host": "render-07", "outcome": "failed", "kind": "runner-died", "recovered_by": HOSTNAME}
    ]
    run = json.loads((spool.failed / entry / "run-0001.json").read_text())
    assert run["host"] == HOSTNAME and run["details"]["ran_on"] == "render-07"


@pytest.mark.parametrize("free_before", [0, 4, 5])
def test_owner_stopped_by_a_full_spool_is_requeued_free_a_bounded_number_of_times(
    spool: SpoolLayout, config: SpoolConfig, free_before: int
) -> None:
    """An owner whose heartbeat says it could not write to the spool died (a shutdown past
    its grace time): its run is requeued without an attempt, but after
    SPOOL_IO_FREE_REQUEUES free requeues in a row it uses one, saying why."""
    clock = ManualClock()
    rec = Recoverer(spool, config, clock, random.Random(1))
    job_dir = foreign_job(spool, run=free_before + 1)
    token = job_dir.name.rsplit(".", 1)[1]
    for n in range(1, free_before + 1):
        error = {"kind": SPOOL_IO, "message": "No space left on device (...)", "transient": True}
        r = RunRecord(run=n, outcome=REQUEUE, host="h", pid=1, token=token, ended=0.0, error=error)
        assert create_exclusive(run_path(job_dir, n), r.to_json())
    hb = Heartbeat(host="elsewhere", pid=999999, token=token, run=free_before + 1, counter=1,
                   spool_io="No space left on device")  # fmt: skip
    (job_dir / "heartbeat").write_bytes(hb.to_json())
    rec.sweep(set())
    clock.advance(config.lease_seconds)
    rec.sweep(set())
    (entry,) = entries(spool, "retry")
    run = json.loads(run_path(spool.retry / entry, free_before + 1).read_text())
    assert run["error"]["kind"] == SPOOL_IO and run["error"]["message"].startswith("No space left on device")
    if free_before < defaults.SPOOL_IO_FREE_REQUEUES:
        assert (run["outcome"], run["attempt"]) == (REQUEUE, None)
        assert "requeued without using an attempt" in run["error"]["message"]
    else:
        assert (run["outcome"], run["attempt"]) == (RETRY, 1)
        assert f"counted as an attempt: requeued {free_before} times in a row" in run["error"]["message"]
