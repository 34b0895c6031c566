"""The claim rename over a real spool: what ends up where, a lost race, a file replaced
after the scan read it, and an entry that is no job file."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from support.unit_spool import Slot, entries

from spoolrender import defaults
from spoolrender.spool.heartbeat import lock_path
from spoolrender.spool.heartbeat_file import heartbeat_path

JOB = {"composition": "Intro", "output": "x.mp4"}


@pytest.fixture
def slot(tmp_path: Path) -> Slot:
    return Slot(tmp_path / "spool")


def test_a_claim_moves_the_file_into_its_own_running_directory(slot: Slot) -> None:
    dropped = slot.drop("intro.yaml", JOB)
    data = dropped.read_bytes()
    [candidate] = slot.scan().candidates
    claimed = slot.claim(candidate)
    assert claimed is not None
    try:
        assert entries(slot.layout, "incoming") == []
        assert entries(slot.layout, "running") == [claimed.job_dir.name]
        assert claimed.job_dir.name.startswith("intro.")
        assert (claimed.job_id, claimed.run, claimed.refusal, claimed.source_name) == ("intro", 1, None, "intro.yaml")
        # The submitter's file and the runner's private, read-only copy of the same bytes.
        assert (claimed.job_dir / defaults.SUBMITTED_FILENAME).read_bytes() == data
        copy = claimed.job_dir / defaults.JOB_FILENAME
        assert copy.read_bytes() == data
        assert not os.stat(copy).st_mode & 0o222
        beat = os.lstat(heartbeat_path(claimed.job_dir, claimed.token))  # a first beat before the rename
        # ... written into the claim's new lock file: no inode of its own (heartbeat.JobLock.publish_as)
        assert beat.st_ino == os.lstat(lock_path(claimed.job_dir, claimed.token)).st_ino
    finally:
        slot.heartbeat.remove(claimed.token)
        claimed.release()


def test_a_candidate_claimed_by_another_runner_first_is_a_lost_race(slot: Slot) -> None:
    slot.drop("intro.yaml", JOB)
    [candidate] = slot.scan().candidates
    os.rename(slot.layout.incoming / "intro.yaml", slot.layout.root / "elsewhere.yaml")
    assert slot.claim(candidate) is None
    assert entries(slot.layout, "running") == []  # nothing of the claim is left behind


def test_a_file_replaced_after_the_scan_goes_back_to_be_scanned_again(slot: Slot) -> None:
    slot.drop("intro.yaml", JOB)
    [candidate] = slot.scan().candidates
    slot.drop("intro.yaml", {**JOB, "priority": 9})  # a new inode, other bytes, same name
    assert slot.claim(candidate) is None
    assert entries(slot.layout, "running") == []
    assert b"priority: 9" in (slot.layout.incoming / "intro.yaml").read_bytes()
    slot.scanner.note_event("intro.yaml", "moved_in")
    [again] = slot.scan().candidates
    assert again.sort_key[1] == -9  # scanned afresh: this file's priority now


def test_an_entry_that_is_no_regular_file_is_claimed_to_fail_with_what_it_was(slot: Slot) -> None:
    os.mkfifo(slot.layout.incoming / "pipe.yaml")
    old = 1_000_000_000
    os.utime(slot.layout.incoming / "pipe.yaml", (old, old))
    [candidate] = slot.scan().candidates
    claimed = slot.claim(candidate)
    assert claimed is not None
    end = slot.executor.execute(claimed)
    assert (end.state, end.error_kind) == ("failed", "invalid-job")
    assert end.error_message == "job file: expected a regular file, got a FIFO"
    assert entries(slot.layout, "incoming") == []  # removed, never moved into the runner's tree
    [failed] = entries(slot.layout, "failed")
    assert failed.startswith("pipe.")
