"""Exactly-once and no loss under forced interleavings: runners frozen (SIGSTOP) at protocol
steps while other runners act, then woken. Real runner processes, real signals; the
verdict comes from the disk (invariants.audit) and from the runners' logs.

Each test reproduces a finding of issue 12 that failed on the code before its fix.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml
from invariants import audit
from support.processes import stopped
from support.spool_jobs import allow_steps

from spoolrender.cli.exit_codes import EXIT_PAUSED
from spoolrender.config.spool_config import load_config
from spoolrender.lifecycle.recovery import Recoverer
from spoolrender.spool.clock import ManualClock
from spoolrender.spool.heartbeat import HOSTNAME, Heartbeat, boot_id, lock_path, process_start
from spoolrender.spool.layout import SpoolLayout, init_spool, new_token, retry_name, running_name

RENDER_PROPS = Path(__file__).resolve().parent.parent / "programs" / "render_props.py"
CMD = [sys.executable, "-m", "spoolrender.cli"]
CONFIG = {
    "settle_seconds": 0, "heartbeat_seconds": 0.2, "lease_seconds": 2, "rescan_seconds": 0.3, "slots": 1,
    "backoff_base_seconds": 0.05, "backoff_cap_seconds": 0.1, "max_attempts": 5, "grace_seconds": 5,
    "commands": {"props": [sys.executable, str(RENDER_PROPS), "{output}", "{props_file}"]},
}  # fmt: skip


def make_spool(root: Path) -> SpoolLayout:
    layout = init_spool(root)
    (layout.root / "spoolrender.yaml").write_text(yaml.safe_dump(CONFIG))
    return layout


def drop(layout: SpoolLayout, name: str, props: dict[str, object]) -> None:
    tmp = layout.incoming / f".{name}.part"
    tmp.write_text(yaml.safe_dump({"renderer": "command", "command": "props", "props": props}))
    os.rename(tmp, layout.incoming / name)


def wait_for(predicate: Callable[[], bool], timeout: float = 60.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"{what}: not met within {timeout} s")


def names(layout: SpoolLayout, state: str) -> list[str]:
    return sorted(n for n in os.listdir(layout.state_dir(state)) if not n.startswith("."))


def alarming_lines(log: Path) -> list[str]:
    """Log lines that would page a person, or that blame a record for a directory that moved."""
    text = log.read_text(errors="replace") if log.exists() else ""
    return [line for line in text.splitlines() if " ERROR " in line or "unreadable run record" in line]


@pytest.fixture
def procs() -> Iterator[Callable[..., subprocess.Popen[bytes]]]:
    """Start `spoolrender run` processes; at teardown each is woken and stopped."""
    started: list[subprocess.Popen[bytes]] = []

    def start(
        layout: SpoolLayout, log: Path, *extra: str, pause_at: str = "", crash_at: str = ""
    ) -> subprocess.Popen[bytes]:
        env = {**os.environ, "SPOOLRENDER_PAUSE_AT": pause_at}
        if crash_at:
            env["SPOOLRENDER_CRASH_AT"] = crash_at
        with open(log, "ab") as out:
            proc = subprocess.Popen([*CMD, "run", "-v", "--spool", str(layout.root), *extra], stdout=out,
                                    stderr=subprocess.STDOUT, env=env)  # fmt: skip
        started.append(proc)
        return proc

    yield start
    for proc in started:
        if proc.poll() is None:
            proc.send_signal(signal.SIGCONT)
            proc.terminate()
    for proc in started:
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_late_retry_claimer_never_makes_a_phantom(
    tmp_path: Path, procs: Callable[..., subprocess.Popen[bytes]]
) -> None:
    """Item 2: a runner frozen right after renaming a job out of retry/ wakes after the job
    was recovered and finished elsewhere: it must not recreate running/<job>/, fail a
    phantom copy as invalid, or release the real job's id reservation."""
    layout = make_spool(tmp_path / "spool")
    (layout.root / "spoolrender.yaml").write_text(
        yaml.safe_dump({**CONFIG, "backoff_base_seconds": 600, "backoff_cap_seconds": 600})
    )
    drop(layout, "clip.yaml", {"content": "the one video", "fail_until_attempt": 2})
    first = subprocess.run([*CMD, "run", "--drain", "--spool", str(layout.root)], capture_output=True, timeout=120)
    assert first.returncode == 0 and len(names(layout, "retry")) == 1
    (entry,) = names(layout, "retry")
    uid = entry.rsplit(".", 1)[1]
    assert os.readlink(layout.ids / "clip") == uid
    os.rename(layout.retry / entry, layout.retry / retry_name("clip", uid, time.time(), 0))  # due now
    (layout.root / "spoolrender.yaml").write_text(yaml.safe_dump(CONFIG))

    late_log = tmp_path / "late.log"
    late = procs(layout, late_log, "--drain", pause_at="retry-claim-after-rename")
    wait_for(lambda: stopped(late), what="late claimer frozen after its rename")
    assert len(names(layout, "running")) == 1 and names(layout, "retry") == []

    other_log = tmp_path / "other.log"
    other = procs(layout, other_log)  # recovers the silent claim after the lease, then renders
    wait_for(lambda: len(names(layout, "done")) == 1 and not names(layout, "running"), what="recovered and done")

    late.send_signal(signal.SIGCONT)
    assert late.wait(timeout=60) == 0
    other.terminate()
    assert other.wait(timeout=30) == 0

    assert names(layout, "failed") == [] and names(layout, "running") == []
    assert os.readlink(layout.ids / "clip") == uid  # the exactly-once guard is intact
    result = audit(layout, {"clip"}, output_ok={"clip": b"the one video"})
    assert result.ok, result.problems()
    assert alarming_lines(late_log) == [] and alarming_lines(other_log) == []


@pytest.mark.parametrize("recoverer_dies", [False, True], ids=["recoverer-lives", "recoverer-killed-after-parking"])
def test_abandoned_claim_cleanup_never_deletes_a_job(
    tmp_path: Path, procs: Callable[..., subprocess.Popen[bytes]], recoverer_dies: bool
) -> None:
    """Item 3: recovery judged running/<job>/ abandoned (no job file yet), then the stalled
    claimer completed its rename before recovery removed the directory. Variant: the
    recoverer is SIGKILLed right after parking the claim; the next runner re-queues it."""
    layout = make_spool(tmp_path / "spool")
    drop(layout, "clip.yaml", {"content": "the one video"})
    claimer = procs(layout, tmp_path / "claimer.log", "--drain", pause_at="claim-before-rename,claim-after-rename")
    wait_for(lambda: stopped(claimer), what="claimer frozen before its rename")
    assert names(layout, "incoming") == ["clip.yaml"] and len(names(layout, "running")) == 1

    root = str(layout.root)
    assert subprocess.run([*CMD, "pause", "--spool", root], capture_output=True).returncode == 0
    rec_log = tmp_path / "recoverer.log"
    crash_at = "abandoned-claim-parked" if recoverer_dies else ""
    recoverer = procs(layout, rec_log, pause_at="abandoned-claim-before-remove", crash_at=crash_at)
    wait_for(lambda: stopped(recoverer), what="recoverer frozen after judging the claim abandoned")

    claimer.send_signal(signal.SIGCONT)  # the rename completes, then it freezes again
    (entry,) = names(layout, "running")
    wait_for(lambda: (layout.running / entry / "submitted.yaml").exists() and stopped(claimer), what="rename done")
    recoverer.send_signal(signal.SIGCONT)  # clears the "abandoned" claim
    wait_for(lambda: not names(layout, "running"), what="claim cleared")
    if recoverer_dies:
        assert recoverer.wait(timeout=60) == -signal.SIGKILL
        assert len(os.listdir(layout.private / "abandoned")) == 1  # parked, with the job file
        recoverer = procs(layout, rec_log)
    claimer.send_signal(signal.SIGCONT)
    # Recovery gave the file back to incoming/ while the claimer stalled (a claim that never
    # completed: no copy yet), so the claimer lost it and, the spool being paused, drained
    # with nothing claimed (EXIT_PAUSED); when the recoverer died after parking, the parked
    # claim is the next runner's, and the claimer's drain ends normally.
    expected_exit = 0 if recoverer_dies else EXIT_PAUSED
    assert claimer.wait(timeout=60) == expected_exit

    assert subprocess.run([*CMD, "resume", "--spool", root], capture_output=True).returncode == 0
    wait_for(lambda: len(names(layout, "done")) == 1, what="the job was lost: never done")
    recoverer.terminate()
    assert recoverer.wait(timeout=30) == 0
    result = audit(layout, {"clip"}, output_ok={"clip": b"the one video"})
    assert result.ok, result.problems()
    assert alarming_lines(tmp_path / "claimer.log") == [] and alarming_lines(rec_log) == []
    assert os.listdir(layout.private / "abandoned") == []


def test_decided_publish_is_finished_through_another_mount_path(tmp_path: Path) -> None:
    """Item 4: the decider died after deciding a publish; the spool (and its output root)
    is then reached through another path, as from a host that mounts it elsewhere."""
    layout = make_spool(tmp_path / "a" / "spool")
    drop(layout, "clip.yaml", {"content": "the one video"})
    env = {**os.environ, "SPOOLRENDER_CRASH_AT": "after-decide"}
    crashed = subprocess.run([*CMD, "run", "--drain", "--spool", str(layout.root)], env=env, capture_output=True)
    assert crashed.returncode == -9
    (entry,) = names(layout, "running")
    assert json.loads((layout.running / entry / "run-0001.json").read_text())["outcome"] == "publishing"

    os.rename(tmp_path / "a", tmp_path / "b")  # the same files, another path
    moved = SpoolLayout(tmp_path / "b" / "spool")
    deadline = time.monotonic() + 60
    while not names(moved, "done") and not names(moved, "failed") and time.monotonic() < deadline:
        subprocess.run([*CMD, "run", "--drain", "--spool", str(moved.root)], capture_output=True, timeout=120)
    assert names(moved, "failed") == []
    result = audit(moved, {"clip"}, output_ok={"clip": b"the one video"})
    assert result.ok, result.problems()
    assert result.where["clip"] == ["done"]


def _dead_owner_entry(layout: SpoolLayout, pgid: int, *, boot: str | None, start: int | None) -> Path:
    """A running/ entry of a dead same-host owner whose heartbeat names process group ``pgid``."""
    uid = new_token()
    job_dir = layout.running / running_name("clip", uid, uid)
    job_dir.mkdir()
    (job_dir / "job.yaml").write_text("renderer: command\ncommand: props\n")
    hb = Heartbeat(host=HOSTNAME, pid=999999, token=uid, run=1, counter=1, pgid=pgid, boot=boot, pgid_start=start)
    (job_dir / "heartbeat").write_bytes(hb.to_json())
    lock_path(job_dir, uid).touch()  # released: the owner is dead
    return job_dir


@pytest.mark.parametrize("case", ["no identity", "pid reused", "other boot", "same render"])
def test_recovery_kills_only_the_render_it_recorded(tmp_path: Path, case: str) -> None:
    """Item 5: the process group in a dead owner's heartbeat is killed only if it is still
    that render (same boot, same leader start time); an unrelated `setsid sleep` that has
    the recorded number survives."""
    layout = make_spool(tmp_path / "spool")
    config = load_config(layout.root, environ={})
    sleeper = subprocess.Popen(["sleep", "300"], start_new_session=True)  # its own group: pgid == pid
    try:
        start = process_start(sleeper.pid)
        assert start is not None
        identity = {
            "no identity": (None, None),  # a heartbeat of an older version
            "pid reused": (boot_id(), start + 1),
            "other boot": ("0" * 8 + "-ffff-ffff-ffff-" + "0" * 12, start),
            "same render": (boot_id(), start),
        }[case]
        job_dir = _dead_owner_entry(layout, sleeper.pid, boot=identity[0], start=identity[1])
        rec = Recoverer(layout, config, ManualClock(), random.Random(1))
        assert rec.sweep(set()) == [job_dir.name]
        if case == "same render":
            assert sleeper.wait(timeout=30) == -signal.SIGKILL
        else:
            # killpg() happens inside sweep(); a wrong kill shows within this bounded wait.
            with pytest.raises(subprocess.TimeoutExpired):
                sleeper.wait(timeout=1)
    finally:
        if sleeper.poll() is None:
            sleeper.kill()
        sleeper.wait()


def test_duplicate_id_never_taken_over_from_a_holder_claimed_during_the_lookup(
    tmp_path: Path, procs: Callable[..., subprocess.Popen[bytes]]
) -> None:
    """Item 1, with runner processes: a duplicate's runner is frozen between two listings of
    its lookup of the holder; meanwhile another runner claims the holder from retry/ and
    renders it. The duplicate must not take the id over (both would publish it)."""
    layout = make_spool(tmp_path / "spool")
    # Long lease: the frozen duplicate must not be recovered while the test holds it.
    slow = {**CONFIG, "backoff_base_seconds": 600, "backoff_cap_seconds": 600, "lease_seconds": 30}
    (layout.root / "spoolrender.yaml").write_text(yaml.safe_dump(slow))
    steps = tmp_path / "steps"  # the holder's second attempt renders until the duplicate is decided
    drop(layout, "clip.yaml", {"content": "the holder", "fail_until_attempt": 2, "steps_file": str(steps)})
    first = subprocess.run([*CMD, "run", "--drain", "--spool", str(layout.root)], capture_output=True, timeout=120)
    assert first.returncode == 0 and len(names(layout, "retry")) == 1  # the holder waits, not due
    tmp = layout.incoming / ".dup.part"
    tmp.write_text(yaml.safe_dump({"id": "clip", "output": "dup.mp4", "renderer": "command", "command": "props",
                                   "props": {"content": "the duplicate"}}))  # fmt: skip
    os.rename(tmp, layout.incoming / "dup.yaml")
    dup_log = tmp_path / "dup.log"
    dup = procs(layout, dup_log, "--drain", pause_at="id-holder-lookup")
    wait_for(lambda: stopped(dup), what="duplicate frozen inside its lookup of the holder")

    (entry,) = names(layout, "retry")
    uid = entry.rsplit(".", 1)[1]
    os.rename(layout.retry / entry, layout.retry / retry_name("clip", uid, time.time(), 0))  # due now
    holder = procs(layout, tmp_path / "holder.log", "--drain")
    wait_for(lambda: bool(names(layout, "running")) and not names(layout, "retry"), what="holder claimed")
    dup.send_signal(signal.SIGCONT)  # its lookup goes on while the holder renders
    assert dup.wait(timeout=60) == 3  # the duplicate failed: "already queued or running"
    allow_steps(steps, 10)
    assert holder.wait(timeout=60) == 0

    (done,) = names(layout, "done")
    assert done.endswith(uid) and os.readlink(layout.ids / "clip") == uid
    (failed,) = names(layout, "failed")
    reason = json.loads((layout.failed / failed / "failure.json").read_text())["reason"]
    assert "'clip' is already queued or running" in reason
    assert not (layout.root / "output" / "dup.mp4").exists()
