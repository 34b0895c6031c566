"""One run of one job, start to next state, with the real executor and FakeRenderer (no
runner thread): what reaches done/, retry/ and failed/, with which record and reason, and
what is (never) published."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from support.unit_spool import Slot, entries

from spoolrender import defaults
from spoolrender.spool.records import read_runs
from spoolrender.testing import Fail, Hang, Succeed

JOB = {"composition": "Intro"}


@pytest.fixture
def slot(tmp_path: Path) -> Slot:
    return Slot(tmp_path / "spool")


def only(slot: Slot, state: str) -> Path:
    [name] = entries(slot.layout, state)
    return slot.layout.state_dir(state) / name


def failure(slot: Slot) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((only(slot, "failed") / "failure.json").read_bytes())
    return data


def test_a_render_is_verified_published_and_recorded_in_done(slot: Slot) -> None:
    slot.fake.script("intro", Succeed(size=3000))
    slot.drop("intro.yaml", {**JOB, "output": "films/intro.mp4"})
    end = slot.run_next()
    assert (end.state, end.outcome, end.attempts, end.error_kind) == ("done", "done", 1, None)
    output = slot.config.output_root / "films" / "intro.mp4"
    assert output.stat().st_size == 3000
    done = only(slot, "done")
    [run] = read_runs(done)
    assert (run.run, run.attempt, run.outcome) == (1, 1, "publishing")
    assert run.publish is not None and run.publish["bytes"] == 3000
    assert entries(slot.layout, "running") == [] and entries(slot.layout, "incoming") == []
    [render] = slot.fake.runs_of("intro")
    assert (render.attempt, render.outcome) == (1, "rendered")
    assert str(render.request.spec.output) == "films/intro.mp4"


def test_a_transient_failure_goes_to_retry_and_its_partial_output_is_never_published(slot: Slot) -> None:
    slot.fake.script("intro", Fail("worker-crash", partial=500), Succeed())
    slot.drop("intro.yaml", {**JOB, "output": "intro.mp4"})
    end = slot.run_next()
    assert (end.state, end.error_kind, end.error_message) == ("retry", "worker-crash", Fail().message)
    assert not (slot.config.output_root / "intro.mp4").exists()
    [retry] = entries(slot.layout, "retry")
    due_ms = int(retry.split("-", 1)[0])
    assert due_ms / 1000 >= slot.clock.wall()  # due after its backoff, by the spool's clock
    slot.advance(1)
    second = slot.run_next()
    assert (second.state, second.attempts) == ("done", 2)
    assert [r.outcome for r in read_runs(only(slot, "done"))] == ["retry", "publishing"]
    assert (slot.config.output_root / "intro.mp4").stat().st_size == 1024


def test_a_permanent_failure_goes_to_failed_with_its_reason(slot: Slot) -> None:
    slot.fake.script("intro", Fail("bad-props", transient=False, message="props are wrong"))
    slot.drop("intro.yaml", JOB)
    end = slot.run_next()
    assert (end.state, end.error_kind, end.error_message) == ("failed", "bad-props", "props are wrong")
    reason = failure(slot)
    assert (reason["id"], reason["kind"], reason["reason"], reason["attempts"]) == ("intro", "bad-props",
                                                                                     "props are wrong", 1)  # fmt: skip
    assert len(slot.fake.runs_of("intro")) == 1  # never tried again


def test_the_last_attempt_fails_for_good_and_says_none_are_left(slot: Slot) -> None:
    slot.fake.script("intro", Fail("worker-crash"))
    slot.drop("intro.yaml", {**JOB, "max_attempts": 2})
    assert slot.run_next().state == "retry"
    slot.advance(1)
    end = slot.run_next()
    assert end.state == "failed"
    assert end.error_message == f"{Fail().message} (attempt 2 of 2, none left)"


def test_an_empty_output_is_no_render(slot: Slot) -> None:
    slot.fake.script("intro", Succeed(size=0))
    slot.drop("intro.yaml", {**JOB, "output": "intro.mp4"})
    end = slot.run_next()
    assert (end.state, end.error_kind) == ("retry", "no-output")
    assert end.error_message == "the renderer reported success but the output is empty"
    assert not (slot.config.output_root / "intro.mp4").exists()


def test_the_jobs_timeout_cancels_a_hanging_render(slot: Slot) -> None:
    slot.fake.script("intro", Hang(up_to=60))
    slot.drop("intro.yaml", {**JOB, "timeout": 0.2})
    end = slot.run_next()
    assert (end.state, end.error_kind, end.error_message) == ("retry", "timeout", "timed out after 0.2 s")
    assert slot.fake.runs_of("intro")[0].outcome == "cancelled"


def test_an_invalid_job_fails_at_once_naming_the_field_and_nothing_renders(slot: Slot) -> None:
    slot.drop("intro.yaml", {**JOB, "priority": "high"})
    end = slot.run_next()
    assert (end.state, end.error_kind) == ("failed", "invalid-job")
    assert end.error_message is not None and end.error_message.startswith("field 'priority': expected a whole number")
    assert slot.fake.runs == []


def test_an_id_used_once_is_refused_for_a_second_job(slot: Slot) -> None:
    slot.drop("first.yaml", {**JOB, "id": "intro", "output": "a.mp4"})
    assert slot.run_next().state == "done"
    slot.drop("second.yaml", {**JOB, "id": "intro", "output": "b.mp4"})
    end = slot.run_next()
    assert (end.state, end.error_kind) == ("failed", "invalid-job")
    assert end.error_message is not None and "intro" in end.error_message and "rerun" in end.error_message
    assert not (slot.config.output_root / "b.mp4").exists()


def test_an_output_published_by_another_job_is_never_overwritten(slot: Slot) -> None:
    slot.drop("first.yaml", {**JOB, "output": "same.mp4"})
    assert slot.run_next().state == "done"
    before = (slot.config.output_root / "same.mp4").read_bytes()
    slot.drop("second.yaml", {**JOB, "output": "same.mp4"})
    end = slot.run_next()
    assert (end.state, end.error_kind) == ("failed", "invalid-job")
    assert end.error_message is not None and "same.mp4" in end.error_message
    assert (slot.config.output_root / "same.mp4").read_bytes() == before
    assert [r.job_id for r in slot.fake.runs] == ["first"]


def test_a_job_planned_hooks_owe_a_marker_and_a_delivery_state(tmp_path: Path) -> None:
    hooks = {
        "archive": {"on": ["done"], "command": ["/bin/true"]},
        "chat": {"on": ["failed"], "command": ["/bin/true"]},
    }
    slot = Slot(tmp_path / "spool", {"hooks": hooks})
    slot.drop("intro.yaml", JOB)
    assert slot.run_next().state == "done"
    done = only(slot, "done")
    state = json.loads((done / "hook-0001-done.json").read_bytes())
    assert (state["event"], state["id"], state["run"]) == ("done", "intro", 1)
    assert list(state["hooks"]) == ["archive"]  # chat is for failures only
    assert state["hooks"]["archive"]["attempts"] == 0
    assert state["delivery"] == f"{done.name}-1-done"
    assert sorted(p.name for p in (slot.layout.private / "hooks" / "pending").iterdir()) == [
        f"0000000000000-0001-done-{done.name}"
    ]


def test_a_retry_is_due_after_its_backoff_however_long_the_steps_before_took(slot: Slot) -> None:
    # As on a busy host: the slot's clock is 30 s behind the real time that stamps the
    # spool's records (Slot.advance), and the retry is due by its record's mtime.
    slot.clock.jump_wall(-30)
    slot.fake.script("intro", Fail("worker-crash"), Succeed())
    slot.drop("intro.yaml", JOB)
    assert slot.run_next().state == "retry"
    slot.advance(1)
    assert slot.scan().candidates, "the retry is not due after its backoff"
    assert slot.run_next().state == "done"


def test_a_cancel_between_the_claim_and_the_first_step_is_honoured(slot: Slot) -> None:
    # The claim's own first heartbeat no longer looks for a cancel request (P2): the run's
    # first step must, or a request made in between renders the job anyway.
    slot.drop("intro.yaml", {**JOB, "output": "intro.mp4"})
    [candidate] = slot.scan().candidates
    taken = slot.claim(candidate)
    assert taken is not None
    (taken.job_dir / defaults.CANCEL_FILENAME).write_text("not this one\n")
    end = slot.executor.execute(taken)
    assert (end.state, end.error_kind, end.error_message) == ("failed", "cancelled", "not this one")
    assert slot.fake.runs == [] and not (slot.config.output_root / "intro.mp4").exists()
