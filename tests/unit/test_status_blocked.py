"""`status` names each entry a runner cannot claim in its own directory: a retry/ entry whose
claim failed is held blocked until its next try (RetryScan.hold), and was shown as
`incoming/<its name>`; an older runner's beacon (no ``blocked_in``) still reads as incoming/."""

from __future__ import annotations

import json
import os
from pathlib import Path

import jsonschema
import pytest
from support.unit_spool import Slot

import spoolrender
from spoolrender.cli.status_text import format_status
from spoolrender.ops.status import collect_status
from spoolrender.spool.beacons import new_runner_id, write_beacon
from spoolrender.testing import Fail, Succeed

JOB = {"composition": "Intro", "output": "x.mp4"}
SCHEMA = json.loads((Path(spoolrender.__file__).parent / "status.schema.json").read_text())


@pytest.fixture
def slot(tmp_path: Path) -> Slot:
    return Slot(tmp_path / "spool", {"settle_seconds": 5})


def announce(slot: Slot, **fields: object) -> None:
    """This process's beacon (a live pid: listed online) with the runner's own fields."""
    write_beacon(slot.layout, new_runner_id(1), {"slots": 1, "busy": 0, **fields})


def test_a_blocked_retry_entry_is_named_in_retry(slot: Slot) -> None:
    slot.fake.script("intro", Fail("worker-crash"), Succeed())
    slot.drop("intro.yaml", JOB)
    assert slot.run_next().state == "retry"
    slot.clock.advance(1)
    slot.drop("stuck.yaml", {**JOB, "output": "stuck.mp4"}, age=60)
    candidates = {c.source: c.name for c in slot.scan().candidates}
    for name in candidates.values():
        slot.scanner.claim_failed(name, "Permission denied")
    retry, stuck = candidates["retry"], candidates["incoming"]
    assert slot.scanner.blocked_in() == {retry: "retry", stuck: "incoming"}
    announce(slot, blocked=slot.scanner.blocked(), blocked_in=slot.scanner.blocked_in())
    status = collect_status(slot.config)
    jsonschema.validate(status, SCHEMA)
    [runner] = status["runners"]
    assert runner["blocked_in"] == {retry: "retry", stuck: "incoming"}
    text = format_status(status)
    assert f"retry/{retry}" in text and f"incoming/{stuck}" in text
    assert f"incoming/{retry}" not in text


def test_an_older_runners_blocked_entries_are_in_incoming(slot: Slot) -> None:
    announce(slot, blocked={"locked.yaml": "Permission denied", "q1/": "incoming/q1 is owned by uid 1001"})
    status = collect_status(slot.config)
    jsonschema.validate(status, SCHEMA)
    assert status["runners"][0]["blocked_in"] == {"locked.yaml": "incoming", "q1/": "incoming"}
    text = format_status(status)
    assert "incoming/locked.yaml" in text and "incoming/q1/" in text
    assert os.listdir(slot.layout.retry) == []
