"""The renames that carry out a split job's decisions (spoolrender.chunks.moves), called
as a runner or a recoverer calls them, on a spool a real split left: one completion per
chunk, a chunk nobody needs dropped with its files, the job woken exactly once, its chunks
stopped and removed when it ends, a lost chunk queued again."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from support.frame_fake import FrameFake
from support.unit_spool import Slot, entries

from spoolrender import defaults
from spoolrender.chunks import moves
from spoolrender.chunks.ledger import chunk_states, finished_dir, read_plan
from spoolrender.chunks.moves import (
    DROPPED,
    decided_at,
    discard_chunks,
    finish_chunk,
    move_to_split,
    wake_if_ready,
    wake_parent,
)
from spoolrender.spool.chunk_names import chunk_store_name, is_chunk_name, ledger_dir, store_dir
from spoolrender.spool.records import FAILED, PUBLISHING, RunRecord, read_runs, run_path

JOB = {"composition": "Long", "output": "long.mp4", "chunks": 3, "props": {"frames": 90}}


@pytest.fixture
def slot(tmp_path: Path) -> Slot:
    return Slot(tmp_path / "spool", fake=FrameFake())


def split(slot: Slot) -> tuple[str, str]:
    """The job split: (its split/ name, its uid); its three chunks wait in retry/."""
    slot.drop("long.yaml", JOB)
    slot.advance(1)
    assert slot.run_next().state == "split"
    [key] = entries(slot.layout, "split")
    return key, key.rpartition(".")[2]


def run_chunk(slot: Slot) -> None:
    slot.advance(1)
    slot.scanner.note_event("", "")
    assert slot.run_next().outcome == "chunk-done"


def chunk_entries(slot: Slot, state: str) -> list[str]:
    return [n for n in entries(slot.layout, state) if is_chunk_name(n)]


def second_copy(slot: Slot, key: str, index: int, scratch_bytes: bytes | None) -> tuple[Path, RunRecord]:
    """Another runner's copy of chunk ``index`` (a claim taken over, both rendered), in
    running/, with its decision: PUBLISHING with a scratch file, or FAILED without one."""
    copy = slot.layout.running / f"copy-of-{index}"
    copy.mkdir()
    finished = finished_dir(slot.layout, key) / f"{index:04d}"
    (copy / defaults.CHUNK_FILENAME).write_bytes((finished / defaults.CHUNK_FILENAME).read_bytes())
    publish = None
    if scratch_bytes is not None:
        scratch = slot.config.output_root / ".spoolrender-tmp" / "copy-scratch"
        scratch.mkdir(parents=True)
        (scratch / "frames.txt").write_bytes(scratch_bytes)
        publish = {"temp": str(scratch.relative_to(slot.config.output_root))}
    outcome = PUBLISHING if scratch_bytes is not None else FAILED
    record = RunRecord(run=1, outcome=outcome, host="other", pid=1, token="second", ended=time.time(), publish=publish)
    return copy, record


def test_of_two_copies_of_a_chunk_one_completes_and_the_other_is_dropped_with_its_files(slot: Slot) -> None:
    key, _ = split(slot)
    run_chunk(slot)
    [index_dir] = os.listdir(finished_dir(slot.layout, key))
    finished = finished_dir(slot.layout, key) / index_dir
    first = {p.name: p.read_bytes() for p in finished.iterdir()}
    stored = sorted(os.listdir(store_dir(slot.config.output_root, key)))
    copy, record = second_copy(slot, key, int(index_dir), b"0\n")
    went = finish_chunk(slot.layout, slot.config.output_root, copy, record)
    assert went.parent.name == DROPPED
    assert not copy.exists()
    assert {p.name: p.read_bytes() for p in finished.iterdir()} == first  # the first completion stands
    assert sorted(os.listdir(store_dir(slot.config.output_root, key))) == stored  # its files, not the copy's
    assert not (slot.config.output_root / record.publish["temp"]).exists()  # type: ignore[index]


def test_a_chunk_that_finishes_after_its_job_ended_is_dropped_with_its_scratch(slot: Slot) -> None:
    key, _ = split(slot)
    run_chunk(slot)
    [index_dir] = os.listdir(finished_dir(slot.layout, key))
    copy, record = second_copy(slot, key, int(index_dir), b"0\n")
    discard_chunks(slot.layout, slot.config.output_root, key)  # the job ended meanwhile
    went = finish_chunk(slot.layout, slot.config.output_root, copy, record)
    assert went.parent.name == DROPPED
    assert not copy.exists()
    assert not (slot.config.output_root / record.publish["temp"]).exists()  # type: ignore[index]
    assert not store_dir(slot.config.output_root, key).exists()


def test_a_failed_copy_of_a_finished_chunk_never_replaces_its_completion(slot: Slot) -> None:
    key, _ = split(slot)
    run_chunk(slot)
    [index_dir] = os.listdir(finished_dir(slot.layout, key))
    copy, record = second_copy(slot, key, int(index_dir), None)
    finish_chunk(slot.layout, slot.config.output_root, copy, record)
    plan = read_plan(slot.layout, key)
    assert plan is not None
    states = chunk_states(slot.layout, slot.config.output_root, key, key.rpartition(".")[2], plan)
    assert [f.error for f in states.finished.values()] == [None]  # done, not failed


def test_the_job_ending_stops_its_chunks_and_removes_every_chunk_file(slot: Slot) -> None:
    key, _ = split(slot)
    run_chunk(slot)  # one chunk in the store
    slot.advance(1)
    slot.scanner.note_event("", "")
    [candidate, *_] = slot.scan().candidates
    claimed = slot.claim(candidate)  # one running (its render not started)
    assert claimed is not None
    assert len(chunk_entries(slot, "retry")) == 1
    discard_chunks(slot.layout, slot.config.output_root, key)
    assert chunk_entries(slot, "retry") == []
    [running] = chunk_entries(slot, "running")
    assert (slot.layout.running / running / defaults.CANCEL_FILENAME).is_file()  # its owner stops it
    assert not ledger_dir(slot.layout, key).exists()
    assert not store_dir(slot.config.output_root, key).exists()
    discard_chunks(slot.layout, slot.config.output_root, key)  # again (a recoverer): nothing to do


def test_a_waiting_job_is_woken_once_and_only_when_its_chunks_need_nothing_more(slot: Slot) -> None:
    key, uid = split(slot)
    now = time.time()
    assert not wake_if_ready(slot.layout, slot.config.output_root, key, uid, 0, now)  # chunks waiting
    assert entries(slot.layout, "split") == [key]
    assert wake_parent(slot.layout, key, 0, now)
    assert not wake_parent(slot.layout, key, 0, now)  # a second waker finds it gone
    assert entries(slot.layout, "split") == []
    [woken] = [n for n in entries(slot.layout, "retry") if n.endswith(key)]
    assert woken.endswith(f"-{key}")


def test_a_decision_is_dated_by_its_record_files_mtime_else_by_its_decider(slot: Slot) -> None:
    key, _ = split(slot)
    job_dir = slot.layout.split / key
    [record] = [r for r in read_runs(job_dir) if r.outcome == "split"]
    os.utime(run_path(job_dir, record.run), (1_000_000, 1_000_000))  # the file server's clock
    assert decided_at(job_dir, record) == 1_000_000
    assert decided_at(slot.layout.done, record) == record.ended  # no record file there


def test_carrying_out_a_split_again_queues_a_lost_chunk_again_and_nothing_twice(slot: Slot) -> None:
    key, uid = split(slot)
    job_dir = slot.layout.split / key
    [record] = [r for r in read_runs(job_dir) if r.outcome == "split"]
    lost, *kept = sorted(chunk_entries(slot, "retry"), key=lambda n: n.rsplit(".", 1)[1])
    os.rename(slot.layout.retry / lost, slot.layout.retry.parent / "lost-chunk")  # gone from retry/
    # A recoverer carries out the decision again (the job is in split/ already).
    target = move_to_split(slot.layout, slot.config.output_root, slot.layout.running / key, "long", uid, record)
    assert target == job_dir
    again = chunk_entries(slot, "retry")
    assert len(again) == 3
    assert set(kept) < set(again)
    [requeued] = set(again) - set(kept)
    assert requeued.rsplit(".", 1)[1] == lost.rsplit(".", 1)[1]  # the same chunk
    # Due at the decision's time, by the record file's clock: it keeps its place in the queue.
    assert requeued.split("-", 2)[:2] == lost.split("-", 2)[:2]
    move_to_split(slot.layout, slot.config.output_root, slot.layout.running / key, "long", uid, record)
    assert sorted(chunk_entries(slot, "retry")) == sorted(again)  # nothing queued twice


def decided_chunk(slot: Slot, key: str) -> tuple[Path, RunRecord, int, Path]:
    """One waiting chunk of ``key`` as its owner leaves it once its run is decided PUBLISHING
    and not yet carried out: its entry in running/, its rendered files in scratch, its record."""
    [entry, *_] = sorted(chunk_entries(slot, "retry"))
    job_dir = slot.layout.running / f"{entry}.decided"
    job_dir.mkdir()
    info = (slot.layout.retry / entry / defaults.CHUNK_FILENAME).read_bytes()
    (job_dir / defaults.CHUNK_FILENAME).write_bytes(info)
    scratch = slot.config.output_root / ".spoolrender-tmp" / "decided-scratch"
    scratch.mkdir(parents=True)
    (scratch / "frames.txt").write_bytes(b"0\n")
    publish = {"temp": str(scratch.relative_to(slot.config.output_root))}
    record = RunRecord(
        run=1, outcome=PUBLISHING, host="owner", pid=1, token="decided", ended=time.time(), publish=publish
    )
    run_path(job_dir, record.run).write_bytes(record.to_json())  # decided: its record is on disk
    return job_dir, record, int(json.loads(info)["index"]), scratch


@pytest.mark.parametrize("recoverer_at", ["before-store", "after-store"])
def test_two_carriers_of_one_decided_chunk_run_complete_it_once(
    slot: Slot, monkeypatch: pytest.MonkeyPatch, recoverer_at: str
) -> None:
    """The owner of a decided chunk run and a recoverer that judged it dead (a stalled owner)
    carry out the same decision at once: the recoverer runs all of finish_chunk while the
    owner is just before, or just after, its move of the scratch into the store. The chunk
    completes once, with the run's files in the store under the run's name; the owner's
    call ends in FileNotFoundError, which the executor and recovery take as "carried out by
    another runner"."""
    key, _ = split(slot)
    job_dir, record, index, scratch = decided_chunk(slot, key)
    carried: list[Path] = []
    started: list[bool] = []

    def recoverer() -> None:
        if not started:  # once: the recoverer's own calls go straight through
            started.append(True)
            carried.append(finish_chunk(slot.layout, slot.config.output_root, job_dir, record))

    hooked = "store_root" if recoverer_at == "before-store" else "fsync_dir"
    real = getattr(moves, hooked)

    def interleaved(*args: object) -> object:
        recoverer()
        return real(*args)

    monkeypatch.setattr(moves, hooked, interleaved)
    with pytest.raises(FileNotFoundError):
        finish_chunk(slot.layout, slot.config.output_root, job_dir, record)  # the owner
    assert carried == [finished_dir(slot.layout, key) / f"{index:04d}"]
    assert not job_dir.exists() and not scratch.exists()
    stored = store_dir(slot.config.output_root, key) / chunk_store_name(index, record.token)
    assert os.listdir(store_dir(slot.config.output_root, key)) == [stored.name]
    assert (stored / "frames.txt").read_bytes() == b"0\n"
    plan = read_plan(slot.layout, key)
    assert plan is not None
    states = chunk_states(slot.layout, slot.config.output_root, key, key.rpartition(".")[2], plan)
    assert [(i, f.error) for i, f in states.finished.items()] == [(index, None)]
