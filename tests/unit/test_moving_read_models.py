"""Read models that list a state and then read an entry's files, while the entry moves on
in between: a job (or a split job's chunk) is never shown going backwards, vanishing, or
counted twice or not at all because it moved between the listing and the read.

Each test moves an entry at the exact moment between one read and the next, by wrapping
the read model's own step (its listing, or the read after it) with a real move made by
the runner's code (a chunk finished by the executor, a claim, a run decided and carried
out), so that the window, which a busy machine opens once in a few dozen runs, is opened
every time.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
from support.frame_fake import FrameFake
from support.unit_spool import Slot, entries

from spoolrender.cli import commands
from spoolrender.cli.main import main
from spoolrender.errors import RenderError
from spoolrender.intake.claim import Claim
from spoolrender.ops import split_progress as chunk_progress_module
from spoolrender.ops.control import cancel, retry
from spoolrender.ops.metrics import spool_metrics_text
from spoolrender.ops.split_progress import chunk_progress, chunk_table
from spoolrender.ops.status import collect_status
from spoolrender.renderers.base import CancelToken, ProgressFn, RenderRequest, RenderResult
from spoolrender.serve.api import list_jobs
from spoolrender.serve.events import EventHub, current_job_events
from spoolrender.spool import heartbeat as heartbeat_module
from spoolrender.spool import layout as layout_module
from spoolrender.spool.chunk_names import is_chunk_name
from spoolrender.spool.durable import write_atomic
from spoolrender.spool.heartbeat import heartbeat_path, read_heartbeat
from spoolrender.testing import Fail, Succeed
from unit.test_serve_requests import Served

JOB = {"composition": "Long", "output": "long.mp4", "chunks": 3, "props": {"frames": 90}}


@pytest.fixture
def slot(tmp_path: Path) -> Iterator[Slot]:
    slot = Slot(tmp_path / "spool", fake=FrameFake())
    yield slot
    slot.close()


def claim_next(slot: Slot) -> Claim:
    """Claim what is due next (and leave it running: the test decides when it ends)."""
    slot.advance(1)
    slot.scanner.note_event("", "")
    taken = slot.claim(slot.scan().candidates[0])
    assert taken is not None
    return taken


def run_next(slot: Slot) -> tuple[str, str]:
    slot.advance(1)
    slot.scanner.note_event("", "")
    end = slot.run_next()
    return end.state, end.outcome


def after_first_call(monkeypatch: pytest.MonkeyPatch, module: Any, name: str, move: Callable[[], object]) -> list[int]:
    """Wrap ``module.name`` so that ``move`` runs once, right after its first call returns;
    returns the list of calls seen (its length is how many times it was called)."""
    original = getattr(module, name)
    calls: list[int] = []

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        result = original(*args, **kwargs)
        calls.append(1)
        if len(calls) == 1:
            move()
        return result

    monkeypatch.setattr(module, name, wrapped)
    return calls


def split_with_one_chunk_running(slot: Slot) -> tuple[str, Claim]:
    """A split job of 3 chunks of 30 frames: chunk 0 done, chunk 1 claimed (running), 2 waiting."""
    slot.drop("long.yaml", JOB)
    assert run_next(slot) == ("split", "split")
    [key] = entries(slot.layout, "split")
    assert run_next(slot) == ("finished", "chunk-done")
    return key, claim_next(slot)


def test_split_progress_counts_a_chunk_that_finishes_between_the_listing_and_its_heartbeat_read(
    slot: Slot, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The flake of test_chunks.py's events test (0.15, 0.4, 0.25): a running chunk that
    finished between the chunk listing and its heartbeat read was counted as running at
    0%, so the job's progress fell back by that chunk's share."""
    key, running = split_with_one_chunk_running(slot)
    before = chunk_progress(slot.layout, slot.config.output_root, key, now=slot.clock.wall())
    assert before is not None and before["chunks"]["running"] == 1 and before["progress"] == pytest.approx(1 / 3, 1e-3)
    # Listed as running; then its run ends (the chunk moves to finished/) before its heartbeat is read.
    calls = after_first_call(monkeypatch, chunk_progress_module, "chunk_states", lambda: slot.executor.execute(running))
    after = chunk_progress(slot.layout, slot.config.output_root, key, now=slot.clock.wall())
    assert calls, "the hook never ran: the read model no longer lists through chunk_states"
    assert after is not None
    assert (after["chunks"]["done"], after["chunks"]["running"], after["chunks"]["waiting"]) == (2, 0, 1), after
    assert after["progress"] == pytest.approx(2 / 3, 1e-3)


def test_the_chunk_table_shows_a_chunk_that_finishes_between_the_listing_and_its_read_as_done(
    slot: Slot, monkeypatch: pytest.MonkeyPatch
) -> None:
    key, running = split_with_one_chunk_running(slot)
    after_first_call(monkeypatch, chunk_progress_module, "chunk_states", lambda: slot.executor.execute(running))
    rows = chunk_table(slot.layout, slot.config.output_root, key, now=slot.clock.wall())
    assert rows is not None
    assert [(r["state"], r["progress"]) for r in rows] == [("done", 1.0), ("done", 1.0), ("waiting", None)], rows


def test_split_progress_counts_a_chunk_claimed_while_the_chunks_are_listed_once(
    slot: Slot, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A chunk claimed after retry/ was first listed was counted waiting and running."""
    key, _ = split_with_one_chunk_running(slot)
    after_listing(monkeypatch, slot.layout.retry, lambda: claim_next(slot))  # chunk 2, waiting until now
    after = chunk_progress(slot.layout, slot.config.output_root, key, now=slot.clock.wall())
    assert after is not None
    assert (after["chunks"]["done"], after["chunks"]["running"], after["chunks"]["waiting"]) == (1, 2, 0), after


class FailsChunkOnce(FrameFake):
    """Chunk 1's first render fails, as one a network hiccup stopped: it goes back to retry/
    (``transient=False``: as one whose props throw: it fails for good, and its job with it)."""

    def __init__(self, *, transient: bool = True) -> None:
        super().__init__()
        self.transient = transient
        self.failed_once = False

    def render(self, request: RenderRequest, progress: ProgressFn, cancel: CancelToken) -> RenderResult:
        if request.chunk is not None and request.chunk.index == 1 and not self.failed_once:
            self.failed_once = True
            raise RenderError("the chunk's render failed", transient=self.transient)
        return super().render(request, progress, cancel)


def test_split_progress_counts_a_chunk_that_fails_back_to_retry_between_the_listing_and_its_read_as_waiting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    slot = Slot(tmp_path / "spool", fake=FailsChunkOnce())
    try:
        key, running = split_with_one_chunk_running(slot)
        after_first_call(monkeypatch, chunk_progress_module, "chunk_states", lambda: slot.executor.execute(running))
        after = chunk_progress(slot.layout, slot.config.output_root, key, now=slot.clock.wall())
        assert len(entries(slot.layout, "retry")) == 2  # it did go back
        assert after is not None
        assert (after["chunks"]["done"], after["chunks"]["running"], after["chunks"]["waiting"]) == (1, 0, 2), after
    finally:
        slot.close()


# --- a job that moves while the state directories are listed ------------------------------


def after_listing(monkeypatch: pytest.MonkeyPatch, directory: Path, move: Callable[[], object]) -> list[int]:
    """Run ``move`` once, right after ``directory`` is first listed (by any module's
    ``list_names``, as imported from spoolrender.spool.layout); returns the moves made."""
    original = layout_module.list_names
    moved: list[int] = []

    def listed(path: Path) -> list[str]:
        names = original(path)
        if Path(path) == directory and not moved:
            moved.append(1)
            move()
        return names

    for module in list(sys.modules.values()):
        if getattr(module, "list_names", None) is original:
            monkeypatch.setattr(module, "list_names", listed)
    return moved


@dataclass(frozen=True)
class Move:
    """A job's one move (``before`` -> ``after``), made right after ``listed`` is listed."""

    before: str
    after: str
    listed: str
    make: Callable[[], object]


def claimed_from_incoming(slot: Slot) -> Move:
    slot.drop("a.yaml", {"composition": "Main", "output": "a.mp4"})
    return Move("incoming", "running", "running", lambda: claim_next(slot))


def claimed_from_retry(slot: Slot) -> Move:
    slot.fake.script("a", Fail(transient=True), Fail(transient=True))
    slot.drop("a.yaml", {"composition": "Main", "output": "a.mp4"})
    assert run_next(slot)[0] == "retry"
    return Move("retry", "running", "running", lambda: claim_next(slot))


def run_ends(slot: Slot) -> Move:
    slot.drop("a.yaml", {"composition": "Main", "output": "a.mp4"})
    running = claim_next(slot)
    return Move("running", "done", "running", lambda: slot.executor.execute(running))


def woken_for_its_join(slot: Slot) -> Move:
    slot.drop("long.yaml", JOB)
    assert run_next(slot) == ("split", "split")
    assert run_next(slot) == ("finished", "chunk-done")
    assert run_next(slot) == ("finished", "chunk-done")
    last = claim_next(slot)  # its end wakes the job: split/ -> retry/
    return Move("split", "retry", "retry", lambda: slot.executor.execute(last))


def sent_back_from_failed(slot: Slot) -> Move:
    slot.fake.script("a", Fail(transient=False))
    slot.drop("a.yaml", {"composition": "Main", "output": "a.mp4"})
    assert run_next(slot)[0] == "failed"
    return Move("failed", "retry", "retry", lambda: retry(slot.config, "a"))


def made_due_now(slot: Slot) -> Move:
    """`spoolrender retry` of a job waiting out its backoff: renamed within retry/ (listed twice)."""
    move = claimed_from_retry(slot)
    [waiting] = entries(slot.layout, "retry")
    due, rest = waiting.split("-", 1)  # its backoff an hour long (the unit spool's is 10 ms)
    os.rename(slot.layout.retry / waiting, slot.layout.retry / f"{int(due) + 3_600_000:013d}-{rest}")
    return replace(move, after="retry", listed="retry", make=lambda: retry(slot.config, "a"))


def cancelled_while_waiting(slot: Slot) -> Move:
    """Two moves in a few milliseconds: `spoolrender cancel` claims a waiting job and fails it."""
    move = claimed_from_retry(slot)
    return replace(move, after="failed", make=lambda: cancel(slot.config, "a", "a test"))


def claimed_and_run_to_its_end(slot: Slot) -> Move:
    """Two moves: claimed from retry/ and run to done/ (a quick job) while done/ is listed."""
    slot.fake.script("a", Fail(transient=True), Succeed())
    slot.drop("a.yaml", {"composition": "Main", "output": "a.mp4"})
    assert run_next(slot)[0] == "retry"

    def claim_and_run() -> None:
        assert slot.executor.execute(claim_next(slot)).state == "done"

    return Move("retry", "done", "running", claim_and_run)


MOVES = [claimed_from_incoming, claimed_from_retry, run_ends, woken_for_its_join, sent_back_from_failed,
         made_due_now, cancelled_while_waiting, claimed_and_run_to_its_end]  # fmt: skip


def status_states(slot: Slot) -> list[str]:
    counts = collect_status(slot.config)["counts"]
    return [state for state, n in counts.items() for _ in range(n)]


def list_states(slot: Slot) -> list[str]:
    return [j["state"] for j in list_jobs(slot.config, state=None, limit=100, offset=0)["jobs"]]


def metrics_states(slot: Slot) -> list[str]:
    text = spool_metrics_text(slot.config)
    gauges = re.findall(r'^spoolrender_jobs\{state="(\w+)"\} (\S+)$', text, re.MULTILINE)
    return [state for state, value in gauges for _ in range(int(float(value)))]


@pytest.mark.parametrize("read", [status_states, list_states, metrics_states])
@pytest.mark.parametrize("setup", MOVES)
def test_a_job_that_moves_while_the_states_are_listed_is_counted_once(
    slot: Slot, monkeypatch: pytest.MonkeyPatch, setup: Callable[[Slot], Move], read: Callable[[Slot], list[str]]
) -> None:
    """`status` (and the events' summaries), `list` (GET /jobs) and the metrics: one job in
    one state, the one it left or the one it went to, never in none or in both."""
    move = setup(slot)
    assert read(slot) == [move.before]
    moved = after_listing(monkeypatch, slot.layout.state_dir(move.listed), move.make)
    seen = read(slot)
    assert moved, f"{move.listed}/ was never listed"
    assert [n for n in entries(slot.layout, move.after) if not is_chunk_name(n)], "the job never moved"
    # status and the metrics count a job woken for its join with split/ (status.job_counts).
    assert len(seen) == 1 and seen[0] in (move.before, move.after), seen


@pytest.mark.parametrize("setup", MOVES)
def test_the_event_stream_tells_a_job_that_moves_while_the_states_are_listed_as_one_move(
    slot: Slot, monkeypatch: pytest.MonkeyPatch, setup: Callable[[Slot], Move]
) -> None:
    """Not ``removed`` and then a "new" job (it was in no listing), nor the job in its new
    state and then ``removed`` from its old one (it was in both)."""
    move = setup(slot)
    hub = EventHub(slot.config, poll_seconds=60)
    hub.poll()  # the baseline
    start = hub.last_seq()
    after_listing(monkeypatch, slot.layout.state_dir(move.listed), move.make)
    hub.poll()
    hub.poll()
    events = [json.loads(e.data) for e in hub.wait(start, 0) or [] if e.kind == "state"]
    job = "long" if move.before == "split" else "a"
    assert [(e["state"], e["previous"]) for e in events if e["id"] == job] == [(move.after, move.before)], events


# --- a running job whose run ends between the listing and its heartbeat read --------------


def before_first_heartbeat_read(monkeypatch: pytest.MonkeyPatch, move: Callable[[], object]) -> list[int]:
    """Run ``move`` once, right before the first heartbeat read (by any module's
    ``read_heartbeat``, as imported from spoolrender.spool.heartbeat); returns the moves made."""
    original = heartbeat_module.read_heartbeat
    moved: list[int] = []

    def read(*args: Any, **kwargs: Any) -> Any:
        if not moved:
            moved.append(1)
            move()
        return original(*args, **kwargs)

    for module in list(sys.modules.values()):
        if getattr(module, "read_heartbeat", None) is original:
            monkeypatch.setattr(module, "read_heartbeat", read)
    return moved


def status_view(slot: Slot) -> list[tuple[str, bool | None]]:
    doc = collect_status(slot.config)
    assert doc["counts"]["running"] == len(doc["running"]), doc
    others = [(s, None) for s, n in doc["counts"].items() if s != "running" for _ in range(n)]
    return [("running", r["stale"]) for r in doc["running"]] + others


def list_view(slot: Slot) -> list[tuple[str, bool | None]]:
    return [(j["state"], j.get("stale")) for j in list_jobs(slot.config, state=None, limit=100, offset=0)["jobs"]]


def follow_view(slot: Slot) -> list[tuple[str, bool | None]]:
    """What ``/events?job=a`` starts with (its state, and a running job's progress)."""
    events = dict(current_job_events(slot.config, "a"))
    return [(events["state"]["state"], events.get("progress", {}).get("stale"))]


@pytest.mark.parametrize("view", [status_view, list_view, follow_view])
def test_a_job_whose_run_ends_between_the_listing_and_its_heartbeat_read_is_not_shown_stale(
    slot: Slot, monkeypatch: pytest.MonkeyPatch, view: Callable[[Slot], list[tuple[str, bool | None]]]
) -> None:
    """Read after its move, the heartbeat is gone with the job: it showed as running,
    STALE, without progress (red on the dashboard, ", STALE" in `list`)."""
    slot.drop("a.yaml", {"composition": "Main", "output": "a.mp4"})
    running = claim_next(slot)
    assert view(slot) == [("running", False)]
    moved = before_first_heartbeat_read(monkeypatch, lambda: slot.executor.execute(running))
    assert view(slot) == [("done", None)]
    assert moved


def test_status_lists_the_states_once_when_a_run_ends_before_its_heartbeat_is_read(
    slot: Slot, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The job moved on is looked for where it went, not found by listing every state
    again: a second listing of done/ costs what the first did (a second of CPU at a million
    done jobs), and beside 100k done jobs with a running job ending every 125 ms `status`
    took 2.9 snapshots on average (its CPU x2.1), as did every poll of serve's event stream."""
    slot.drop("a.yaml", {"composition": "Main", "output": "a.mp4"})
    running = claim_next(slot)
    original = layout_module.list_names
    listings: list[str] = []

    def counted(path: Path) -> list[str]:
        listings.append(Path(path).name)
        return original(path)

    for module in list(sys.modules.values()):
        if getattr(module, "list_names", None) is original:
            monkeypatch.setattr(module, "list_names", counted)
    moved = before_first_heartbeat_read(monkeypatch, lambda: slot.executor.execute(running))
    listings.clear()
    assert status_view(slot) == [("done", None)]
    assert moved and listings.count("done") == 1, listings


def test_the_event_stream_never_tells_a_job_whose_run_ends_during_a_poll_as_stale(
    slot: Slot, monkeypatch: pytest.MonkeyPatch
) -> None:
    slot.drop("a.yaml", {"composition": "Main", "output": "a.mp4"})
    running = claim_next(slot)
    hub = EventHub(slot.config, poll_seconds=60)
    hub.poll()
    start = hub.last_seq()
    before_first_heartbeat_read(monkeypatch, lambda: slot.executor.execute(running))
    hub.poll()
    hub.poll()
    events = [(e.kind, json.loads(e.data)) for e in hub.wait(start, 0) or [] if e.kind != "summary"]
    assert [(kind, data["state"], data.get("stale")) for kind, data in events] == [("state", "done", None)], events


# --- progress published over time never falls back within a run --------------------------


def report_progress(claim: Claim, progress: float) -> None:
    """The claim's runner reports ``progress``: its next heartbeat, as HeartbeatWriter writes it."""
    hb = read_heartbeat(claim.job_dir, claim.token)
    assert hb is not None
    write_atomic(heartbeat_path(claim.job_dir, claim.token), replace(hb, progress=progress).to_json(), durable=False)


def chunk_falls_back(tmp_path: Path) -> tuple[Slot, Callable[[], object]]:
    """A split job at 30 + 0.6 x 30 of its 90 frames (chunk 1 running at 60%); the returned
    step fails chunk 1's run back to retry/, and the job's frames rendered fall to 30."""
    slot = Slot(tmp_path / "spool", fake=FailsChunkOnce())
    _, running = split_with_one_chunk_running(slot)
    report_progress(running, 0.6)
    return slot, lambda: slot.executor.execute(running)


def test_the_event_stream_never_publishes_a_split_jobs_progress_falling_back(tmp_path: Path) -> None:
    slot, fall_back = chunk_falls_back(tmp_path)
    try:
        hub = EventHub(slot.config, poll_seconds=60)
        hub.poll()
        fall_back()
        hub.poll()
        events = [(e.kind, json.loads(e.data)) for e in hub.wait(0, 0) or []]
        published = [data["progress"] for kind, data in events if kind == "progress" and data["state"] == "split"]
        published += [data["split"][0]["progress"] for kind, data in events if kind == "summary"]
        assert published and all(p == pytest.approx(0.5333, abs=1e-3) for p in published), events
        # The fall is told, at the progress held: the chunks' counts changed.
        assert [data["chunks"]["waiting"] for kind, data in events if kind == "progress"] == [2], events
    finally:
        slot.close()


def test_serve_never_answers_a_split_jobs_progress_falling_back(tmp_path: Path) -> None:
    """GET /status, /jobs and /jobs/{id} hold it as the events do (one server, one floor)."""
    slot, fall_back = chunk_falls_back(tmp_path)
    served = Served(slot)
    try:
        assert served.get("/status").json()["split"][0]["progress"] == pytest.approx(0.5333, abs=1e-3)
        fall_back()
        assert collect_status(slot.config)["split"][0]["progress"] == pytest.approx(1 / 3, abs=1e-3)  # as read
        assert served.get("/status").json()["split"][0]["progress"] == pytest.approx(0.5333, abs=1e-3)
        assert served.get("/jobs").json()["jobs"][0]["progress"] == pytest.approx(0.5333, abs=1e-3)
        assert served.get("/jobs/long").json()["split"]["progress"] == pytest.approx(0.5333, abs=1e-3)
    finally:
        served.server.server_close()
        slot.close()


def test_status_watch_never_redraws_a_split_jobs_progress_falling_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    slot, fall_back = chunk_falls_back(tmp_path)

    class TwoFrames:
        """`status --watch`'s stop event: chunk 1 fails back during the first wait, the second ends it."""

        waits = 0

        def wait(self, timeout: float) -> bool:
            self.waits += 1
            if self.waits == 1:
                fall_back()
            return self.waits > 1

    monkeypatch.setattr(commands, "_stop_on_signals", TwoFrames)
    try:
        assert main(["status", "--spool", str(slot.layout.root), "--json", "--watch", "0.1"]) == 0
        out, decoder, frames = capsys.readouterr().out, json.JSONDecoder(), []
        while out.strip():
            frame, end = decoder.raw_decode(out.strip())
            frames.append(frame)
            out = out.strip()[end:]
        assert [f["split"][0]["chunks"]["waiting"] for f in frames] == [1, 2]  # the second frame is after the fall
        assert [f["split"][0]["progress"] for f in frames] == [pytest.approx(0.5333, abs=1e-3)] * 2
    finally:
        slot.close()


def test_serve_publishes_a_split_jobs_new_stay_from_its_own_progress(tmp_path: Path) -> None:
    """A split job's stay in split/ has the entry's name, the same for every stay: a job
    failed and sent back with `spoolrender retry` is split anew under the same name. A
    client of GET /jobs/{id} alone (nobody following the events, nobody asking GET /status,
    whose whole documents make the floor forget) saw the new stay at the old stay's high
    (0.5333 while nothing of it was rendered) until it rendered past it, though it had seen
    the job failed in between."""
    slot = Slot(tmp_path / "spool", fake=FailsChunkOnce(transient=False))
    served = Served(slot)
    try:
        _, running = split_with_one_chunk_running(slot)
        report_progress(running, 0.6)
        assert served.get("/jobs/long").json()["split"]["progress"] == pytest.approx(0.5333, abs=1e-3)
        slot.executor.execute(running)  # chunk 1 fails for good
        while (end := run_next(slot))[0] != "failed":  # chunk 2, then the join, which fails
            assert end[0] in ("finished", "retry"), end
        assert served.get("/jobs/long").json()["state"] == "failed"
        retry(slot.config, "long")
        assert run_next(slot) == ("split", "split")  # split anew: every chunk waits
        page = served.get("/jobs/long").json()
        assert page["state"] == "split" and page["split"]["chunks"]["waiting"] == 3, page
        assert page["split"]["progress"] == 0.0, page
    finally:
        served.server.server_close()
        slot.close()
