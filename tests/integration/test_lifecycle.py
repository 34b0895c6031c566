"""Each state of a job's life, driven by a real runner over a real spool in a temp dir."""

from __future__ import annotations

import json
import os
import random
import stat
import time
from pathlib import Path
from typing import Any

from support.spool_jobs import command_job, drop, entries, write_spool_config

from spoolrender.config.spool_config import load_config
from spoolrender.core.retry_policy import RetryPolicy
from spoolrender.runner.loop import Runner, RunSummary
from spoolrender.spool.clock import ManualClock
from spoolrender.spool.layout import RETRY_NAME, SpoolLayout


def drain(layout: SpoolLayout, **kwargs: Any) -> RunSummary:
    return Runner(load_config(layout.root, environ={}), drain=True, **kwargs).run()


def drain_until(layout: SpoolLayout, state: str, count: int, timeout: float = 60) -> None:
    """Drain repeatedly (retries become due between drains) until ``count`` jobs are in ``state``."""
    deadline = time.monotonic() + timeout
    while len(entries(layout, state)) < count:
        assert time.monotonic() < deadline, f"never reached {count} in {state}: {entries(layout, state)}"
        drain(layout)
        time.sleep(0.05)


def record(layout: SpoolLayout, state: str, filename: str) -> dict[str, Any]:
    (entry,) = entries(layout, state)
    data: dict[str, Any] = json.loads((layout.state_dir(state) / entry / filename).read_text())
    return data


def test_success_publishes_output_and_keeps_job_bytes(spool: SpoolLayout) -> None:
    original = (
        b"# my job, byte for byte\nrenderer: command\ncommand: props\noutput: videos/a.mp4\nprops:\n  content: hello\n"
    )
    drop(spool, "a.yaml", original)
    summary = drain(spool)
    assert summary.done == 1
    (entry,) = entries(spool, "done")
    assert entry.startswith("a.")
    assert (spool.done / entry / "job.yaml").read_bytes() == original
    result = record(spool, "done", "result.json")
    out = spool.root / "output" / "videos" / "a.mp4"
    assert result["output"] == str(out) and result["bytes"] == 5 and result["attempts"] == 1
    assert out.read_bytes() == b"hello"
    assert (spool.done / entry / "run-0001.log").read_text().count("PROGRESS") == 10
    # Nothing left behind: no scratch, no heartbeat or lock outside running/ (the owner's
    # move removes its own claim's).
    assert os.listdir(spool.root / "output" / ".spoolrender-tmp") == []
    assert [n for n in os.listdir(spool.done / entry) if n.startswith(("heartbeat", "lock"))] == []
    assert entries(spool, "incoming") == entries(spool, "running") == []


def test_permanent_failure_goes_to_failed_with_reason(spool: SpoolLayout) -> None:
    drop(spool, "bad.yaml", command_job(exit=65, message="props.title is missing"))
    drain(spool)
    failure = record(spool, "failed", "failure.json")
    assert failure["reason"] == "command 'props' exited with status 65: props.title is missing"
    assert failure["attempts"] == 1 and failure["kind"] == "command-exit"
    assert not (spool.root / "output" / "bad.mp4").exists()


def test_transient_failure_retries_then_succeeds(spool: SpoolLayout) -> None:
    drop(spool, "flaky.yaml", command_job(fail_until_attempt=3))
    drain_until(spool, "done", 1)
    result = record(spool, "done", "result.json")
    assert result["attempts"] == 3
    assert [r["outcome"] for r in result["runs"]] == ["retry", "retry", "publishing"]
    # A retried job keeps the id (and default output) of its original file name.
    assert result["id"] == "flaky" and result["output"].endswith("/output/flaky.mp4")
    assert sorted(os.listdir(spool.ids)) == ["flaky"]
    assert all(r["error"]["transient"] for r in result["runs"][:2])


def test_transient_failures_exhaust_attempts(spool: SpoolLayout) -> None:
    job = {**command_job(exit=1), "max_attempts": 2}
    drop(spool, "doomed.yaml", job)
    drain_until(spool, "failed", 1)
    failure = record(spool, "failed", "failure.json")
    assert failure["attempts"] == 2
    assert failure["reason"].endswith("(attempt 2 of 2, none left)")


def test_invalid_job_fails_and_queue_goes_on(spool: SpoolLayout) -> None:
    drop(spool, "broken.yaml", "renderer: command\ncommand: nope\ntimeout: soon\n")
    drop(spool, "good.yaml", command_job())
    summary = drain(spool)
    assert (summary.done, summary.failed) == (1, 1)
    failure = record(spool, "failed", "failure.json")
    assert "field 'command'" in failure["reason"] and "field 'timeout'" in failure["reason"]


def test_backoff_runs_on_the_spool_clock_whatever_the_hosts_wall_clock_says(spool: SpoolLayout) -> None:
    # The runner's wall clock is a day ahead (an injected clock); the spool's is the files'.
    write_spool_config(spool, {"backoff_base_seconds": 4, "backoff_cap_seconds": 4})
    clock = ManualClock(wall=time.time() + 86400)
    drop(spool, "flaky.yaml", command_job(fail_until_attempt=2))
    drain(spool, clock=clock, rng=random.Random(7))
    (name,) = entries(spool, "retry")
    m = RETRY_NAME.fullmatch(name)
    assert m is not None
    decided = (spool.retry / name / "run-0001.json").stat().st_mtime
    # Due 2-4 s (equal jitter) after the decision by the spool's clock, not a day later.
    assert 2 <= int(m.group("due")) / 1000 - decided <= 4.01
    run = json.loads((spool.retry / name / "run-0001.json").read_text())
    assert abs(run["details"]["clock_offset_seconds"] - 86400) < 5  # both clocks recorded
    clock.jump_wall(86400)  # stepped another day forward mid-backoff: still not due
    assert drain(spool, clock=clock).claimed == 0
    deadline = time.monotonic() + 30
    while not entries(spool, "done"):
        assert time.monotonic() < deadline
        drain(spool, clock=clock)
        time.sleep(0.1)
    assert time.time() >= int(m.group("due")) / 1000  # claimed once due on the spool's clock


def test_backoff_doubles_and_caps() -> None:
    rng = random.Random(1)
    for attempt in range(1, 12):
        full = min(60.0, 1.0 * 2 ** (attempt - 1))
        d = RetryPolicy(1.0, 60.0, jitter=True).delay(attempt, rng)
        assert full / 2 <= d <= full


def test_not_before_waits_in_incoming(spool: SpoolLayout) -> None:
    drop(spool, "later.yaml", {**command_job(), "not_before": "2099-01-01T00:00:00Z"})
    drop(spool, "past.yaml", {**command_job(), "not_before": "2001-01-01T00:00:00+02:00"})
    summary = drain(spool)
    assert summary.done == 1
    assert entries(spool, "incoming") == ["later.yaml"]


def test_priority_orders_the_queue(spool: SpoolLayout, tmp_path: Path) -> None:
    write_spool_config(spool, {"slots": 1})
    marker = tmp_path / "order.txt"
    for name, prio in (("low", -5), ("mid", 0), ("high", 9)):
        drop(spool, f"{name}.yaml", {**command_job(marker=str(marker), tag=name), "priority": prio})
    drain(spool)
    assert [line.split()[0] for line in marker.read_text().splitlines()] == ["high", "mid", "low"]


def test_duplicate_id_rejected_unless_rerun(spool: SpoolLayout) -> None:
    drop(spool, "first.yaml", {**command_job(content="one"), "id": "clip", "output": "clip.mp4"})
    drain(spool)
    drop(spool, "second.yaml", {**command_job(content="two"), "id": "clip", "output": "clip2.mp4"})
    drain(spool)
    failure = record(spool, "failed", "failure.json")
    assert "'clip' was already rendered" in failure["reason"] and "rerun: true" in failure["reason"]
    drop(
        spool,
        "third.yaml",
        {**command_job(content="three"), "id": "clip", "output": "clip.mp4", "rerun": True},
    )
    drain(spool)
    assert len(entries(spool, "done")) == 2
    assert (spool.root / "output" / "clip.mp4").read_bytes() == b"three"


def test_existing_output_is_not_clobbered(spool: SpoolLayout) -> None:
    out = spool.root / "output" / "taken.mp4"
    out.parent.mkdir(parents=True)
    out.write_bytes(b"someone else's video")
    drop(spool, "j.yaml", {**command_job(), "output": "taken.mp4"})
    drain(spool)
    assert "already exists" in record(spool, "failed", "failure.json")["reason"]
    assert out.read_bytes() == b"someone else's video"


def test_failed_id_can_be_submitted_again(spool: SpoolLayout) -> None:
    drop(spool, "x.yaml", command_job(exit=65))
    drain(spool)
    drop(spool, "x.yaml", command_job())
    assert drain(spool).done == 1


def test_upload_names_are_never_claimed(spool: SpoolLayout) -> None:
    for name in (".hidden.yaml", "up.yaml.part", "up.yaml.tmp", "up.yaml~"):
        (spool.incoming / name).write_text("renderer: command\ncommand: props\n")
        old = time.time() - 3600
        os.utime(spool.incoming / name, (old, old))
    assert drain(spool).claimed == 0
    assert len(entries(spool, "incoming")) == 4


def test_symlinks_fifos_and_directories_fail_with_a_reason(spool: SpoolLayout, tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("renderer: command\ncommand: props\n")
    os.symlink(secret, spool.incoming / "link.yaml")
    os.mkfifo(spool.incoming / "fifo.yaml")
    (spool.incoming / "dir.yaml").mkdir()
    (spool.incoming / "big.yaml").write_bytes(b"# " + b"x" * 2000 + b"\n")
    write_spool_config(spool, {"max_job_bytes": 1000})
    drop(spool, "fine.yaml", command_job())
    summary = drain(spool)
    assert (summary.done, summary.failed) == (1, 4)
    reasons = {}
    for entry in entries(spool, "failed"):
        failure = json.loads((spool.failed / entry / "failure.json").read_text())
        reasons[failure["id"]] = failure["reason"]
    assert reasons == {
        "link": "job file: expected a regular file, got a symlink",
        "fifo": "job file: expected a regular file, got a FIFO",
        "dir": "job file: expected a regular file, got a directory",
        "big": "job file: 2003 bytes is over the limit of 1000 (max_job_bytes)",
    }
    assert secret.read_text().startswith("renderer")  # never followed, never moved
    # The record is the evidence: no inode that is no job file is moved into the runner's
    # tree (a member's directory in failed/ would be theirs to write in); it is removed
    # from incoming/, and no private copy is made of it.
    assert sorted(os.listdir(spool.incoming)) == []
    for name in ("link", "fifo", "dir"):
        (failed_dir,) = spool.failed.glob(f"{name}.*")
        assert not {"submitted.yaml", "job.yaml"} & set(os.listdir(failed_dir)), failed_dir
    (big_dir,) = spool.failed.glob("big.*")
    assert stat.S_ISREG(os.lstat(big_dir / "submitted.yaml").st_mode)  # a regular file: kept


def test_fallback_props_apply_on_the_last_attempt(spool: SpoolLayout) -> None:
    job = {
        **command_job(fail_until_attempt=3, content="full quality"),
        "max_attempts": 3,
        "fallback": {"props": {"content": "fallback quality"}},
    }
    drop(spool, "fb.yaml", job)
    drain_until(spool, "done", 1)
    result = record(spool, "done", "result.json")
    assert result["details"]["fallback_used"] is True
    assert (spool.root / "output" / "fb.mp4").read_bytes() == b"fallback quality"


def test_polling_watch_mode_picks_up_jobs(spool: SpoolLayout) -> None:
    write_spool_config(spool, {"watch": "polling", "settle_seconds": 0})
    runner = Runner(load_config(spool.root, environ={}))
    assert runner.watch_mode == "polling"
    drop(spool, "p.yaml", command_job())
    runner.drain = True
    assert runner.run().done == 1


def test_capacity_from_host_and_overrides(spool: SpoolLayout) -> None:
    from spoolrender.runner.capacity import Capacity, plan_capacity, usable_cores

    cores = usable_cores()

    def auto_plan(**overrides: object) -> Capacity:
        # memory_per_job_mb 1: free memory never binds, so the CPU formula shows.
        settings = {"slots": "auto", "memory_per_job_mb": 1, **overrides}
        return plan_capacity(load_config(spool.root, environ={}, overrides=settings))

    auto = auto_plan()
    assert (auto.slots, auto.threads_per_job) == (2 * cores, 1)  # defaults.SLOTS_PER_CORE
    assert auto.reason == f"{cores} cores x 2 slots per core / 1 thread(s) per job"
    assert auto_plan(slots_per_core=0.5).slots == max(1, cores // 2)
    wide = auto_plan(threads_per_job=2)
    assert wide.threads_per_job == min(2, cores) and wide.slots == 2 * cores // wide.threads_per_job
    fixed = plan_capacity(load_config(spool.root, environ={}, overrides={"slots": 1, "threads_per_job": 64}))
    assert fixed.slots == 1 and fixed.threads_per_job == usable_cores()  # slots x threads <= cores
    huge = plan_capacity(load_config(spool.root, environ={}, overrides={"slots": "auto", "memory_per_job_mb": 10**9}))
    assert huge.slots == 1 and "MB available" in huge.reason
