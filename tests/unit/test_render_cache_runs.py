"""The render cache in the executor's runs (render_cache_step): an identical job is
published from the cache without a render, anything its render depends on makes another
key, a tampered entry is never published, and a failed render stores nothing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from support.frame_fake import FrameFake
from support.unit_spool import Slot, entries

from spoolrender.testing import Fail

JOB = {"composition": "Intro", "props": {"title": "Week 48"}}


@pytest.fixture
def slot(tmp_path: Path) -> Slot:
    return Slot(tmp_path / "spool", {"render_cache": True}, fake=FrameFake(cached=True))


def run_details(slot: Slot, job_id: str) -> dict[str, Any]:
    [entry] = [e for e in entries(slot.layout, "done") if e.startswith(f"{job_id}.")]
    details: dict[str, Any] = json.loads((slot.layout.done / entry / "run-0001.json").read_bytes())["details"]
    return details


def cache_entries(slot: Slot) -> list[Path]:
    where = slot.config.output_root / ".spoolrender-cache" / "entries"
    return sorted(where.iterdir()) if where.is_dir() else []  # made by the first store


def test_an_identical_job_is_published_from_the_cache_without_a_render(slot: Slot) -> None:
    slot.drop("first.yaml", {**JOB, "output": "first.mp4"}, age=100)
    slot.drop("again.yaml", {**JOB, "output": "again.mp4"}, age=90)
    slot.drop("other.yaml", {**JOB, "output": "other.mp4", "props": {"title": "Week 49"}}, age=80)
    assert [slot.run_next().state for _ in range(3)] == ["done", "done", "done"]
    assert [r.job_id for r in slot.fake.runs] == ["first", "other"]
    out = slot.config.output_root
    assert (out / "again.mp4").read_bytes() == (out / "first.mp4").read_bytes()
    assert run_details(slot, "first")["cache"] == "stored"
    again = run_details(slot, "again")
    assert again["cache"] == "hit" and again["cache_source"]["id"] == "first"
    assert again["cache_key"] == run_details(slot, "first")["cache_key"] != run_details(slot, "other")["cache_key"]
    assert len(cache_entries(slot)) == 2


def test_a_tampered_entry_is_never_published_and_the_job_renders(slot: Slot) -> None:
    slot.drop("first.yaml", {**JOB, "output": "first.mp4"}, age=100)
    assert slot.run_next().state == "done"
    [entry] = cache_entries(slot)
    stored = entry / "output"
    stored.chmod(0o600)
    stored.write_bytes(b"x" * stored.stat().st_size)  # same size, other bytes
    slot.drop("again.yaml", {**JOB, "output": "again.mp4"}, age=90)
    slot.scanner.note_event("again.yaml", "moved_in")
    assert slot.run_next().state == "done"
    assert [r.job_id for r in slot.fake.runs] == ["first", "again"]
    assert b"x" * 8 not in (slot.config.output_root / "again.mp4").read_bytes()
    assert run_details(slot, "again")["cache"] != "hit"


def test_a_failed_render_stores_nothing(slot: Slot) -> None:
    slot.fake.script("first", Fail("worker-crash", transient=False))
    slot.drop("first.yaml", {**JOB, "output": "first.mp4"}, age=100)
    assert slot.run_next().state == "failed"
    assert cache_entries(slot) == []
    slot.drop("again.yaml", {**JOB, "output": "again.mp4"}, age=90)
    slot.scanner.note_event("again.yaml", "moved_in")
    assert slot.run_next().state == "done"
    assert [r.job_id for r in slot.fake.runs] == ["first", "again"]  # rendered: nothing to reuse
