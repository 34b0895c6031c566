"""spoolrender.testing: the fake renderer behind a real Runner over a real spool (no
subprocess, no Node), and its module docstring's example, run as written."""

from __future__ import annotations

import json
import os
import textwrap
import threading
from pathlib import Path
from typing import Any

import pytest

import spoolrender.testing
from spoolrender import Spool
from spoolrender.config.spool_config import SpoolConfig
from spoolrender.errors import RenderError, SpoolrenderError
from spoolrender.renderers.base import CancelToken
from spoolrender.runner.loop import Runner
from spoolrender.testing import Fail, FakeRenderer, Hang, ManualClock, Succeed, make_request, make_spool, running_runner

# Quick protocol clocks (the same protocol, only faster), as the other tests' FAST.
QUICK: dict[str, Any] = {
    "slots": 2,
    "settle_seconds": 0.1,
    "heartbeat_seconds": 0.2,
    "lease_seconds": 2.0,
    "poll_seconds": 0.1,
    "rescan_seconds": 0.2,
    "backoff_base_seconds": 0.01,
    "backoff_cap_seconds": 0.05,
}


def job(job_id: str, **extra: Any) -> dict[str, Any]:
    return {"id": job_id, "composition": "Intro", "output": f"{job_id}.mp4", **extra}


def failure_of(config: SpoolConfig, job_id: str) -> dict[str, Any]:
    (entry,) = [n for n in os.listdir(config.spool / "failed") if n.startswith(job_id + ".")]
    record: dict[str, Any] = json.loads((config.spool / "failed" / entry / "failure.json").read_text())
    return record


def drain(config: SpoolConfig, fake: FakeRenderer) -> None:
    Runner(config, drain=True, make_renderer=fake.factory).run()


def test_the_module_docstring_example_runs_as_written(tmp_path: Path) -> None:
    doc = spoolrender.testing.__doc__ or ""
    lines = []
    for line in doc.split("::\n", 1)[1].splitlines():
        if line and not line.startswith("    "):
            break  # the indented block ends at the first line of prose
        lines.append(line)
    block = "\n".join(lines)
    assert "running_runner(config, fake)" in block, block
    exec(compile(textwrap.dedent(block), "spoolrender.testing example", "exec"), {"tmp_path": tmp_path})
    assert (tmp_path / "spool" / "output" / "intro.mp4").stat().st_size == 1024  # and the example's asserts held


def test_a_scripted_job_fails_then_renders_and_an_unscripted_one_gets_the_default(tmp_path: Path) -> None:
    config = make_spool(tmp_path / "spool", QUICK)
    fake = FakeRenderer(default=Succeed(size=4096))
    fake.script("flaky", Fail("worker-crash"), Fail("worker-crash"), Succeed(size=10))
    spool = Spool(config.spool)
    flaky = spool.submit(job("flaky", max_attempts=3), props_check=False)
    plain = spool.submit(job("plain"), props_check=False)
    with running_runner(config, fake):
        flaky.wait(timeout=120)
        plain.wait(timeout=120)
    assert [(r.attempt, r.outcome) for r in fake.runs_of("flaky")] == [(1, "failed"), (2, "failed"), (3, "rendered")]
    assert (config.output_root / "flaky.mp4").stat().st_size == 10
    assert (config.output_root / "plain.mp4").stat().st_size == 4096
    # Two attempts of one job wrote different bytes: the content says which run made it.
    assert (config.output_root / "flaky.mp4").read_bytes() != (config.output_root / "plain.mp4").read_bytes()[:10]
    assert fake.closed >= 1  # every slot's renderer is closed when the runner stops


def test_leaving_the_block_stops_a_hanging_render_and_puts_its_job_back(tmp_path: Path) -> None:
    config = make_spool(tmp_path / "spool", QUICK)
    fake = FakeRenderer(default=Hang())
    Spool(config.spool).submit(job("long"), props_check=False)
    with running_runner(config, fake):
        fake.wait_for_run("long", timeout=60)
    assert [r.outcome for r in fake.runs_of("long")] == ["cancelled"]
    assert os.listdir(config.spool / "failed") == [] and os.listdir(config.spool / "done") == []
    assert len(os.listdir(config.spool / "retry")) == 1  # put back, due now: the next runner takes it


def test_a_permanent_failure_fails_at_once_and_its_partial_output_is_never_published(tmp_path: Path) -> None:
    config = make_spool(tmp_path / "spool", QUICK)
    fake = FakeRenderer()
    fake.script("bad", Fail("invalid-props", transient=False, message="props.title: required", partial=500))
    Spool(config.spool).submit(job("bad", max_attempts=5), props_check=False)
    drain(config, fake)
    assert [r.outcome for r in fake.runs_of("bad")] == ["failed"]  # not retried
    failure = failure_of(config, "bad")
    assert failure["kind"] == "invalid-props" and "props.title: required" in failure["reason"], failure
    assert not (config.output_root / "bad.mp4").exists()
    assert [n for n in os.listdir(config.output_root) if not n.startswith(".")] == []


def test_an_empty_output_is_refused_by_the_runners_verification(tmp_path: Path) -> None:
    config = make_spool(tmp_path / "spool", QUICK)
    fake = FakeRenderer(default=Succeed(size=0))
    Spool(config.spool).submit(job("empty", max_attempts=1), props_check=False)
    drain(config, fake)
    assert failure_of(config, "empty")["kind"] == "no-output"


def test_a_hang_ends_by_the_jobs_timeout_through_the_real_cancel_token(tmp_path: Path) -> None:
    config = make_spool(tmp_path / "spool", QUICK)
    fake = FakeRenderer()
    fake.script("stuck", Hang(partial=100, up_to=120))
    Spool(config.spool).submit(job("stuck", timeout=1, max_attempts=1), props_check=False)
    drain(config, fake)
    assert [r.outcome for r in fake.runs_of("stuck")] == ["cancelled"]
    assert failure_of(config, "stuck")["kind"] == "timeout"
    assert not (config.output_root / "stuck.mp4").exists()


def test_wait_for_run_follows_a_render_in_another_thread(tmp_path: Path) -> None:
    config = make_spool(tmp_path / "spool", QUICK)
    fake = FakeRenderer()
    fake.script("slow", Succeed(seconds=0.5, progress=(0.25, 0.5, 0.75, 1.0)))
    Spool(config.spool).submit(job("slow"), props_check=False)
    thread = threading.Thread(target=drain, args=(config, fake))
    thread.start()
    try:
        assert fake.wait_for_run("slow", outcome="running", timeout=60).attempt == 1
        assert fake.wait_for_run("slow", outcome="rendered", timeout=60).job_id == "slow"
    finally:
        thread.join(timeout=120)
    with pytest.raises(TimeoutError, match="no rendered render of 'other'"):
        fake.wait_for_run("other", outcome="rendered", timeout=0.05)


def test_behaviours_are_checked_when_built(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        Succeed(size=-1)
    with pytest.raises(ValueError):
        Succeed(progress=(1.5,))
    with pytest.raises(ValueError):
        Fail(kind="")
    with pytest.raises(ValueError):
        Hang(up_to=0)
    with pytest.raises(ValueError, match="at least one"):
        FakeRenderer().script("x")


def test_make_request_and_the_manual_clock(tmp_path: Path) -> None:
    config = make_spool(tmp_path / "spool", QUICK)
    request = make_request(config, job("one", props={"title": "Hi"}), tmp_path / "req", attempt=2)
    assert request.props == {"title": "Hi"} and request.attempt == 2 and request.spec.id == "one"
    assert request.output.name == "output.mp4" and request.work_dir.is_dir()
    clock = ManualClock(wall=100.0, monotonic=5.0)
    clock.advance(10)
    clock.jump_wall(-50)
    assert (clock.wall(), clock.monotonic()) == (60.0, 15.0)


def ignore_progress(fraction: float | None, stage: str | None = None) -> None:
    pass


def test_behaviours_scripted_after_the_last_one_repeated_come_next(tmp_path: Path) -> None:
    config = make_spool(tmp_path / "spool")
    fake = FakeRenderer()
    request = make_request(config, job("intro"), tmp_path / "render")
    fake.script("intro", Fail("worker-crash"))
    for _ in range(2):  # used up: the last one repeats
        with pytest.raises(RenderError):
            fake.render(request, ignore_progress, CancelToken())
    fake.script("intro", Succeed())  # "added after any not yet used": the next render's
    fake.render(request, ignore_progress, CancelToken())
    fake.render(request, ignore_progress, CancelToken())
    assert [r.outcome for r in fake.runs_of("intro")] == ["failed", "failed", "rendered", "rendered"]


def test_a_done_job_whose_result_lacks_its_output_is_a_spoolrender_error(tmp_path: Path) -> None:
    config = make_spool(tmp_path / "spool", QUICK)
    job_handle = Spool(config.spool).submit(job("intro"), props_check=False)
    with running_runner(config, FakeRenderer()):
        job_handle.wait(timeout=60)
    (entry,) = (config.spool / "done").iterdir()
    (entry / "result.json").write_text('{"id": "intro"}')  # edited by hand: an object, not a result
    with pytest.raises(SpoolrenderError, match="has no output and bytes"):
        job_handle.result()
