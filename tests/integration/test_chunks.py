"""Chunked rendering, the spool side: planning, and split jobs end to end with real
runner subprocesses and the command renderer (tests/programs/frames.py)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from support.browser.server import running_server
from support.chunk_jobs import FRAMES_CONFIG, chunk_leftovers, frames_job, markers, video
from support.processes import spoolrender_cmd, stopped
from support.spool_jobs import FAST, drop, write_spool_config
from support.waiting import wait_for

import spoolrender
from spoolrender.chunks.plan import ChunkPlan, plan_parts
from spoolrender.config.spool_config import SpoolConfig, load_config
from spoolrender.errors import ConfigError, JobInvalid
from spoolrender.jobfile import parse_job
from spoolrender.renderers.base import ChunkPart, FrameSpan
from spoolrender.renderers.remotion.splitting import frames_per_chunk
from spoolrender.spool.layout import SpoolLayout

SCHEMA = json.loads((Path(spoolrender.__file__).parent / "status.schema.json").read_text())

# --- planning ---------------------------------------------------------------------------


def test_plan_parts_covers_the_span_in_equal_ranges_but_a_shorter_last() -> None:
    parts = plan_parts(FrameSpan(10, 109, 30), chunks=3)
    assert [(p.first, p.last) for p in parts] == [(10, 43), (44, 77), (78, 109)]
    assert [p.index for p in parts] == [0, 1, 2] and {p.count for p in parts} == {3}
    # 45 frames in 4: 12, 12, 12, 9 (never 12, 11, 11, 11: see the next test).
    assert [p.frames for p in plan_parts(FrameSpan(0, 44, 30), chunks=4)] == [12, 12, 12, 9]
    # 41 frames in 8: chunks of 6 frames make only 7 (the last of 5 frames).
    assert [p.frames for p in plan_parts(FrameSpan(0, 40, 30), chunks=8)] == [6, 6, 6, 6, 6, 6, 5]


@pytest.mark.parametrize("first", [0, 7])
def test_every_plan_is_one_remotion_can_join(first: int) -> None:
    """Remotion's combineChunks cuts chunk i's audio at i * F / fps: every chunk but the
    last must be F frames long (a 12/11/11/11 plan joined with shifted audio)."""
    for frames in range(5, 400, 7):
        for chunks in range(2, 12):
            parts = plan_parts(FrameSpan(first, first + frames - 1, 30), chunks=chunks)
            for part in parts:
                frames_per_chunk(part, first)  # raises for a plan Remotion cannot join
            if parts:
                ChunkPlan(FrameSpan(first, first + frames - 1, 30), parts, 0)


def test_plan_parts_never_makes_chunks_of_fewer_than_five_frames() -> None:
    parts = plan_parts(FrameSpan(0, 11, 30), chunks=4)  # 12 frames: only 2 chunks of >= 5
    assert [(p.first, p.last) for p in parts] == [(0, 5), (6, 11)]
    assert plan_parts(FrameSpan(0, 8, 30), chunks=4) == ()  # 9 frames: whole
    assert plan_parts(FrameSpan(0, 9999, 30), chunks=1000)[-1].count == 64  # MAX_CHUNKS


def test_plan_parts_with_chunk_frames_keeps_every_chunk_at_most_that_long() -> None:
    parts = plan_parts(FrameSpan(0, 599, 30), chunk_frames=150)
    assert [p.frames for p in parts] == [150, 150, 150, 150]
    parts = plan_parts(FrameSpan(0, 100, 30), chunk_frames=50)  # 101 frames: 3 chunks
    assert [p.frames for p in parts] == [34, 34, 33]


def test_chunk_plan_round_trips_and_refuses_ranges_that_do_not_follow_on() -> None:
    span = FrameSpan(0, 19, 10)
    plan = ChunkPlan(span, plan_parts(span, chunks=2), 1.5)
    assert ChunkPlan.from_json(plan.to_json()) == plan
    with pytest.raises(ValueError, match="does not follow on"):
        ChunkPlan(span, (ChunkPart(0, 2, 0, 9), ChunkPart(1, 2, 11, 19)), 0)
    with pytest.raises(ValueError, match="do not cover"):
        ChunkPlan(span, (ChunkPart(0, 2, 0, 9), ChunkPart(1, 2, 10, 18)), 0)


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        ({"chunks": 0}, "field 'chunks': expected a whole number 1-64"),
        ({"chunks": "4"}, "field 'chunks': expected a whole number 1-64"),
        ({"chunk_frames": 4}, "field 'chunk_frames': expected a whole number of frames >= 5"),
        ({"chunks": 2, "chunk_frames": 50}, "field 'chunk_frames': set chunks or chunk_frames, not both"),
    ],
)
def test_job_chunk_fields_are_validated(config: SpoolConfig, fields: dict[str, Any], problem: str) -> None:
    data = yaml.safe_dump({"renderer": "command", "command": "props", **fields}).encode()
    with pytest.raises(JobInvalid) as exc:
        parse_job(data, "job.yaml", config)
    assert any(p.startswith(problem) for p in exc.value.problems), exc.value.problems


def test_command_chunks_config_names_a_command_and_known_placeholders(spool: SpoolLayout) -> None:
    write_spool_config(spool, FRAMES_CONFIG)
    assert set(load_config(spool.root, environ={}).command_chunks) == {"frames"}
    bad_name = {**FRAMES_CONFIG, "command_chunks": {"nope": FRAMES_CONFIG["command_chunks"]["frames"]}}
    write_spool_config(spool, bad_name)
    with pytest.raises(ConfigError, match=r"command_chunks\.nope: no such command"):
        load_config(spool.root, environ={})
    entry = {**FRAMES_CONFIG["command_chunks"]["frames"], "span": ["x", "{first}"]}
    write_spool_config(spool, {**FRAMES_CONFIG, "command_chunks": {"frames": entry}})
    with pytest.raises(ConfigError, match=r"command_chunks.frames.span: unknown placeholder \{first\}"):
        load_config(spool.root, environ={})


# --- end to end ---------------------------------------------------------------------------


def drain_until(spool: SpoolLayout, state: str, timeout: float = 90, count: int = 1) -> str:
    """Run `spoolrender run --drain` (as cron would) until ``count`` jobs reach ``state``; the
    first entry there."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        subprocess.run(spoolrender_cmd("run", "--drain", "--spool", str(spool.root)), capture_output=True, timeout=120)
        found = sorted(os.listdir(spool.root / state))
        if len(found) >= count:
            return found[0]
        time.sleep(0.1)
    raise AssertionError(f"no job reached {state}/ within {timeout} s")


def runs_of(job_dir: Path) -> list[str]:
    return [r["outcome"] for r in json.loads((job_dir / "result.json").read_text())["runs"]]


def status_json(spool: SpoolLayout) -> dict[str, Any]:
    out = subprocess.run(
        spoolrender_cmd("status", "--json", "--spool", str(spool.root)), capture_output=True, check=True
    )
    doc: dict[str, Any] = json.loads(out.stdout)
    return doc


def test_split_job_is_rendered_by_several_runners_and_published_once(
    spool: SpoolLayout, start_runner: Any, tmp_path: Path
) -> None:
    write_spool_config(spool, {**FRAMES_CONFIG, "slots": 1})
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    # Each chunk waits until two have started: with one slot per runner, only several
    # runners rendering at once get every chunk through on its first attempt.
    drop(spool, "long.yaml", frames_job(4, barrier_dir=str(barrier), barrier=2, marker=str(tmp_path / "marker")))
    for _ in range(3):
        start_runner()
    wait_for(lambda: bool(os.listdir(spool.done)), timeout=90)
    (entry,) = os.listdir(spool.done)
    assert (spool.root / "output" / "long.mp4").read_text() == video(40)
    assert runs_of(spool.done / entry) == ["split", "publishing"]
    rendered = markers(tmp_path / "marker")
    assert sorted(i for i, _, _ in rendered) == [0, 1, 2, 3] and {a for _, a, _ in rendered} == {1}

    # Chunk files are never outputs: once the runner that published has removed its
    # scratch (after the move to done/, so waited for), the only file is the video.
    def output_files() -> list[str]:
        return [p.name for p in (spool.root / "output").rglob("*") if p.is_file()]

    wait_for(lambda: chunk_leftovers(spool, spool.root / "output") == [] and output_files() == ["long.mp4"], timeout=30)
    assert chunk_leftovers(spool, spool.root / "output") == [] and output_files() == ["long.mp4"], output_files()
    status = status_json(spool)
    assert status["counts"]["done"] == 1 and status["counts"]["split"] == 0 and status["split"] == []


def test_a_failed_chunk_is_retried_alone(spool: SpoolLayout, tmp_path: Path) -> None:
    write_spool_config(spool, FRAMES_CONFIG)
    drop(spool, "long.yaml", frames_job(4, fail_index=2, fail_until_attempt=2, marker=str(tmp_path / "marker")))
    entry = drain_until(spool, "done")
    assert (spool.root / "output" / "long.mp4").read_text() == video(40)
    # The job itself never failed; chunk 3 (index 2) took two attempts, the others one.
    assert runs_of(spool.done / entry) == ["split", "publishing"]
    assert sorted((i, a) for i, a, _ in markers(tmp_path / "marker")) == [(0, 1), (1, 1), (2, 2), (3, 1)]
    assert chunk_leftovers(spool, spool.root / "output") == []


def _gone(pid_file: Path) -> bool:
    try:
        with open(f"/proc/{pid_file.read_text()}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[1].split()[0] in (b"Z", b"X")
    except FileNotFoundError:
        return True


def test_a_chunk_failed_for_good_fails_the_job_stops_the_others_and_removes_chunk_files(
    spool: SpoolLayout, start_runner: Any, tmp_path: Path
) -> None:
    write_spool_config(spool, FRAMES_CONFIG)
    pids, barrier = tmp_path / "pids", tmp_path / "barrier"
    pids.mkdir()
    barrier.mkdir()
    # Chunk 1 fails for good once chunk 2 has started (and hangs): chunk 2 must be stopped.
    job = frames_job(4, fail_index=0, fail_for_good=True, hang_index=1, barrier_dir=str(barrier), barrier=2,
                     pid_dir=str(pids))  # fmt: skip
    drop(spool, "long.yaml", job)
    start_runner()
    wait_for(lambda: bool(os.listdir(spool.failed)), timeout=90)
    (entry,) = os.listdir(spool.failed)
    failure = json.loads((spool.failed / entry / "failure.json").read_text())
    assert failure["kind"] == "command-exit"
    assert failure["reason"].startswith("chunk 1 of 4 (frames 0-9) failed: command 'frames' exited with status 65")
    assert "this frame range cannot be rendered" in failure["reason"]
    wait_for(lambda: _gone(pids / "1"), timeout=30)
    wait_for(lambda: chunk_leftovers(spool, spool.root / "output") == [], timeout=30)
    assert not (spool.root / "output" / "long.mp4").exists()


def test_status_show_and_cancel_treat_a_split_job_as_one_job(
    spool: SpoolLayout, start_runner: Any, tmp_path: Path
) -> None:
    write_spool_config(spool, FRAMES_CONFIG)
    pids = tmp_path / "pids"
    pids.mkdir()
    drop(spool, "long.yaml", frames_job(4, hang_index=3, pid_dir=str(pids)))
    start_runner()

    def three_done() -> bool:
        split = status_json(spool)["split"]
        return bool(split) and split[0]["chunks"]["done"] == 3 and split[0]["chunks"]["running"] == 1

    wait_for(three_done, timeout=60)
    status = status_json(spool)
    (job,) = status["split"]
    assert job["id"] == "long" and job["chunks"]["count"] == 4 and 0.75 <= job["progress"] < 1
    assert status["running"] == [] and status["retry"] == []  # chunks are never listed as jobs
    assert status["counts"]["running"] == 0 and status["counts"]["split"] == 1
    human = subprocess.run(spoolrender_cmd("status", "--spool", str(spool.root)), capture_output=True, text=True)
    assert "SPLIT" in human.stdout and "3/4 done, 1 running, 0 waiting" in human.stdout
    shown = subprocess.run(spoolrender_cmd("show", "long", "--spool", str(spool.root)), capture_output=True, text=True)
    assert "rendered in 4 chunks: 3/4 done, 1 running" in shown.stdout, shown.stdout
    wait_for(lambda: (pids / "3").exists())
    cancel = subprocess.run(spoolrender_cmd("cancel", "long", "--spool", str(spool.root)), capture_output=True)
    assert cancel.returncode == 0, cancel.stderr
    wait_for(lambda: bool(os.listdir(spool.failed)), timeout=60)
    (entry,) = os.listdir(spool.failed)
    assert json.loads((spool.failed / entry / "failure.json").read_text())["kind"] == "cancelled"
    wait_for(lambda: _gone(pids / "3"), timeout=30)
    wait_for(lambda: chunk_leftovers(spool, spool.root / "output") == [], timeout=30)


def test_a_job_that_asks_for_chunks_its_renderer_cannot_join_fails_with_the_reason(spool: SpoolLayout) -> None:
    write_spool_config(spool, {**FRAMES_CONFIG, "commands": {**FAST["commands"], **FRAMES_CONFIG["commands"]}})
    drop(spool, "whole.yaml", {"renderer": "command", "command": "props", "chunks": 3})
    entry = drain_until(spool, "failed")
    failure = json.loads((spool.failed / entry / "failure.json").read_text())
    assert failure["kind"] == "invalid-job"
    assert failure["reason"] == (
        "this job cannot be rendered in chunks: command 'props' has no command_chunks entry (span, chunk, join) "
        "in the spool config"
    )


def test_split_seconds_splits_long_jobs_over_idle_slots_and_renders_short_ones_whole(spool: SpoolLayout) -> None:
    write_spool_config(spool, {**FRAMES_CONFIG, "split_seconds": 2})
    drop(spool, "long.yaml", frames_job(None, frames=40, fps=10))  # 4 s: split
    drop(spool, "short.yaml", frames_job(None, frames=15, fps=10))  # 1.5 s: whole
    deadline = time.monotonic() + 90
    while len(os.listdir(spool.done)) < 2 and time.monotonic() < deadline:
        drain_until(spool, "done")
    by_id = {name.split(".")[0]: runs_of(spool.done / name) for name in os.listdir(spool.done)}
    assert by_id == {"long": ["split", "publishing"], "short": ["publishing"]}
    assert (spool.root / "output" / "long.mp4").read_text() == video(40)
    assert (spool.root / "output" / "short.mp4").read_text() == video(15)


def test_no_job_id_can_name_a_chunk_entry(config: SpoolConfig) -> None:
    # Chunk entries are told apart from jobs by the `@` in their id, which no job id has.
    with pytest.raises(JobInvalid, match="field 'id'"):
        parse_job(yaml.safe_dump({"id": "long@chunk-0001"}).encode(), "x.yaml", config)


def test_a_chunk_whose_files_are_gone_at_the_join_is_rendered_again(spool: SpoolLayout, tmp_path: Path) -> None:
    write_spool_config(spool, FRAMES_CONFIG)
    drop(spool, "long.yaml", frames_job(3, frames=30, marker=str(tmp_path / "marker")))
    # Killed just after its last chunk woke the job: every chunk rendered, nothing joined.
    env = {**os.environ, "SPOOLRENDER_CRASH_AT": "after-wake"}
    killed = subprocess.run(spoolrender_cmd("run", "--drain", "--spool", str(spool.root)), env=env, timeout=120)
    assert killed.returncode == -9
    store = spool.root / "output" / ".spoolrender-chunks"
    (key,) = os.listdir(store)
    second = sorted(os.listdir(store / key))[1]
    shutil.rmtree(store / key / second)  # chunk 2's files lost (a disk fault, an operator)
    entry = drain_until(spool, "done")
    assert (spool.root / "output" / "long.mp4").read_text() == video(30)
    assert sorted(i for i, _, _ in markers(tmp_path / "marker")) == [0, 1, 1, 2]  # only chunk 2 again
    # split, (a "retry" if the killed drain had claimed the woken job), split again, publishing
    outcomes = runs_of(spool.done / entry)
    assert outcomes.count("split") == 2 and outcomes.count("publishing") == 1 and outcomes[-1] == "publishing"
    assert chunk_leftovers(spool, spool.root / "output") == []


def test_serve_and_events_show_a_split_job_as_one_job_with_its_chunks_progress(
    spool: SpoolLayout, start_runner: Any, tmp_path: Path
) -> None:
    write_spool_config(spool, FRAMES_CONFIG)
    drop(spool, "long.yaml", frames_job(4, sleep=0.05, hang_index=3))
    with running_server(spool.root, tmp_path / "serve.log", "--poll", "0.1") as server:
        stream = server.events("/events?job=long")
        try:
            start_runner()
            events = stream.until(
                lambda e: e.kind == "progress" and e.data["state"] == "split" and e.data["chunks"]["done"] == 3,
                timeout=60,
            )
        finally:
            stream.close()
        progress = [e.data["progress"] for e in events if e.kind == "progress" and e.data["state"] == "split"]
        assert progress == sorted(progress) and progress[-1] >= 0.75  # the chunks' frames, as they render
        # A follower that comes after those chunks finished (a job page opened late, or one that
        # reconnected) is told where the chunks are now: nothing else would tell it, the job
        # stays in split/ and its last chunk hangs.
        late = server.events("/events?job=long")
        try:
            initial = [late.next(), late.next()]
        finally:
            late.close()
        assert [e.kind for e in initial] == ["state", "progress"], initial
        assert initial[1].data["state"] == "split" and initial[1].data["chunks"]["done"] == 3
        assert all(e.data["id"] == "long" for e in events)
        status = server.get_json("/status")
        jsonschema.validate(status, SCHEMA)
        assert [s["id"] for s in status["split"]] == ["long"] and status["counts"]["split"] == 1
        page = server.get_json("/jobs")
        assert [(j["id"], j["state"]) for j in page["jobs"]] == [("long", "split")]  # no chunk entry listed
        assert page["jobs"][0]["chunks"]["count"] == 4
        detail = server.get_json("/jobs/long")
        assert detail["state"] == "split" and detail["split"]["chunks"]["done"] == 3


def _idle_since(spool: SpoolLayout, pid: int, since: float) -> bool:
    """The runner ``pid`` says (in a beacon written after ``since``) that it runs nothing."""
    for name in os.listdir(spool.runners):
        try:
            beacon = json.loads((spool.runners / name).read_text())
        except (OSError, ValueError):
            continue
        if beacon.get("pid") == pid and beacon.get("updated", 0) > since and beacon.get("busy") == 0:
            return True
    return False


@pytest.mark.parametrize("point", ["after-split-move", "chunk-after-store"])
def test_a_runner_frozen_past_the_lease_mid_split_loses_nothing_and_publishes_once(
    spool: SpoolLayout, start_runner: Any, tmp_path: Path, point: str
) -> None:
    """A VM pause at a step of a split job (its planner before queueing the chunks, or a
    chunk's runner between moving its files and finishing it): another runner carries the
    job through; the frozen one, thawed, adds nothing and publishes nothing."""
    write_spool_config(spool, FRAMES_CONFIG)
    drop(spool, "long.yaml", frames_job(3, frames=30, marker=str(tmp_path / "marker")))
    frozen = start_runner(env={"SPOOLRENDER_PAUSE_AT": point}, log=tmp_path / "frozen.log")
    wait_for(lambda: stopped(frozen), timeout=60)
    start_runner(log=tmp_path / "other.log")
    wait_for(lambda: bool(os.listdir(spool.done)), timeout=90)
    thawed = time.time()
    frozen.send_signal(signal.SIGCONT)
    wait_for(lambda: _idle_since(spool, frozen.pid, thawed), timeout=30)  # it let its runs go
    wait_for(lambda: chunk_leftovers(spool, spool.root / "output") == [], timeout=30)
    (entry,) = os.listdir(spool.done)
    assert (spool.root / "output" / "long.mp4").read_text() == video(30)
    outcomes = runs_of(spool.done / entry)
    assert outcomes.count("publishing") == 1 and outcomes[-1] == "publishing", outcomes
    assert os.listdir(spool.failed) == [] and chunk_leftovers(spool, spool.root / "output") == []
    assert "ERROR" not in (tmp_path / "frozen.log").read_text() + (tmp_path / "other.log").read_text()


def test_the_render_cache_stores_a_joined_job_and_publishes_a_repeat_without_splitting(
    spool: SpoolLayout, tmp_path: Path
) -> None:
    write_spool_config(spool, {**FRAMES_CONFIG, "render_cache": True})
    marker = str(tmp_path / "marker")
    drop(spool, "first.yaml", frames_job(4, marker=marker))
    first = drain_until(spool, "done")
    result = json.loads((spool.done / first / "result.json").read_text())
    assert runs_of(spool.done / first) == ["split", "publishing"] and result["cache"] == "stored"
    assert len(markers(tmp_path / "marker")) == 4  # four chunks rendered
    drop(spool, "again.yaml", {**frames_job(4, marker=marker), "output": "again.mp4"})
    drain_until(spool, "done", count=2)
    (again,) = set(os.listdir(spool.done)) - {first}
    result = json.loads((spool.done / again / "result.json").read_text())
    # Published from the cache: one run, never split, no chunk rendered again.
    assert runs_of(spool.done / again) == ["publishing"] and result["cache"] == "hit"
    assert result["cache_source"]["id"] == "first"
    assert len(markers(tmp_path / "marker")) == 4
    assert (spool.root / "output" / "again.mp4").read_text() == video(40)
    assert chunk_leftovers(spool, spool.root / "output") == []
