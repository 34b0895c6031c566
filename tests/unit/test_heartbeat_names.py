"""One heartbeat name per claim, and recovery that never touches a dead claim's files (issue 26).

On GlusterFS a host frozen whole in the middle of replacing its heartbeat keeps that name
locked on the bricks for as long as it is frozen, and any create, rename or unlink of the
name waits behind it (docs/reliability.md, "A frozen host's locks"). So each claim beats
under ``heartbeat-<token>``, an older runner's ``heartbeat`` is still read as a heartbeat,
and a recoverer only reads the dead claim's names: here its heartbeat is a FIFO (an open
for reading without O_NONBLOCK would wait for a writer forever) beside the temporary
file of a replace caught half way and its lock, and recovery still completes and leaves
all three as they were (same inode, same ctime: not renamed, linked, written or removed).
"""

from __future__ import annotations

import json
import os
import random
import stat
import threading
from pathlib import Path

from support.spool_jobs import entries
from support.waiting import wait_for

from spoolrender import defaults
from spoolrender.config.spool_config import SpoolConfig
from spoolrender.lifecycle.recovery import ABANDONED_DIR, Recoverer
from spoolrender.lifecycle.transitions import carry_out
from spoolrender.ops.running_items import listed_running_info, running_info
from spoolrender.spool.clock import ManualClock
from spoolrender.spool.heartbeat import (
    ActiveJob,
    Heartbeat,
    HeartbeatWriter,
    acquire_job_lock,
    heartbeat_path,
    lock_is_free,
    lock_path,
    read_heartbeat,
)
from spoolrender.spool.layout import RUNNING_NAME, SpoolLayout, new_token, running_name
from spoolrender.spool.records import RETRY, RunRecord, decide

JOB = b"renderer: command\ncommand: props\noutput: out/x.mp4\n"


def claim_dir(layout: SpoolLayout) -> tuple[Path, str]:
    token = new_token()
    job_dir = layout.running / running_name("x", token, token)
    job_dir.mkdir()
    (job_dir / defaults.JOB_FILENAME).write_bytes(JOB)
    return job_dir, token


def identity(path: Path) -> tuple[int, int, int]:
    st = os.lstat(path)
    return st.st_ino, st.st_ctime_ns, st.st_size


def test_a_claim_beats_under_its_own_name_and_status_reads_it(spool: SpoolLayout, config: SpoolConfig) -> None:
    job_dir, token = claim_dir(spool)
    writer = HeartbeatWriter(ManualClock(), 60.0, "runner")  # no thread: beats by hand
    writer.add(ActiveJob(job_dir, token, 1, 0.0, on_lost=lambda: None, progress=0.25))
    assert sorted(n for n in os.listdir(job_dir) if n.startswith("heartbeat")) == [f"heartbeat-{token}"]
    hb = read_heartbeat(job_dir)  # the token from the entry's name
    assert hb is not None and hb.token == token and hb.counter == 1
    # Through a path that does not name the entry (status reads via the directory's fd).
    fd = os.open(job_dir, os.O_RDONLY | os.O_DIRECTORY)
    try:
        through = Path(f"/proc/self/fd/{fd}")
        assert read_heartbeat(through) is None  # no token in that name: only an old `heartbeat`
        item = running_info(job_dir.name, through, now=0.0, fs_now=os.stat(job_dir).st_mtime, lease_seconds=60)
    finally:
        os.close(fd)
    assert item["progress"] == 0.25 and item["host"] == hb.host and item["heartbeat_age_seconds"] is not None
    listed = listed_running_info(spool, job_dir.name, now=0.0, fs_now=os.stat(job_dir).st_mtime, lease_seconds=60)
    assert listed is not None and listed["progress"] == 0.25 and listed["stale"] is False
    writer.remove(token)


def test_an_older_runners_heartbeat_name_is_still_a_heartbeat(spool: SpoolLayout, config: SpoolConfig) -> None:
    """A claim of a runner before per-claim names beats under ``heartbeat``: read as its
    heartbeat, judged alive while it changes, dead a lease after it stops."""
    job_dir, token = claim_dir(spool)
    old = job_dir / defaults.HEARTBEAT_FILENAME
    old.write_bytes(Heartbeat(host="old-host", pid=4242, token=token, run=1, counter=1).to_json())
    hb = read_heartbeat(job_dir)
    assert hb is not None and hb.host == "old-host"
    clock = ManualClock()
    rec = Recoverer(spool, config, clock, random.Random(1))
    assert rec.sweep(set()) == []
    clock.advance(config.lease_seconds - 0.1)
    old.write_bytes(Heartbeat(host="old-host", pid=4242, token=token, run=1, counter=2).to_json())
    assert rec.sweep(set()) == []  # it changed: alive
    clock.advance(config.lease_seconds)
    assert rec.sweep(set()) == [job_dir.name]
    (entry,) = entries(spool, "retry")
    run = json.loads((spool.retry / entry / "run-0001.json").read_text())
    assert run["outcome"] == RETRY and run["details"]["ran_on"] == "old-host"
    # The claim's own name wins over an older one left in the directory.
    job_dir, token = claim_dir(spool)
    older = Heartbeat(host="a", pid=1, token="0", run=1, counter=9)
    (job_dir / defaults.HEARTBEAT_FILENAME).write_bytes(older.to_json())
    heartbeat_path(job_dir, token).write_bytes(Heartbeat(host="b", pid=2, token=token, run=1, counter=1).to_json())
    hb = read_heartbeat(job_dir)
    assert hb is not None and hb.host == "b"


def test_recovery_completes_and_never_touches_the_dead_claims_files(spool: SpoolLayout, config: SpoolConfig) -> None:
    job_dir, token = claim_dir(spool)
    dead = [heartbeat_path(job_dir, token), job_dir / f".heartbeat-{token}.0123456789ab.tmp", lock_path(job_dir, token)]
    os.mkfifo(dead[0])  # cannot be opened for reading without waiting for a writer
    dead[1].write_bytes(b'{"half": ')  # a replace caught half way
    dead[2].touch()
    before = [identity(p) for p in dead]
    clock = ManualClock()
    rec = Recoverer(spool, config, clock, random.Random(1))
    recovered: list[list[str]] = []

    def sweeps() -> None:
        recovered.append(rec.sweep(set()))
        clock.advance(config.lease_seconds)
        recovered.append(rec.sweep(set()))

    sweeping = threading.Thread(target=sweeps, daemon=True)  # a hang fails the test, not the run
    sweeping.start()
    sweeping.join(60)
    assert not sweeping.is_alive(), "recovery waited on the dead claim's heartbeat"
    assert recovered == [[], [job_dir.name]]
    (entry,) = entries(spool, "retry")
    moved = spool.retry / entry
    run = json.loads((moved / "run-0001.json").read_text())
    assert run["outcome"] == RETRY and "no heartbeat: heartbeat unchanged" in run["error"]["message"]
    # The dead claim's names travelled with the job, untouched.
    assert [identity(moved / p.name) for p in dead] == before

    # The next claim beats under its own token beside them, and its own move takes its own
    # names only: the dead claim's are still the same files in done/.
    new_token_ = new_token()
    again = spool.running / running_name("x", RUNNING_NAME.fullmatch(job_dir.name)["uid"], new_token_)  # type: ignore[index]
    os.rename(moved, again)
    writer = HeartbeatWriter(ManualClock(), 60.0, "runner")
    writer.add(ActiveJob(again, new_token_, 2, 0.0, on_lost=lambda: None))
    lock_path(again, new_token_).touch()
    hb = read_heartbeat(again)
    assert hb is not None and hb.token == new_token_
    writer.remove(new_token_)
    record = RunRecord(run=2, outcome=RETRY, host="h", pid=1, token=new_token_, ended=0.0, due=0.0, attempt=2)
    assert decide(again, record)
    target = carry_out(spool, config.output_root, again, "x", token, record, claim_token=new_token_)
    assert not heartbeat_path(target, new_token_).exists() and not lock_path(target, new_token_).exists()
    assert [identity(target / p.name) for p in dead] == before


def test_a_parked_claims_leftovers_are_removed_off_the_recoverers_thread(
    spool: SpoolLayout, config: SpoolConfig
) -> None:
    """An abandoned claim (no job file) is parked by one rename and cleared by a thread of
    its own (background_removal): gone soon after the sweep, which never waits for it."""
    job_dir, token = claim_dir(spool)
    (job_dir / defaults.JOB_FILENAME).unlink()
    heartbeat_path(job_dir, token).write_bytes(Heartbeat(host="gone", pid=1, token=token, run=1, counter=1).to_json())
    clock = ManualClock()
    rec = Recoverer(spool, config, clock, random.Random(1))
    assert rec.sweep(set()) == []
    clock.advance(config.lease_seconds)
    assert rec.sweep(set()) == [job_dir.name]
    assert entries(spool, "running") == entries(spool, "retry") == []
    wait_for(lambda: os.listdir(spool.private / ABANDONED_DIR) == [], timeout=30)


def test_an_older_runners_recovered_claim_leaves_no_heartbeat_to_judge_the_next_claim_by(
    spool: SpoolLayout, config: SpoolConfig
) -> None:
    """An older runner (mixed versions) judges every claim by ``heartbeat`` alone: left in
    the directory by the recovery of its own dead claim, it would stand for the job's next
    claim (a newer runner's, beating under ``heartbeat-<token>``), its counter never
    changing, and that older runner would recover the live claim a lease later, at every
    claim of the job. The dead claim's ``heartbeat`` goes with the recovery, as older
    versions did (only the per-claim names are never touched)."""
    job_dir, token = claim_dir(spool)
    (job_dir / defaults.HEARTBEAT_FILENAME).write_bytes(
        Heartbeat(host="old-host", pid=4242, token=token, run=1, counter=7).to_json()
    )
    clock = ManualClock()
    rec = Recoverer(spool, config, clock, random.Random(1))
    assert rec.sweep(set()) == []
    clock.advance(config.lease_seconds)
    assert rec.sweep(set()) == [job_dir.name]
    (entry,) = entries(spool, "retry")
    # The next claim, a newer runner's: an older runner reads running/<entry>/heartbeat only.
    new_token_ = new_token()
    again = spool.running / running_name("x", RUNNING_NAME.fullmatch(job_dir.name)["uid"], new_token_)  # type: ignore[index]
    os.rename(spool.retry / entry, again)
    writer = HeartbeatWriter(ManualClock(), 60.0, "runner")
    writer.add(ActiveJob(again, new_token_, 2, 0.0, on_lost=lambda: None))
    try:
        assert not (again / defaults.HEARTBEAT_FILENAME).exists(), "the dead claim's heartbeat stands for the live one"
    finally:
        writer.remove(new_token_)


def test_a_claims_first_heartbeat_is_its_lock_file_and_the_next_beat_replaces_it(
    spool: SpoolLayout, config: SpoolConfig
) -> None:
    """The first beat is written into the claim's new lock file and linked as its heartbeat
    (one inode per claim less: P2, bench/README.md): complete at once, mode 0644 whatever
    the umask, the lock still held. The next beat replaces the heartbeat's name with a file
    of its own; the lock keeps its name, its inode and its flock. A recoverer (the same code
    an older runner runs) judges the claim by these names as before: alive while it is
    held and beats, dead once its lock is free."""
    job_dir, token = claim_dir(spool)
    lock = acquire_job_lock(job_dir, token)
    assert lock is not None
    writer = HeartbeatWriter(ManualClock(), 60.0, "runner")  # no thread: beats by hand
    job = ActiveJob(job_dir, token, 1, 0.0, on_lost=lambda: None)
    old_umask = os.umask(0o077)
    try:
        writer.add(job, lock)
    finally:
        os.umask(old_umask)
    hb_path, lock_file = heartbeat_path(job_dir, token), lock_path(job_dir, token)
    first = os.lstat(hb_path)
    assert first.st_ino == os.lstat(lock_file).st_ino and first.st_nlink == 2
    assert stat.S_IMODE(first.st_mode) == 0o644
    hb = read_heartbeat(job_dir)
    assert hb is not None and hb.token == token and hb.counter == 1
    assert not [n for n in os.listdir(job_dir) if n.endswith(".tmp")]
    assert not lock_is_free(job_dir, token)
    rec = Recoverer(spool, config, ManualClock(), random.Random(1))
    assert rec.sweep(set()) == []  # held on this host: alive

    writer.beat(job)
    second = os.lstat(hb_path)
    assert second.st_ino != first.st_ino and os.lstat(lock_file).st_ino == first.st_ino
    assert os.lstat(lock_file).st_nlink == 1
    hb = read_heartbeat(job_dir)
    assert hb is not None and hb.counter == 2
    assert not lock_is_free(job_dir, token)
    writer.remove(token)
    lock.release()
    assert lock_is_free(job_dir, token)
    assert rec.sweep(set()) == [job_dir.name]  # its lock free on this host: dead at once


def test_a_lock_file_found_there_is_locked_and_the_first_beat_has_a_file_of_its_own(
    spool: SpoolLayout, config: SpoolConfig
) -> None:
    """A lock file that exists already (not made by this claim) is locked all the same,
    and nothing is written into it: the first beat is an atomic replace, as every beat."""
    job_dir, token = claim_dir(spool)
    lock_path(job_dir, token).write_bytes(b"")
    lock = acquire_job_lock(job_dir, token)
    assert lock is not None and not lock.fresh
    writer = HeartbeatWriter(ManualClock(), 60.0, "runner")
    writer.add(ActiveJob(job_dir, token, 1, 0.0, on_lost=lambda: None), lock)
    try:
        assert os.lstat(heartbeat_path(job_dir, token)).st_ino != os.lstat(lock_path(job_dir, token)).st_ino
        assert os.path.getsize(lock_path(job_dir, token)) == 0
        assert not lock_is_free(job_dir, token)
    finally:
        writer.remove(token)
        lock.release()
