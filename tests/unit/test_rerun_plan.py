"""`spoolrender rerun ID` (spoolrender.ops.rerun_done), on jobs the real executor ran: the done
job's own file queued again with ``rerun: true`` and ``cache: false`` (its bytes kept when
they say so already), in the queue it ran in, through submit's checks; refused, saying why,
for a job that is not done."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from support.unit_spool import Slot, entries

from spoolrender.errors import JobNotFound, SpoolrenderError
from spoolrender.ops.rerun_done import plan_rerun, rerun
from spoolrender.testing import Fail

JOB = {"id": "intro", "composition": "Intro", "output": "intro.mp4", "props": {"title": "Week 48"}}


@pytest.fixture
def slot(tmp_path: Path) -> Slot:
    return Slot(tmp_path / "spool")


def test_a_done_job_is_queued_again_as_a_rerun_that_renders(slot: Slot) -> None:
    slot.drop("intro.yaml", JOB)
    assert slot.run_next().state == "done"
    plan = plan_rerun(slot.config, "intro")
    assert plan.job_id == "intro" and plan.name == "intro.yaml"
    assert plan.source.startswith("done/intro.")
    assert yaml.safe_load(plan.data) == {**JOB, "rerun": True, "cache": False}
    written = rerun(slot.config, "intro")
    assert written == slot.layout.incoming / "intro.yaml"
    assert yaml.safe_load(written.read_bytes()) == {**JOB, "rerun": True, "cache": False}
    assert len(entries(slot.layout, "done")) == 1  # the done entry stays until the new run publishes
    with pytest.raises(SpoolrenderError):  # queued now: a second rerun is refused as submit refuses it
        rerun(slot.config, "intro")
    assert entries(slot.layout, "incoming") == ["intro.yaml"]


def test_a_file_that_says_rerun_already_is_queued_byte_for_byte(slot: Slot) -> None:
    text = "# the intro\nid: intro\ncomposition: Intro\noutput: intro.mp4\nrerun: true\ncache: false\n"
    slot.drop("intro.yaml", text)
    assert slot.run_next().state == "done"
    assert plan_rerun(slot.config, "intro").data == text.encode()  # its comment kept


def test_a_rerun_keeps_the_queue_directory_the_job_ran_in(slot: Slot) -> None:
    (slot.layout.incoming / "night").mkdir(mode=0o3775)
    slot.drop("night/intro.yaml", JOB)
    assert slot.run_next().state == "done"
    assert yaml.safe_load(plan_rerun(slot.config, "intro").data)["queue"] == "night"


def test_only_a_done_job_can_be_rerun_and_the_refusal_says_what_it_is(slot: Slot) -> None:
    slot.fake.script("intro", Fail("invalid-props", transient=False))
    slot.drop("intro.yaml", JOB)
    assert slot.run_next().state == "failed"
    with pytest.raises(SpoolrenderError, match=r"job 'intro' is failed, not done: .*spoolrender retry"):
        plan_rerun(slot.config, "intro")
    with pytest.raises(JobNotFound, match="no job with id 'outro'"):
        plan_rerun(slot.config, "outro")
