"""SpoolScanner over a real incoming/: queue order, uploads in progress, settling,
not_before, invalid files and the backoff of entries that cannot be claimed."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

import pytest
from support.unit_spool import Slot

from spoolrender import defaults
from spoolrender.testing import Fail, Succeed

JOB = {"composition": "Intro", "output": "x.mp4"}


@pytest.fixture
def slot(tmp_path: Path) -> Slot:
    return Slot(tmp_path / "spool", {"settle_seconds": 5})


def names(slot: Slot) -> list[str]:
    return [c.name for c in slot.scan().candidates]


def test_higher_priority_first_then_the_older_file_then_the_name(slot: Slot) -> None:
    slot.drop("old.yaml", {**JOB, "output": "old.mp4"}, age=300)
    slot.drop("newer.yaml", {**JOB, "output": "newer.mp4"}, age=100)
    slot.drop("urgent.yaml", {**JOB, "output": "urgent.mp4", "priority": 5}, age=10)
    slot.drop("low.yaml", {**JOB, "output": "low.mp4", "priority": -1}, age=900)
    mtime = (slot.layout.incoming / "newer.yaml").stat().st_mtime
    slot.drop("newer-twin.yaml", {**JOB, "output": "twin.mp4"})
    twin = slot.layout.incoming / "newer-twin.yaml"
    os.utime(twin, (mtime, mtime))  # the same arrival: the name decides
    assert names(slot) == ["urgent.yaml", "old.yaml", "newer-twin.yaml", "newer.yaml", "low.yaml"]
    first = slot.scan().candidates[0]
    assert (first.job_id, first.source, first.sort_key[1]) == ("urgent", "incoming", -5)


def test_names_of_uploads_in_progress_are_never_candidates_nor_waiting(slot: Slot) -> None:
    for name in (".hidden.yaml", "a.yaml.part", "b.yaml.tmp", "c.yaml~"):
        slot.drop(name, JOB)
    result = slot.scan()
    assert (result.candidates, result.waiting_uploads) == ([], 0)


def test_a_new_file_waits_for_the_settle_time_on_the_scanners_clock(slot: Slot) -> None:
    assert names(slot) == []  # the first listing is over: what comes now is no backlog
    slot.drop("fresh.yaml", JOB, age=0)
    result = slot.scan()
    assert (result.candidates, result.waiting_uploads) == ([], 1)
    assert result.next_wake == pytest.approx(slot.clock.monotonic() + 5, abs=0.5)
    slot.clock.advance(4.0)
    assert names(slot) == []
    slot.clock.advance(1.5)
    assert names(slot) == ["fresh.yaml"]


def test_a_file_that_does_not_parse_is_a_candidate_only_once_settled(slot: Slot) -> None:
    assert names(slot) == []
    slot.drop("broken.yaml", "composition: [unclosed\n", age=0)
    assert slot.scan().waiting_uploads == 1  # an upload in progress does not parse either
    slot.clock.advance(6)
    [candidate] = slot.scan().candidates
    # Invalid: ranked first (whoever sees it fails it), under the id of its file name.
    assert (candidate.name, candidate.job_id, candidate.sort_key[0]) == ("broken.yaml", "broken", 0)


def test_a_job_not_before_a_time_waits_for_it_on_the_spools_clock(slot: Slot) -> None:
    later = datetime.fromtimestamp(slot.clock.wall() + 120, UTC).isoformat()
    slot.drop("later.yaml", {**JOB, "not_before": later})
    result = slot.scan()
    assert result.candidates == []
    assert result.next_wake == pytest.approx(slot.clock.monotonic() + 120, abs=1)
    slot.clock.advance(121)
    [candidate] = slot.scan().candidates
    # Ordered by its not_before, not by the (older) arrival of its file.
    assert candidate.sort_key[2] == pytest.approx(slot.clock.wall() - 1, abs=1)


def test_an_entry_that_cannot_be_claimed_backs_off_doubling(slot: Slot) -> None:
    slot.drop("stuck.yaml", JOB)
    slot.drop("fine.yaml", {**JOB, "output": "fine.mp4"}, age=30)
    assert names(slot) == ["stuck.yaml", "fine.yaml"]
    slot.scanner.claim_failed("stuck.yaml", "Permission denied")
    assert slot.scanner.blocked() == {"stuck.yaml": "Permission denied"}
    assert names(slot) == ["fine.yaml"]  # off the reused listing at once
    slot.scanner.note_event("", "")  # a listing: the blocked entry's next try is its wake-up
    result = slot.scan()
    assert [c.name for c in result.candidates] == ["fine.yaml"]
    assert result.next_wake == slot.clock.monotonic() + defaults.BLOCKED_RETRY_MIN_S
    slot.clock.advance(defaults.BLOCKED_RETRY_MIN_S)
    assert names(slot) == ["stuck.yaml", "fine.yaml"]
    slot.scanner.claim_failed("stuck.yaml", "Permission denied")  # the second failure: twice as long
    slot.scanner.note_event("", "")
    assert slot.scan().next_wake == slot.clock.monotonic() + 2 * defaults.BLOCKED_RETRY_MIN_S
    slot.clock.advance(defaults.BLOCKED_RETRY_MIN_S)
    assert names(slot) == ["fine.yaml"]
    slot.clock.advance(defaults.BLOCKED_RETRY_MIN_S)
    assert names(slot) == ["stuck.yaml", "fine.yaml"]
    (slot.layout.incoming / "stuck.yaml").unlink()
    slot.scanner.note_event("stuck.yaml", "deleted")
    assert names(slot) == ["fine.yaml"]
    assert slot.scanner.blocked() == {}  # gone from incoming/: forgotten


def test_a_blocked_entry_comes_back_after_its_backoff_without_a_new_arrival(slot: Slot) -> None:
    """The reused listing ends when the blocked entry may be tried again (it came back only at
    the next full listing, rescan_seconds later, before claim_failed shortened its wake)."""
    slot.drop("stuck.yaml", JOB)
    slot.drop("fine.yaml", {**JOB, "output": "fine.mp4"}, age=30)
    assert names(slot) == ["stuck.yaml", "fine.yaml"]
    slot.scanner.claim_failed("stuck.yaml", "Permission denied")
    result = slot.scan()  # the reused listing, minus the blocked entry
    assert [c.name for c in result.candidates] == ["fine.yaml"]
    assert result.next_wake == slot.clock.monotonic() + defaults.BLOCKED_RETRY_MIN_S
    assert slot.config.rescan_seconds > defaults.BLOCKED_RETRY_MIN_S
    slot.clock.advance(defaults.BLOCKED_RETRY_MIN_S)
    assert names(slot) == ["stuck.yaml", "fine.yaml"]


def test_a_listing_is_reused_until_something_arrives(slot: Slot) -> None:
    slot.drop("a.yaml", JOB)
    assert names(slot) == ["a.yaml"]
    slot.drop("b.yaml", {**JOB, "output": "b.mp4"}, age=120)
    assert names(slot) == ["a.yaml"]  # no event, rescan_seconds not passed: the last listing
    slot.scanner.note_event("b.yaml", "moved_in")
    assert names(slot) == ["b.yaml", "a.yaml"]
    slot.scanner.forget("b.yaml")  # claimed: off the reused listing at once
    assert names(slot) == ["a.yaml"]


def test_a_job_dropped_into_a_queue_directory_carries_that_queue(tmp_path: Path) -> None:
    slot = Slot(tmp_path / "spool", {"queues": ["urgent", "default"]})
    slot.drop("urgent/a.yaml", JOB, age=10)
    slot.drop("b.yaml", {**JOB, "output": "b.mp4"}, age=500)
    candidates = slot.scan().candidates
    assert [(c.name, c.queue_dir, c.sort_key[0]) for c in candidates] == [("urgent/a.yaml", "urgent", 0),
                                                                          ("b.yaml", None, 1)]  # fmt: skip


def test_a_retry_entry_that_cannot_be_claimed_backs_off_doubling_too(slot: Slot) -> None:
    """A retry/ entry whose claim fails (a directory of mode 555 cannot be renamed) waits out
    its backoff, doubling, as an incoming/ one does: its blocked record was dropped at every
    listing (not in incoming/), so it was offered again at each listing, and since
    claim_failed shortens the reused listing's wake, a listing every second for good."""
    slot.fake.script("intro", Fail("worker-crash"), Succeed())
    slot.drop("intro.yaml", JOB)
    assert slot.run_next().state == "retry"
    slot.advance(1)
    [retry] = [c for c in slot.scan().candidates if c.source == "retry"]
    slot.scanner.claim_failed(retry.name, "Permission denied")
    assert slot.scanner.blocked() == {retry.name: "Permission denied"}
    slot.scanner.note_event("", "")  # a full listing does not offer it before its next try
    result = slot.scan()
    assert result.candidates == []
    assert result.next_wake == slot.clock.monotonic() + defaults.BLOCKED_RETRY_MIN_S
    slot.clock.advance(defaults.BLOCKED_RETRY_MIN_S)
    assert names(slot) == [retry.name]
    slot.scanner.claim_failed(retry.name, "Permission denied")  # the second: twice as long
    slot.clock.advance(defaults.BLOCKED_RETRY_MIN_S)
    assert names(slot) == []
    assert slot.scanner.blocked() == {retry.name: "Permission denied"}
    slot.clock.advance(defaults.BLOCKED_RETRY_MIN_S)
    assert names(slot) == [retry.name]
    taken = slot.claim(retry)
    assert taken is not None and slot.executor.execute(taken).state == "done"
    slot.scanner.note_event("", "")
    assert names(slot) == [] and slot.scanner.blocked() == {}  # gone from retry/: forgotten
