"""Completion hooks without a runner: what a decided run plans (hook_plan), and the
dispatcher's policy over a real spool (hooks.HookDispatcher.deliver_due, called by the
test, its background loop never started): backoff, giving up, hooks no longer configured,
markers of dead dispatchers and of jobs that are gone."""

from __future__ import annotations

import dataclasses
import json
import os
import random
import socket
import time
from pathlib import Path
from typing import Any

import pytest
from support.unit_spool import Slot, entries

from spoolrender.hooks.dispatcher import ORPHAN_AFTER_S, HookDispatcher
from spoolrender.hooks.plan import (
    Marker,
    delivery_id,
    marker_name,
    open_job_dir,
    parse_marker,
    pending_dir,
    plan_hooks,
    state_filename,
    taken_dir,
)
from spoolrender.ops.purge import purge
from spoolrender.spool.spooldir import DirHandle
from spoolrender.testing import Fail, Succeed

UID = "0123456789ab"


def refused_url() -> str:
    """A webhook URL on a port nobody listens on (the kernel's pick, closed at once)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/hook"


def done_job(tmp_path: Path, hook: dict[str, Any]) -> tuple[Slot, Path]:
    """A spool with one hook, and one job run to done/ (its delivery planned)."""
    slot = Slot(tmp_path / "spool", {"hooks": {"notify": {"on": ["done"], **hook}}})
    slot.drop("intro.yaml", {"composition": "Intro"})
    assert slot.run_next().state == "done"
    [name] = entries(slot.layout, "done")
    return slot, slot.layout.done / name


def hook_state(job_dir: Path) -> dict[str, Any]:
    state: dict[str, Any] = json.loads((job_dir / state_filename(1, "done")).read_bytes())["hooks"]["notify"]
    return state


def dispatcher(slot: Slot, spool_now: float | None = None, **config_changes: Any) -> HookDispatcher:
    config = dataclasses.replace(slot.config, **config_changes)
    return HookDispatcher(slot.layout, config, random.Random(27), lambda: spool_now or time.time())


def wait_refiled(slot: Slot, timeout: float = 30.0) -> list[Marker]:
    """The pending markers, once the delivery thread has put its marker back (or removed it)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not os.listdir(taken_dir(slot.layout)):
            return [m for m in map(parse_marker, os.listdir(pending_dir(slot.layout))) if m is not None]
        time.sleep(0.01)
    raise AssertionError(f"the delivery did not end within {timeout} s")


def test_marker_names_round_trip_and_sort_by_due_time() -> None:
    name = marker_name(1_800_000_000.25, 3, "failed", "intro.v2", UID)
    assert parse_marker(name) == Marker(name, 1_800_000_000.25, 3, "failed", "intro.v2", UID)
    assert marker_name(-5, 1, "done", "a", UID).startswith("0000000000000-0001-done-")
    assert sorted([marker_name(20, 1, "done", "z", UID), marker_name(3, 1, "done", "a", UID)])[0].startswith(
        "0000000003000"
    )
    for bad in ("", "x", name.replace("-failed-", "-exploded-"), name + "-"):
        assert parse_marker(bad) is None
    assert delivery_id("intro", UID, 2, "done") == f"intro.{UID}-2-done"


def test_planning_is_once_per_run_and_event_and_only_for_hooks_of_that_event(slot: Slot) -> None:
    from spoolrender.config.hooks import HookSpec

    hooks = {"a": HookSpec("a", ("done",), command=("/bin/true",)), "b": HookSpec("b", ("failed",), url="http://x/")}
    job_dir = slot.layout.done / f"intro.{UID}"
    job_dir.mkdir()
    plan_hooks(slot.layout, hooks, job_dir, "intro", UID, 1, "retry", {"outcome": "retry"})
    assert list(job_dir.iterdir()) == []  # no hook wants retries: nothing owed
    plan_hooks(slot.layout, hooks, job_dir, "intro", UID, 1, "failed", {"n": 1})
    plan_hooks(slot.layout, hooks, job_dir, "intro", UID, 1, "failed", {"n": 2})  # a replay after a crash
    state = json.loads((job_dir / state_filename(1, "failed")).read_bytes())
    assert (list(state["hooks"]), state["record"]) == (["b"], {"n": 1})
    assert os.listdir(pending_dir(slot.layout)) == [marker_name(0, 1, "failed", "intro", UID)]
    with open_job_dir(slot.layout, "intro", UID) as found:
        assert found is not None and found.path == job_dir
    with open_job_dir(slot.layout, "other", UID) as found:
        assert found is None


@pytest.fixture
def slot(tmp_path: Path) -> Slot:
    return Slot(tmp_path / "spool")


def backoff_passed(slot: Slot, job_dir: Path, marker: Marker) -> None:
    """The hook's backoff over, on disk: its marker due now and its ``next_at`` past. The
    dispatcher reads the wall clock, which a test cannot advance; waiting a short backoff out
    instead made the check that it is left alone meanwhile fail on a loaded host."""
    due_now = marker_name(0, marker.run, marker.event, marker.job_id, marker.uid)
    os.rename(pending_dir(slot.layout) / marker.name, pending_dir(slot.layout) / due_now)
    path = job_dir / state_filename(marker.run, marker.event)
    state = json.loads(path.read_bytes())
    state["hooks"]["notify"]["next_at"] = 0
    path.write_text(json.dumps(state), encoding="utf-8")


def test_a_failed_delivery_is_tried_again_after_its_backoff_then_given_up(tmp_path: Path) -> None:
    # 60 s (equal jitter: 30-60 s): not due for long after the first attempt, however slow the host.
    slot, job_dir = done_job(tmp_path, {"url": refused_url(), "attempts": 2, "backoff_seconds": 60})
    hooks = dispatcher(slot)
    before = time.time()
    assert hooks.deliver_due() == (None, False)  # the delivery runs in its own thread
    [marker] = wait_refiled(slot)
    state = hook_state(job_dir)
    assert state["attempts"] == 1 and state["delivered_at"] is None and state["gave_up_at"] is None
    assert "Connection refused" in state["last"] or "refused" in state["last"].lower()
    assert before + 30 <= marker.due <= time.time() + 60
    assert marker.due == pytest.approx(state["next_at"], abs=0.001)
    next_due, waiting = hooks.deliver_due()  # not due: left alone
    assert next_due == pytest.approx(marker.due, abs=0.001)
    assert not waiting
    assert hook_state(job_dir)["attempts"] == 1
    backoff_passed(slot, job_dir, marker)
    hooks.deliver_due()
    assert wait_refiled(slot) == []  # the last attempt: given up, marker gone
    state = hook_state(job_dir)
    assert state["attempts"] == 2 and state["gave_up_at"] is not None
    log = (job_dir / "hooks.log").read_text().splitlines()
    assert [line.split(" ", 3)[3].split(":")[0] for line in log] == ["attempt 1", "attempt 2"]
    assert log[-1].endswith("giving up after 2 attempt(s)")


def test_a_hook_removed_from_the_config_is_not_delivered_and_its_marker_goes(tmp_path: Path) -> None:
    slot, job_dir = done_job(tmp_path, {"command": ["/bin/true"]})
    assert dispatcher(slot, hooks={}).deliver_due() == (None, False)  # no thread: nothing to deliver
    assert os.listdir(pending_dir(slot.layout)) == [] and os.listdir(taken_dir(slot.layout)) == []
    state = hook_state(job_dir)
    assert (state["attempts"], state["last"]) == (0, "no longer configured in spoolrender.yaml")
    assert state["gave_up_at"] is not None
    assert (job_dir / "hooks.log").read_text().endswith("done notify not delivered: no longer configured\n")


def test_a_marker_taken_by_a_dead_dispatcher_is_put_back_only_once_stale(tmp_path: Path) -> None:
    slot, job_dir = done_job(tmp_path, {"url": refused_url(), "timeout_seconds": 10, "attempts": 1})
    [name] = os.listdir(pending_dir(slot.layout))
    os.rename(pending_dir(slot.layout) / name, taken_dir(slot.layout) / name)  # its dispatcher died here
    taken_at = os.lstat(taken_dir(slot.layout) / name).st_ctime
    stale_after = 10 + slot.config.lease_seconds  # the longest hook timeout, plus the lease
    # Judged on the spool filesystem's clock: a take younger than that may be a live one's.
    dispatcher(slot, spool_now=taken_at + stale_after - 1).deliver_due()
    assert os.listdir(taken_dir(slot.layout)) == [name]
    assert hook_state(job_dir)["attempts"] == 0
    dispatcher(slot, spool_now=taken_at + stale_after + 1).deliver_due()  # put back, and delivered again
    assert wait_refiled(slot) == []
    assert hook_state(job_dir)["attempts"] == 1


def test_a_marker_whose_job_is_gone_waits_a_little_then_is_dropped(slot: Slot) -> None:
    name = marker_name(0, 1, "done", "gone", UID)
    pending_dir(slot.layout).mkdir(parents=True)
    taken_dir(slot.layout).mkdir(parents=True)
    (pending_dir(slot.layout) / name).touch()
    hooks = dispatcher(slot, hooks={})
    next_due, _ = hooks.deliver_due()
    # Between two renames maybe: looked at again in a moment, not dropped.
    [refiled] = os.listdir(pending_dir(slot.layout))
    assert next_due is not None and parse_marker(refiled) is not None
    old = time.time() - ORPHAN_AFTER_S - 60
    os.utime(pending_dir(slot.layout) / refiled, (old, old))
    os.rename(pending_dir(slot.layout) / refiled, pending_dir(slot.layout) / name)  # due now again
    hooks.deliver_due()
    assert os.listdir(pending_dir(slot.layout)) == [] and os.listdir(taken_dir(slot.layout)) == []


def test_an_old_marker_whose_job_ends_its_run_while_it_is_looked_for_is_delivered_not_dropped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """open_job_dir looks in done/, failed/, split/, retry/, then lists running/: a job whose
    run ended in between was in none, and a marker older than ORPHAN_AFTER_S (its endpoint
    down for an hour) was dropped as a purged job's, its hooks never delivered."""
    slot = Slot(tmp_path / "spool", {"hooks": {"notify": {"on": ["retry"], "url": refused_url(), "attempts": 3}}})
    slot.fake.script("intro", Fail(transient=True), Succeed())
    slot.drop("intro.yaml", {"composition": "Intro"})
    assert slot.run_next().state == "retry"
    [name] = os.listdir(pending_dir(slot.layout))
    old = time.time() - ORPHAN_AFTER_S - 60
    os.utime(pending_dir(slot.layout) / name, (old, old))
    slot.advance(1)
    slot.scanner.note_event("", "")
    running = slot.claim(slot.scan().candidates[0])
    assert running is not None
    original = DirHandle.names
    moved: list[int] = []

    def names(self: DirHandle) -> list[str]:
        listed = original(self)
        if self.path == slot.layout.retry and not moved:
            moved.append(1)
            assert slot.executor.execute(running).state == "done"  # its run ends: running/ -> done/
        return listed

    monkeypatch.setattr(DirHandle, "names", names)
    dispatcher(slot).deliver_due()
    assert moved
    assert [m.event for m in wait_refiled(slot)] == ["retry"]  # tried, and due again after its backoff
    [done] = entries(slot.layout, "done")
    state = json.loads((slot.layout.done / done / state_filename(1, "retry")).read_bytes())["hooks"]["notify"]
    assert state["attempts"] == 1 and state["gave_up_at"] is None


def test_a_job_whose_id_starts_with_another_jobs_name_is_never_taken_for_it(slot: Slot) -> None:
    """A submitter may choose any id ``[A-Za-z0-9._-]``, and every job's uid is in
    `status --json`: a job with id ``intro.<intro's uid>.x`` runs as
    ``running/intro.<uid>.x.<its uid>.<token>``, which starts with ``intro.<uid>.`` as
    intro's own running/ entry does. open_job_dir(intro) opened it: the hooks of intro
    (purged here, or running beside it) read their delivery state from, and wrote it (the
    run record, which can quote props) into, another user's job."""
    slot.drop("intro.yaml", {"composition": "Intro"})
    assert slot.run_next().state == "done"
    [intro] = entries(slot.layout, "done")
    uid = intro.rsplit(".", 1)[1]
    slot.drop("mine.yaml", {"id": f"intro.{uid}.x", "composition": "Intro"})
    slot.scanner.note_event("", "")
    other = slot.claim(slot.scan().candidates[0])
    assert other is not None and other.job_dir.name.startswith(f"intro.{uid}.x.")
    assert purge(slot.config, 0.0) == [f"done/{intro}"]  # its marker may wait on: the job is gone
    with open_job_dir(slot.layout, "intro", uid) as found:
        assert found is None, found.path
