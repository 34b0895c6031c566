"""intake.judge: which signal decides whether an upload in incoming/ is complete, and why."""

from __future__ import annotations

from typing import Any

import pytest

from spoolrender import defaults
from spoolrender.intake.completeness import Activity, UploadTracker, Verdict, judge
from spoolrender.intake.upload_writers import Writer

SETTLE = 5.0
RECHECK = 0.2


def verdict(**overrides: Any) -> Verdict:
    """A non-empty local file found by a listing, not settled yet, nobody writing: then ``overrides``."""
    facts: dict[str, Any] = {
        "activity": Activity.NONE,
        "writer": Writer.UNKNOWN,
        "local": True,
        "empty": False,
        "settled": False,
        "quiet_for": 1.0,
        "at_startup": False,
        "closers_alive": False,
        "settle": SETTLE,
        "recheck": RECHECK,
    }
    return judge(**{**facts, **overrides})


def test_a_local_writer_holds_it_whatever_else_says_complete() -> None:
    for activity in Activity:
        got = verdict(activity=activity, writer=Writer.HELD, settled=True, quiet_for=10_000.0, at_startup=True)
        assert got == Verdict(False, "open for writing by a local process", RECHECK), activity


@pytest.mark.parametrize(
    ("activity", "why"),
    [(Activity.RENAMED, "renamed into incoming/"), (Activity.CLOSED, "closed after writing")],
)
def test_a_rename_or_a_close_completes_it_before_it_settles(activity: Activity, why: str) -> None:
    assert verdict(activity=activity) == Verdict(True, why)


def test_a_close_whose_writer_still_runs_waits_for_the_settle_time() -> None:
    assert verdict(activity=Activity.CLOSED, closers_alive=True) == Verdict(
        False, "closed, but the process that wrote it still runs", RECHECK
    )
    assert verdict(activity=Activity.CLOSED, closers_alive=True, settled=True).complete


def test_a_write_without_a_close_waits_up_to_the_unclosed_write_limit() -> None:
    quiet = defaults.UNCLOSED_WRITE_S - 4.0
    got = verdict(activity=Activity.WRITING, quiet_for=quiet, settled=True)
    assert (got.complete, got.why) == (False, "being written (no close seen yet)")
    assert got.recheck_after == pytest.approx(4.0)
    late = verdict(activity=Activity.WRITING, quiet_for=defaults.UNCLOSED_WRITE_S, settled=True)
    assert late == Verdict(True, "written, never closed, quiet a long time")


def test_a_write_in_progress_is_overruled_only_by_a_local_proof_that_nobody_writes() -> None:
    assert verdict(activity=Activity.WRITING, writer=Writer.FREE, settled=True).complete
    # On a network filesystem no local writer says nothing about the other hosts'.
    assert not verdict(activity=Activity.WRITING, writer=Writer.FREE, local=False, settled=True).complete


def test_an_empty_file_is_complete_only_closed_and_settled() -> None:
    # rsync --inplace creates the file and writes nothing for seconds.
    created = verdict(activity=Activity.CREATED, empty=True, quiet_for=1.0, settled=True)
    assert not created.complete and created.why == "being written (no close seen yet)"
    closed = verdict(activity=Activity.CLOSED, empty=True, quiet_for=2.0)
    assert closed == Verdict(False, "empty, settling", SETTLE - 2.0)
    assert verdict(activity=Activity.CLOSED, empty=True, settled=True) == Verdict(True, "empty")


def test_a_link_is_judged_by_time() -> None:
    # A non-empty creation with no write is a link(): no writer at work, but no close either.
    assert verdict(activity=Activity.CREATED) == Verdict(False, "settling", SETTLE - 1.0)
    assert verdict(activity=Activity.CREATED, settled=True) == Verdict(True, "settled")


def test_a_backlog_found_at_start_up_is_complete_at_once_only_when_proven_free() -> None:
    assert verdict(at_startup=True, writer=Writer.FREE) == Verdict(True, "found at start-up, no local writer")
    assert not verdict(at_startup=True, writer=Writer.UNKNOWN).complete
    assert not verdict(at_startup=True, writer=Writer.FREE, local=False).complete


def test_the_tracker_revokes_a_close_by_a_later_write_and_forgets_names_gone() -> None:
    tracker = UploadTracker()
    assert tracker.activity("a.yaml") is Activity.NONE
    tracker.note("a.yaml", "created")
    assert tracker.activity("a.yaml") is Activity.CREATED
    tracker.note("a.yaml", "closed")
    assert tracker.activity("a.yaml") is Activity.CLOSED
    tracker.note("a.yaml", "modified")  # `>` then `>>`: written again after the close
    assert tracker.activity("a.yaml") is Activity.WRITING
    tracker.note("b.yaml", "moved_in")
    tracker.note("b.yaml", "unheard-of")  # not an event it knows: no change
    assert tracker.activity("b.yaml") is Activity.RENAMED
    tracker.retain({"b.yaml"})
    assert tracker.activity("a.yaml") is Activity.NONE
    tracker.forget("b.yaml")
    assert tracker.activity("b.yaml") is Activity.NONE
