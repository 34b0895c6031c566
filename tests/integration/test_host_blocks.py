"""Blocking a host never stops the farm (issue 21 item 4): which blocks are applied, what
counts against a host, and the probe slot. Beacons and failure files are written as
runners of other hosts would write them, on a real spool in a temp dir."""

from __future__ import annotations

import json
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.spool_jobs import command_job, drop, entries, write_spool_config
from support.waiting import wait_for

from spoolrender.cli.status_text import format_status
from spoolrender.config.queues import Subscription
from spoolrender.config.spool_config import SpoolConfig
from spoolrender.hosts.blocks import (
    APPLIED,
    HELD_JOBS_FAULT,
    HELD_LAST,
    HELD_OFFLINE,
    HELD_SHARE,
    ProbeSlot,
    block_states,
)
from spoolrender.hosts.health import hosts_dir, marker_path, record_failure
from spoolrender.intake.retry_scan import RetryScan
from spoolrender.ops.status import collect_status
from spoolrender.renderers.base import KILLED, killing_signal
from spoolrender.spool.clock import SystemClock
from spoolrender.spool.durable import write_json_atomic
from spoolrender.spool.heartbeat import HOSTNAME
from spoolrender.spool.layout import SpoolLayout, new_token, retry_name
from spoolrender.spool.records import RETRY, RUNNER_DIED, SPOOL_IO, RunRecord, decide


def online(layout: SpoolLayout, host: str, queues: tuple[str, ...] = ("*",), **extra: Any) -> None:
    write_json_atomic(layout.runners / f"{host}-1.json", {"host": host, "queues": list(queues), **extra})


def block(layout: SpoolLayout, host: str, since: float, jobs: int = 3) -> None:
    failures = [[since, f"{host}-job{i}", "command-exit"] for i in range(jobs)]
    hosts_dir(layout).mkdir(exist_ok=True)
    write_json_atomic(hosts_dir(layout) / f"{host}.json", {"host": host, "failures": failures})
    marker = {
        "host": host,
        "reason": "3 different jobs failed",
        "since": since,
        "until": since + 600,
        "failures": failures,
    }
    write_json_atomic(marker_path(layout, host), marker)


def causes(layout: SpoolLayout, config: SpoolConfig) -> dict[str, str]:
    return {b.host: b.cause for b in block_states(layout, config, time.time())}


@pytest.fixture
def cfg(config: SpoolConfig) -> SpoolConfig:
    return replace(config, host_block_jobs=3, lease_seconds=60)


def test_at_most_half_of_the_online_hosts_rounded_down_and_never_a_lone_host(
    spool: SpoolLayout, cfg: SpoolConfig
) -> None:
    now = time.time()
    online(spool, "a")
    block(spool, "a", now - 30)
    assert causes(spool, cfg) == {"a": HELD_LAST}  # one host of one: never
    for host in ("b", "c", "d"):
        online(spool, host)
    for i, host in enumerate(("b", "c")):
        block(spool, host, now - 20 + i)
    online(spool, "e", ("other",))  # a fifth host, of another queue: 5 // 2 is still 2
    # Five online, three marked: the two blocked first apply, the third is held back.
    assert causes(spool, cfg) == {"a": APPLIED, "b": APPLIED, "c": HELD_SHARE}
    (held,) = [b for b in block_states(spool, cfg, time.time()) if not b.applied]
    assert held.held_back == ("2 of 5 online hosts are blocked already, the most allowed (50% of them, rounded down)")


def test_never_the_last_online_host_of_a_queue(spool: SpoolLayout, cfg: SpoolConfig) -> None:
    now = time.time()
    online(spool, "a", ("render",))
    online(spool, "b", ("urgent", "render"))
    online(spool, "c", ("render",))
    online(spool, "d", ("render",), waiting=[{"queue": "render", "requires": ["gpu"], "count": 2}], tags=["gpu"])
    block(spool, "b", now - 10)  # the only host serving "urgent"
    block(spool, "d", now - 5)  # the only one with the gpu tag that waiting jobs need
    block(spool, "a", now - 1)
    got = {b.host: b for b in block_states(spool, cfg, time.time())}
    assert {h: b.cause for h, b in got.items()} == {"a": APPLIED, "b": HELD_LAST, "d": HELD_LAST}
    assert got["b"].held_back == "it is the last online host serving queue 'urgent'"
    assert got["d"].held_back == "it is the last online host serving queue 'render' with tag(s) gpu"


def test_an_offline_host_uses_no_share_and_its_block_waits(spool: SpoolLayout, cfg: SpoolConfig) -> None:
    now = time.time()
    online(spool, "a")
    online(spool, "b")
    block(spool, "gone", now - 30)  # no beacon: offline
    block(spool, "a", now - 20)
    assert causes(spool, cfg) == {"gone": HELD_OFFLINE, "a": APPLIED}


def test_what_counts_against_a_host(spool: SpoolLayout, cfg: SpoolConfig) -> None:
    now = time.time()
    online(spool, "a")
    online(spool, "b")
    # An operator's kill and a job's own out-of-memory say nothing about the host.
    for i, kind in enumerate((KILLED, "out-of-memory", "cancelled", "runner-died")):
        assert record_failure(spool, cfg, "a", f"k{i}", kind, now) is None
    assert (
        not (hosts_dir(spool) / "a.json").exists()
        or json.loads((hosts_dir(spool) / "a.json").read_text())["failures"] == []
    )
    # A job that timed out on b too is the job's fault: t1 does not count on a.
    assert record_failure(spool, cfg, "b", "t1", "timeout", now) is None
    assert record_failure(spool, cfg, "a", "t1", "timeout", now) is None
    assert record_failure(spool, cfg, "a", "t2", "timeout", now) is None
    assert record_failure(spool, cfg, "a", "t3", "timeout", now) is None
    assert not marker_path(spool, "a").exists()
    reason = record_failure(spool, cfg, "a", "t4", "timeout", now)
    assert reason is not None and reason.startswith("3 different jobs failed on this host") and "t1" not in reason
    assert causes(spool, cfg) == {"a": APPLIED}
    # t2 and t3 time out on b as well later: a's block no longer holds (the jobs' fault).
    record_failure(spool, cfg, "b", "t2", "timeout", now)
    record_failure(spool, cfg, "b", "t3", "timeout", now)
    assert causes(spool, cfg) == {"a": HELD_JOBS_FAULT}


def test_status_and_metrics_say_why_and_until_when(spool: SpoolLayout, cfg: SpoolConfig) -> None:
    from spoolrender.ops.metrics import spool_metrics_text

    now = time.time()
    online(spool, "a")
    online(spool, "b")
    block(spool, "a", now - 10)
    block(spool, "b", now - 5)
    doc = collect_status(cfg)
    by_host = {b["host"]: b for b in doc["blocked_hosts"]}
    assert by_host["a"]["applied"] and by_host["a"]["cause"] == APPLIED and by_host["a"]["held_back"] is None
    assert not by_host["b"]["applied"] and by_host["b"]["cause"] == HELD_LAST
    assert abs(by_host["a"]["until"] - (now + 590)) < 1
    text = format_status(doc)
    assert "BLOCKED host a: 3 different jobs failed; it claims one job at a time as a probe (for 10m more" in text
    assert "NOT BLOCKED host b: it is the last online host serving queue 'default', although 3 diff" in text
    metrics = spool_metrics_text(cfg)
    assert 'spoolrender_host_blocked{cause="failures",host="a"} 1.0' in metrics
    assert 'spoolrender_host_blocked{cause="last-server",host="b"} 0.0' in metrics
    assert 'spoolrender_host_block_until_seconds{host="a"}' in metrics


def test_a_kill_is_told_from_a_crash() -> None:
    assert killing_signal(-signal.SIGKILL) == signal.SIGKILL
    assert killing_signal(128 + signal.SIGKILL) == signal.SIGKILL  # sh -c 'render': its child was killed
    assert killing_signal(-signal.SIGSEGV) is None and killing_signal(128 + signal.SIGABRT) is None
    assert killing_signal(1) is None and killing_signal(75) is None


def test_one_probe_at_a_time_per_host_and_one_per_interval(spool: SpoolLayout) -> None:
    first, second = ProbeSlot(spool, "a"), ProbeSlot(spool, "a")
    now = time.time()
    assert not first.due(now - 5, now, 10) and first.due(now - 10, now, 10)  # the block's start counts
    assert first.take() and not first.take() and not second.take()
    assert ProbeSlot(spool, "b").take()  # another host's probe is its own
    first.release(probed=True)  # it failed: the next probe waits an interval from now
    assert not second.due(now - 3600, time.time(), 10) and second.due(now - 3600, time.time() + 10.1, 10)
    assert second.take()


def test_a_failure_of_a_run_taken_over_meanwhile_does_not_count(
    spool: SpoolLayout, start_runner: Callable[..., Any], tmp_path: Path
) -> None:
    """A host frozen past the lease wakes up and its render fails: the run was decided by a
    recoverer meanwhile (here: written as one would), so the failure says nothing about
    this host and is not counted."""
    log = tmp_path / "runner.log"
    start_runner(log=log)
    go = tmp_path / "go"
    drop(spool, "late.yaml", command_job(until_file=str(go), exit=75))
    wait_for(lambda: len(entries(spool, "running")) == 1, timeout=60)
    (name,) = entries(spool, "running")
    taken = RunRecord(
        run=1, outcome=RETRY, host="recoverer", pid=1, token=name.rsplit(".", 1)[1], ended=time.time(), attempt=1,
        due=time.time() + 3600, error={"kind": "runner-died", "message": "judged dead", "transient": True},
    )  # fmt: skip
    assert decide(spool.running / name, taken)
    go.touch()
    wait_for(lambda: "another runner took it over" in log.read_text(), timeout=60)
    assert not (hosts_dir(spool) / f"{HOSTNAME}.json").exists()


def test_only_a_failure_of_the_hosts_own_sends_its_retry_elsewhere(spool: SpoolLayout, cfg: SpoolConfig) -> None:
    """A retry that a full or failing spool stopped (its free requeues used up, or recorded
    so by a recoverer) or a dead runner's is every host's to take at once; a render that
    failed here is left to the other online host first (retry_elsewhere_seconds)."""
    online(spool, "other")
    due = time.time() - 1
    for kind in (SPOOL_IO, RUNNER_DIED, "command-exit"):
        job_dir = spool.retry / retry_name(kind, new_token(), due, 0)
        job_dir.mkdir()
        (job_dir / "job.yaml").write_text(yaml.safe_dump(command_job()))
        error = {"kind": kind, "message": "stopped", "transient": True}
        assert decide(job_dir, RunRecord(1, RETRY, HOSTNAME, 1, new_token(), due, attempt=1, due=due, error=error))
    scan = RetryScan(spool, replace(cfg, retry_elsewhere_seconds=600), SystemClock(), Subscription(), threading.Lock())
    candidates, _ = scan.scan([], time.time())
    assert sorted(c.job_id for c in candidates) == sorted((SPOOL_IO, RUNNER_DIED))
    assert record_failure(spool, cfg, HOSTNAME, "full", SPOOL_IO, time.time()) is None
    assert not (hosts_dir(spool) / f"{HOSTNAME}.json").exists()


def test_a_sealed_job_edited_while_it_waits_does_not_count_against_the_host(
    spool: SpoolLayout, start_runner: Callable[..., Any], tmp_path: Path
) -> None:
    """Run 1 fails here (counted); the job's copy, sealed by it, is edited (as only root
    could) while it waits in retry/: run 2 refuses it as job-changed, which says nothing of
    the host. (What a submitter does to their own file during a run changes nothing at all:
    tests/integration/test_owncopy.py.)"""
    write_spool_config(spool, {"backoff_base_seconds": 3, "backoff_cap_seconds": 3})
    go = tmp_path / "go"
    go.touch()
    start_runner()
    drop(spool, "edited.yaml", command_job(until_file=str(go), exit=75, content="original"))
    wait_for(lambda: len(entries(spool, "retry")) == 1, timeout=60)
    (queued,) = spool.retry.glob("*/job.yaml")
    queued.write_text(queued.read_text().replace("original", "tampered"))
    wait_for(lambda: len(entries(spool, "failed")) == 1, timeout=60)
    failure = json.loads((spool.failed / entries(spool, "failed")[0] / "failure.json").read_text())
    assert failure["kind"] == "job-changed"
    failures = json.loads((hosts_dir(spool) / f"{HOSTNAME}.json").read_text())["failures"]
    assert [f[2] for f in failures] == ["command-exit"]  # run 1's only


def test_a_chunk_done_lifts_the_block_and_a_neutral_probe_end_does_not_delay_the_next(spool: SpoolLayout) -> None:
    since = time.time() - 10
    for outcome in ("requeue", "lost", "split", "chunk-requeue"):
        slot = ProbeSlot(spool, "a")
        assert slot.due(since, time.time(), 10) and slot.take()
        slot.ended("job", outcome)  # says nothing of the host: the next probe may start now
    assert slot.due(since, time.time(), 10)
    assert slot.take()
    slot.ended("job", "chunk-failed")
    assert not slot.due(since, time.time(), 10)
    block(spool, "a", since)
    assert slot.take()
    slot.ended("job", "chunk-done")  # a chunk of the probe job rendered: the host works
    assert not marker_path(spool, "a").exists()
