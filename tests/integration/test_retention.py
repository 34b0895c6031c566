"""Retention (keep_done, keep_failed and their caps): runners purge finished jobs in the
background, one at a time per spool, through the same deletion as `spoolrender purge`."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from support.processes import spoolrender_cmd, stopped
from support.spool_jobs import allow_steps, command_job, drop, entries
from support.waiting import wait_for

from spoolrender.config.spool_config import load_config
from spoolrender.errors import ConfigError
from spoolrender.ops.retention_lease import FREE, HELD, read_lease, take_lease
from spoolrender.spool.layout import SpoolLayout

DAY = 86400.0
POLICY = ("--set", "keep_done=30d", "--set", "keep_failed=90d", "--set", "keep_done_max=3")


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [("keep_done", "30d", 30 * DAY), ("keep_failed", "12h", 12 * 3600.0), ("keep_done", "off", None),
     ("keep_failed", None, None), ("keep_done_max", 5000, 5000), ("keep_failed_max", "off", None)],
)  # fmt: skip
def test_retention_settings_accept_durations_counts_and_off(
    spool: SpoolLayout, key: str, value: object, expected: object
) -> None:
    assert getattr(load_config(spool.root, overrides={key: value}, environ={}), key) == expected


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [("keep_done", 30, "has no unit: write 30s, 30m, 30h or 30d"), ("keep_done", "30 days", "invalid duration"),
     ("keep_failed", "0d", "> 0"), ("keep_done", True, "expected a duration"), ("keep_done_max", 0, ">= 1"),
     ("keep_failed_max", "10k", "whole number")],
)  # fmt: skip
def test_retention_settings_refuse_what_could_purge_by_mistake(
    spool: SpoolLayout, key: str, value: object, message: str
) -> None:
    with pytest.raises(ConfigError, match=re.escape(key)) as caught:
        load_config(spool.root, overrides={key: value}, environ={})
    assert message in str(caught.value)


def test_env_sets_retention_like_the_file(spool: SpoolLayout) -> None:
    config = load_config(spool.root, environ={"SPOOLRENDER_KEEP_DONE": "2w"})
    assert config.keep_done == 14 * DAY


def test_a_stale_lease_is_taken_over_and_its_holder_learns_it(spool: SpoolLayout) -> None:
    config = load_config(spool.root, overrides={"lease_seconds": 30, "heartbeat_seconds": 0.1}, environ={})
    first = take_lease(config, "runner-a", time.time())
    assert first is not None
    assert take_lease(config, "runner-b", time.time()) is None  # held and fresh
    # Its holder silent for longer than the lease (by the spool's clock: the file's mtime).
    assert take_lease(config, "runner-b", time.time() + 31) is not None
    wait_for(lambda: first.lost, timeout=30)
    first.release({"ended": time.time(), "removed": {"done": 0, "failed": 0}})
    lease = read_lease(spool)
    assert lease is not None and (lease.generation, lease.holder, lease.state) == (2, "runner-b", HELD)


def _age_to(path: Path, days: float) -> None:
    when = time.time() - days * DAY
    os.utime(path, (when, when))


def test_two_runners_one_purger_nothing_young_and_nothing_unfinished_deleted(
    spool: SpoolLayout, tmp_path: Path, start_runner: Callable[..., subprocess.Popen[bytes]]
) -> None:
    for i in range(6):
        drop(spool, f"ok-{i}.yaml", command_job())
    for i in range(2):
        drop(spool, f"bad-{i}.yaml", {**command_job(exit=1), "max_attempts": 1})
    drop(spool, "later.yaml", command_job(fail_until_attempt=99))
    slow = ("--set", "backoff_base_seconds=3600", "--set", "backoff_cap_seconds=3600")
    subprocess.run(spoolrender_cmd("run", "--drain", "--spool", str(spool.root), *slow), capture_output=True)
    done, failed, retry = entries(spool, "done"), entries(spool, "failed"), entries(spool, "retry")
    assert (len(done), len(failed), len(retry)) == (6, 2, 1)
    # done: two older than 30 days; of the four younger ones keep_done_max=3 keeps the newest.
    for name, days in zip(done, (40, 31, 0.1, 0.2, 0.3, 0.4), strict=True):
        _age_to(spool.done / name, days)
    _age_to(spool.failed / failed[0], 100)
    _age_to(spool.failed / failed[1], 60)
    _age_to(spool.retry / retry[0], 200)  # never retention's: it still waits to run
    ids_of_done = {n.rsplit(".", 1)[0] for n in done}
    assert ids_of_done <= set(os.listdir(spool.ids))

    # A is stopped while it holds the purge lease, so it stops renewing it: B takes a lease
    # over once it is lease_seconds old (by design: a stalled purger must not stop retention).
    # An hour, so that no stall of a busy machine between A's stop and the checks below lets
    # B become the purger (with 120 s, B's third look, 120 s after its first, took it over).
    lease = ("--set", "lease_seconds=3600", *slow, *POLICY)
    log_a, log_b = tmp_path / "a.log", tmp_path / "b.log"
    textfile = tmp_path / "a.prom"
    a = start_runner(*lease, "--metrics-textfile", str(textfile), env={"SPOOLRENDER_PAUSE_AT": "retention-lease-taken"},
                     log=log_a)  # fmt: skip
    wait_for(lambda: stopped(a))  # A holds the lease and has deleted nothing yet
    steps = tmp_path / "steps"
    allow_steps(steps, 3)
    drop(spool, "slow.yaml", command_job(steps_file=str(steps)))
    start_runner(*lease, log=log_b)
    wait_for(lambda: "is purging; not this runner" in log_b.read_text())
    wait_for(lambda: len(entries(spool, "running")) == 1)
    running = entries(spool, "running")[0]
    _age_to(spool.running / running, 200)
    assert (entries(spool, "done"), entries(spool, "failed")) == (done, failed)  # B purged nothing

    os.kill(a.pid, signal.SIGCONT)
    wait_for(lambda: "purged 3 done and 1 failed job(s)" in log_a.read_text())
    assert entries(spool, "done") == done[2:5]
    assert entries(spool, "failed") == [failed[1]]
    assert entries(spool, "retry") == retry
    assert entries(spool, "running") == [running]
    # The purged done jobs' id reservations went with them (as `purge` does).
    kept_ids = {n.rsplit(".", 1)[0] for n in done[2:5]}
    assert ids_of_done & set(os.listdir(spool.ids)) == kept_ids
    wait_for(lambda: 'spoolrender_retention_purged_total{runner=' in textfile.read_text()
             and 'state="done"} 3.0' in textfile.read_text())  # fmt: skip
    lease_now = read_lease(spool)
    assert lease_now is not None and lease_now.state == FREE and lease_now.last is not None
    assert lease_now.last["removed"] == {"done": 3, "failed": 1}

    status = subprocess.run(spoolrender_cmd("status", "--spool", str(spool.root), *POLICY),
                            capture_output=True, text=True, check=True).stdout  # fmt: skip
    assert re.search(r"retention: done/ 30d or 3 newest, failed/ 90d; last purge \S+ ago on \S+ "
                     r"\(3 done, 1 failed removed\)", status), status  # fmt: skip
    allow_steps(steps, 10)  # the running job, left alone, finishes as usual
    wait_for(lambda: len(entries(spool, "done")) == 4)


def test_status_says_retention_is_off_by_default(spool: SpoolLayout) -> None:
    out = subprocess.run(spoolrender_cmd("status", "--spool", str(spool.root)), capture_output=True, text=True)
    assert "retention: off (done/ and failed/ kept until `spoolrender purge`" in out.stdout
