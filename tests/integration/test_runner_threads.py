"""The runner's kept threads (issue 20, P2): a slot's thread runs job after job, and one
process-wide thread calls due timeouts. Unit tests: real threads, no subprocess."""

from __future__ import annotations

import threading
import time

from spoolrender.run.deadlines import _CANCELLED_KEPT, Deadlines
from spoolrender.runner.slot_threads import SlotThread

WAIT = 30.0  # generous: the machine is shared


def test_a_slot_thread_runs_jobs_in_turn_on_one_thread_and_sets_done_before_finished() -> None:
    ran: list[tuple[int, str]] = []
    seen_done: list[bool] = []
    events: list[threading.Event] = []

    def work(job: int) -> None:
        ran.append((job, threading.current_thread().name))
        if job == 1:
            raise RuntimeError("a bug in one run")  # must not end the slot's thread

    def finished() -> None:
        seen_done.append(events[-1].is_set())

    slot = SlotThread[int]("slot-7", work, finished)
    try:
        for job in range(3):
            done = threading.Event()
            events.append(done)
            slot.hand(job, done)
            assert done.wait(WAIT)
    finally:
        slot.stop()
    assert ran == [(0, "slot-7"), (1, "slot-7"), (2, "slot-7")]
    deadline = time.monotonic() + WAIT
    while len(seen_done) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert seen_done == [True, True, True]  # a loop woken by finished() finds the slot free


def test_a_deadline_calls_once_when_due_and_never_once_cancelled() -> None:
    deadlines = Deadlines(name="test-deadlines")
    fired: list[str] = []
    due = threading.Event()
    kept = deadlines.call_after(3600, lambda: fired.append("hour"))
    cancelled = deadlines.call_after(0.05, lambda: fired.append("cancelled"))
    cancelled.cancel()

    def now_due() -> None:
        fired.append("due")
        due.set()

    deadlines.call_after(0.1, now_due)  # earlier than the hour: wakes the thread
    assert due.wait(WAIT)
    kept.cancel()
    assert fired == ["due"]


def test_cancelled_deadlines_are_swept_out_of_the_heap() -> None:
    deadlines = Deadlines(name="test-deadlines")
    for _ in range(3 * _CANCELLED_KEPT):
        deadlines.call_after(3600, lambda: None).cancel()
    assert len(deadlines._heap) <= _CANCELLED_KEPT + 1


def test_a_timeout_too_long_for_a_wait_leaves_the_others_firing() -> None:
    """A timeout past what a wait takes (``timeout_seconds: 1e10``, "never") must not end the
    one thread every run's timeout depends on: a sooner one armed after it still fires."""
    deadlines = Deadlines(name="test-deadlines")
    never = deadlines.call_after(1e10, lambda: None)
    for _ in range(2):  # after the first, the thread waits for the long one
        due = threading.Event()
        deadlines.call_after(0.05, due.set)
        assert due.wait(WAIT)
    never.cancel()
