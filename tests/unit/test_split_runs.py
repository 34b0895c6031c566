"""Split jobs run by the real executor, chunk by chunk, with a renderer that renders frame
numbers (support/frame_fake.py): the plan, the chunk entries, the waiting job woken by its
last chunk, the join, a failed chunk, and the sweep that wakes a job nobody else would."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from support.frame_fake import FrameFake, frame_lines
from support.unit_spool import Slot, entries

from spoolrender.chunks.ledger import chunk_states, read_plan
from spoolrender.chunks.sweep import SplitSweeper
from spoolrender.ops.split_progress import chunk_progress
from spoolrender.spool.chunk_names import chunk_id, is_chunk_name, ledgers_root, parent_id
from spoolrender.spool.layout import final_name

JOB = {"composition": "Long", "output": "long.mp4", "chunks": 3, "props": {"frames": 90}}


@pytest.fixture
def slot(tmp_path: Path) -> Slot:
    return Slot(tmp_path / "spool", fake=FrameFake())


def fake(slot: Slot) -> FrameFake:
    assert isinstance(slot.fake, FrameFake)
    return slot.fake


def next_run(slot: Slot) -> tuple[str, str]:
    """Run what is due next (retry/ entries are due once the clock passes their backoff)."""
    slot.advance(1)
    slot.scanner.note_event("", "")
    end = slot.run_next()
    return end.state, end.outcome


def split_key(slot: Slot) -> str:
    [name] = entries(slot.layout, "split")
    return name


def test_a_split_job_renders_in_chunks_and_is_joined_in_frame_order(slot: Slot) -> None:
    slot.drop("long.yaml", JOB)
    assert next_run(slot) == ("split", "split")
    key = split_key(slot)
    plan = read_plan(slot.layout, key)
    assert plan is not None
    assert [(p.first, p.last) for p in plan.parts] == [(0, 29), (30, 59), (60, 89)]
    chunks = [name.split("-", 2)[2] for name in entries(slot.layout, "retry")]
    assert [c.rpartition(".")[0] for c in chunks] == [chunk_id("long", i) for i in range(3)]
    assert all(is_chunk_name(c) and parent_id(c.rpartition(".")[0]) == "long" for c in chunks)
    assert next_run(slot) == ("finished", "chunk-done")
    progress = chunk_progress(slot.layout, slot.config.output_root, key, now=slot.clock.wall())
    assert progress is not None
    assert (progress["chunks"]["done"], progress["chunks"]["waiting"], progress["frames"]) == (1, 2, 90)
    assert next_run(slot) == ("finished", "chunk-done")
    assert entries(slot.layout, "split") == [key]  # waits for its last chunk
    assert next_run(slot) == ("finished", "chunk-done")
    assert entries(slot.layout, "split") == []  # the last chunk woke it: in retry/, due now
    assert next_run(slot) == ("done", "done")
    assert [(c.first, c.last) for c in fake(slot).chunks] == [(0, 29), (30, 59), (60, 89)]
    assert len(fake(slot).joins) == 1
    assert (slot.config.output_root / "long.mp4").read_text() == frame_lines(0, 89)
    assert entries(slot.layout, "done") == [key]
    assert not os.listdir(ledgers_root(slot.layout))  # nothing of the split is left over


def test_a_chunk_that_fails_for_good_fails_its_job_naming_the_frames(slot: Slot) -> None:
    fake(slot).failing[1] = "frame 42 is cursed"
    slot.drop("long.yaml", JOB)
    assert next_run(slot) == ("split", "split")
    outcomes = [next_run(slot) for _ in range(3)]
    assert outcomes.count(("finished", "chunk-done")) == 2
    assert outcomes[1] == ("finished", "chunk-failed")  # chunk 2: its failure is in the ledger
    end_state = next_run(slot)  # the job, woken: nothing left to wait for
    assert end_state == ("failed", "failed")
    failed = [n for n in entries(slot.layout, "failed") if not is_chunk_name(n)]
    assert [n.rpartition(".")[0] for n in failed] == ["long"]
    reason = (slot.layout.failed / failed[0] / "failure.json").read_text()
    assert "chunk 2 of 3 (frames 30-59) failed: frame 42 is cursed" in reason
    assert fake(slot).joins == []
    assert not (slot.config.output_root / "long.mp4").exists()


def test_too_few_frames_render_whole(slot: Slot) -> None:
    slot.drop("short.yaml", {**JOB, "output": "short.mp4", "props": {"frames": 2}})
    assert next_run(slot) == ("done", "done")
    assert fake(slot).chunks == []


def test_the_sweep_wakes_a_job_whose_last_chunk_ended_without_waking_it(slot: Slot) -> None:
    slot.drop("long.yaml", JOB)
    assert next_run(slot) == ("split", "split")
    key = split_key(slot)
    for _ in range(3):
        assert next_run(slot) == ("finished", "chunk-done")
    # The last chunk's runner died between finishing it and waking the job: put it back.
    [woken] = entries(slot.layout, "retry")
    os.rename(slot.layout.retry / woken, slot.layout.split / key)
    plan = read_plan(slot.layout, key)
    assert plan is not None
    states = chunk_states(slot.layout, slot.config.output_root, key, key.rpartition(".")[2], plan)
    assert states.complete
    sweeper = SplitSweeper(slot.layout, slot.config, slot.clock)
    assert sweeper.sweep(slot.clock.wall()) == [key]
    assert entries(slot.layout, "split") == []
    assert next_run(slot) == ("done", "done")
    assert sweeper.sweep(slot.clock.wall()) == []
    assert final_name("long", key.rpartition(".")[2]) == key
