"""Recovery of dead runners' jobs (recovery.Recoverer.sweep, called by the test) over a
real spool: a released lock, a silent heartbeat judged by the lease on the sweeper's own
clock, and the keys a runner owns itself."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from support.unit_spool import Slot, entries

from spoolrender.intake.claim import Claim
from spoolrender.lifecycle.recovery import Recoverer
from spoolrender.spool.heartbeat_file import heartbeat_path
from spoolrender.spool.records import read_runs


@pytest.fixture
def slot(tmp_path: Path) -> Slot:
    return Slot(tmp_path / "spool")


def claimed(slot: Slot, name: str) -> Claim:
    slot.drop(name, {"composition": "Intro"})
    slot.scanner.note_event(name, "moved_in")
    [candidate] = [c for c in slot.scan().candidates if c.name == name]
    claim = slot.claim(candidate)
    assert claim is not None
    return claim


def died(slot: Slot, claim: Claim) -> None:
    """Its runner stops beating and lets go of the lock, as a killed one does."""
    slot.heartbeat.remove(claim.token)
    claim.release()


def test_a_job_whose_lock_was_released_goes_back_to_retry_and_runs_again(slot: Slot) -> None:
    claim = claimed(slot, "intro.yaml")
    died(slot, claim)
    recoverer = Recoverer(slot.layout, slot.config, slot.clock, random.Random(27))
    assert recoverer.sweep(set()) == [claim.job_dir.name]
    assert entries(slot.layout, "running") == []
    [entry] = entries(slot.layout, "retry")
    [record] = read_runs(slot.layout.retry / entry)
    assert record.outcome == "retry" and record.error is not None
    assert record.error["kind"] == "runner-died" and record.error["transient"] is True
    assert "released its lock while still running" in record.error["message"]
    slot.advance(5)
    slot.scanner.note_event("", "")
    end = slot.run_next()
    assert (end.state, end.attempts) == ("done", 2)  # the dead run used an attempt


def test_a_silent_heartbeat_is_dead_only_after_a_whole_lease_of_this_sweepers_watching(slot: Slot) -> None:
    claim = claimed(slot, "intro.yaml")
    beat = heartbeat_path(claim.job_dir, claim.token)
    other_host = {**json.loads(beat.read_bytes()), "host": "elsewhere"}  # its lock proves nothing here
    beat.write_text(json.dumps(other_host))
    died(slot, claim)
    recoverer = Recoverer(slot.layout, slot.config, slot.clock, random.Random(27))
    lease = slot.config.lease_seconds
    assert recoverer.sweep(set()) == []  # first seen now, whatever its timestamps say
    slot.clock.advance(lease - 1)
    assert recoverer.sweep(set()) == []
    slot.clock.advance(2)
    assert recoverer.sweep(set()) == [claim.job_dir.name]
    [entry] = entries(slot.layout, "retry")
    [record] = read_runs(slot.layout.retry / entry)
    assert record.error is not None
    assert record.error["message"].endswith(
        f"on elsewhere: heartbeat unchanged for {lease + 1:.0f} s (lease {lease:g} s)"
    )


def test_a_heartbeat_another_host_keeps_writing_is_alive_and_own_jobs_are_never_recovered(slot: Slot) -> None:
    claim = claimed(slot, "intro.yaml")
    died(slot, claim)
    beat = heartbeat_path(claim.job_dir, claim.token)
    heartbeat = {**json.loads(beat.read_bytes()), "host": "elsewhere"}
    recoverer = Recoverer(slot.layout, slot.config, slot.clock, random.Random(27))
    for counter in range(2, 6):  # its runner on another host beats every half lease
        heartbeat["counter"] = counter
        beat.write_text(json.dumps(heartbeat))
        assert recoverer.sweep(set()) == []
        slot.clock.advance(slot.config.lease_seconds / 2)
    slot.clock.advance(slot.config.lease_seconds)  # and then stops: dead, but ours
    assert recoverer.sweep({claim.job_dir.name}) == []
    assert entries(slot.layout, "running") == [claim.job_dir.name]
    # Its own jobs are not watched: another sweeper's watch starts now, a lease to go.
    assert recoverer.sweep(set()) == []
    slot.clock.advance(slot.config.lease_seconds + 1)
    assert recoverer.sweep(set()) == [claim.job_dir.name]
