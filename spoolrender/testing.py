"""Test doubles for spoolrender's own tests and for integrators': a scriptable renderer, a
clock that moves only when told to, and a spool in a temporary directory.

The model is procrastinate's ``testing.InMemoryConnector``: the real runner, the real spool
protocol (renames, records, fencing, retries, hooks), with only the render replaced, so
that a test of "what happens when a render fails twice, then succeeds" takes milliseconds
and no Node, Chromium or subprocess::

    from spoolrender import Spool
    from spoolrender.testing import Fail, FakeRenderer, Succeed, make_spool, running_runner

    config = make_spool(tmp_path / "spool", {"slots": 1, "backoff_base_seconds": 0.01})
    fake = FakeRenderer(default=Succeed(size=2048))
    fake.script("intro", Fail("worker-crash"), Succeed())  # the first try fails, then it renders
    job = Spool(config.spool).submit({"id": "intro", "composition": "Intro", "output": "intro.mp4"})
    with running_runner(config, fake):
        result = job.wait(timeout=60)
    assert [r.outcome for r in fake.runs_of("intro")] == ["failed", "rendered"]
    assert result.output.stat().st_size == 1024  # the scripted Succeed() writes its default size

What is faked: only the renderer (no project is rendered, nothing is checked against a
Remotion project). Everything around it is the real code: a job's timeout and cancel reach
a :class:`Hang` through the same cancel token as a real render's, a :class:`Succeed` output
is verified and published like a real one, and a :class:`Fail` is classified by its
``kind`` and ``transient`` flag exactly as a real renderer's error.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from spoolrender import defaults
from spoolrender.config.spool_config import SpoolConfig, load_config
from spoolrender.core.vocabulary import FailureKind
from spoolrender.errors import RenderCancelled, RenderError, SpoolrenderError
from spoolrender.jobfile import parse_job
from spoolrender.renderers.base import (
    CancelToken,
    ProgressFn,
    Renderer,
    RenderRequest,
    RenderResult,
    WholeRendersOnly,
)
from spoolrender.renderers.command import verify_nonempty
from spoolrender.spool.clock import ManualClock
from spoolrender.spool.layout import init_spool

if TYPE_CHECKING:
    from spoolrender.runner.loop import Runner

__all__ = [
    "Fail",
    "FakeRenderer",
    "FakeRun",
    "Hang",
    "ManualClock",
    "Succeed",
    "make_request",
    "make_spool",
    "running_runner",
]


@dataclass(frozen=True)
class Succeed:
    """Render: report each ``progress`` fraction, then write ``size`` bytes to the output.

    ``size=0`` writes an empty file, which the runner's verification refuses (kind
    ``no-output``), as it would a real renderer's. ``seconds`` spreads the progress steps
    over that long (cancellable: a cancel during them ends the render cancelled)."""

    size: int = 1024
    progress: tuple[float, ...] = (0.5, 1.0)
    seconds: float = 0.0

    def __post_init__(self) -> None:
        if self.size < 0 or self.seconds < 0 or any(not 0 <= p <= 1 for p in self.progress):
            raise ValueError(f"not a render to succeed: {self}")


@dataclass(frozen=True)
class Fail:
    """Render: write ``partial`` bytes of output (a half-written file, which the runner must
    never publish), then raise RenderError ``kind`` (retried when ``transient``)."""

    kind: str = "error"
    transient: bool = True
    message: str = "the fake renderer was told to fail"
    partial: int = 0

    def __post_init__(self) -> None:
        if not self.kind or self.partial < 0:
            raise ValueError(f"not a render to fail: {self}")


@dataclass(frozen=True)
class Hang:
    """Render: write ``partial`` bytes, report progress 0, then wait until the run is cancelled (the job's
    timeout, a `cancel`, the runner's shutdown, a lost claim), and end cancelled. As a guard
    for a test that forgot to cancel, it fails (transient, kind ``fake-hang``) after
    ``up_to`` seconds."""

    partial: int = 0
    up_to: float = 600.0

    def __post_init__(self) -> None:
        if self.partial < 0 or not self.up_to > 0:
            raise ValueError(f"not a render to hang: {self}")


Behaviour = Succeed | Fail | Hang


@dataclass(frozen=True)
class FakeRun:
    """One render the fake renderer did: which job, which attempt, and how it ended
    (``rendered``, ``failed`` or ``cancelled``; ``running`` until it ends)."""

    job_id: str
    attempt: int
    behaviour: Behaviour
    outcome: str
    request: RenderRequest = field(repr=False)


class FakeRenderer(WholeRendersOnly):
    """A renderer that does what it is told, per job id, and remembers what it did.

    Each render of job ``id`` takes the next behaviour given to :meth:`script` for that id;
    when those are used up the last one repeats, and a job never scripted gets ``default``.
    One instance serves every slot of a runner (it is thread-safe): pass :attr:`factory` as
    the runner's ``make_renderer``. Jobs render whole and are not cached (the runner's
    chunked rendering and render cache need a renderer that supports them).
    """

    name = "fake"

    def __init__(self, default: Behaviour | None = None) -> None:
        self.default: Behaviour = default or Succeed()
        self._scripts: dict[str, list[Behaviour]] = {}
        # The last behaviour a job's script gave: what its renders do once the script is
        # used up. Apart from the script, so that script() adds behaviours after it.
        self._repeating: dict[str, Behaviour] = {}
        self._runs: list[FakeRun] = []
        self._changed = threading.Condition()
        self.closed = 0

    def script(self, job_id: str, *behaviours: Behaviour) -> None:
        """What the next renders of ``job_id`` do, in order (added after any not yet used)."""
        if not behaviours:
            raise ValueError("script() needs at least one behaviour")
        with self._changed:
            self._scripts.setdefault(job_id, []).extend(behaviours)

    def factory(self, name: str) -> Renderer:
        """The runner's ``make_renderer``: this renderer, whatever a job's ``renderer:`` is."""
        return self

    @property
    def runs(self) -> list[FakeRun]:
        """Every render so far, in the order they started."""
        with self._changed:
            return list(self._runs)

    def runs_of(self, job_id: str) -> list[FakeRun]:
        return [r for r in self.runs if r.job_id == job_id]

    def wait_for_run(self, job_id: str, *, outcome: str = "running", timeout: float = 60.0) -> FakeRun:
        """The first render of ``job_id`` that is (or was) ``outcome``; waits for it."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                found = [r for r in self._runs if r.job_id == job_id and r.outcome == outcome]
                if found:
                    return found[0]
                left = deadline - time.monotonic()
                if left <= 0:
                    seen = [(r.attempt, r.outcome) for r in self._runs if r.job_id == job_id]
                    raise TimeoutError(f"no {outcome} render of {job_id!r} after {timeout} s (seen: {seen})")
                self._changed.wait(left)

    # --- the Renderer protocol ------------------------------------------------------------

    def render(self, request: RenderRequest, progress: ProgressFn, cancel: CancelToken) -> RenderResult:
        behaviour, index = self._start(request)
        try:
            if isinstance(behaviour, Succeed):
                self._succeed(behaviour, request, progress, cancel)
            elif isinstance(behaviour, Fail):
                _write(request.output, behaviour.partial)
                raise RenderError(behaviour.message, transient=behaviour.transient, kind=behaviour.kind)
            else:
                _write(request.output, behaviour.partial)
                progress(0.0, "rendering")  # under way, as a real render says before its first frame
                if not cancel.wait(behaviour.up_to):
                    raise RenderError(
                        f"hung for {behaviour.up_to:g} s, never cancelled", transient=True, kind=FailureKind.FAKE_HANG
                    )
                raise RenderCancelled(cancel.reason or "cancelled")
        except RenderCancelled:
            self._end(index, "cancelled")
            raise
        except RenderError:
            self._end(index, "failed")
            raise
        self._end(index, "rendered")
        return RenderResult(details={"fake": True})

    def verify(self, request: RenderRequest, result: RenderResult) -> None:
        verify_nonempty(request.output)

    def close(self) -> None:
        with self._changed:
            self.closed += 1

    # --- bookkeeping ----------------------------------------------------------------------

    def _start(self, request: RenderRequest) -> tuple[Behaviour, int]:
        job_id = request.spec.id
        with self._changed:
            queued = self._scripts.get(job_id)
            if queued:
                behaviour = self._repeating[job_id] = queued.pop(0)
            else:  # used up (the last one repeats), or never scripted
                behaviour = self._repeating.get(job_id, self.default)
            self._runs.append(FakeRun(job_id, request.attempt, behaviour, "running", request))
            self._changed.notify_all()
            return behaviour, len(self._runs) - 1

    def _end(self, index: int, outcome: str) -> None:
        with self._changed:
            run = self._runs[index]
            self._runs[index] = FakeRun(run.job_id, run.attempt, run.behaviour, outcome, run.request)
            self._changed.notify_all()

    @staticmethod
    def _succeed(behaviour: Succeed, request: RenderRequest, progress: ProgressFn, cancel: CancelToken) -> None:
        step = behaviour.seconds / len(behaviour.progress) if behaviour.progress else 0.0
        for fraction in behaviour.progress:
            if cancel.wait(step) if step else cancel.is_set():
                raise RenderCancelled(cancel.reason or "cancelled")
            progress(fraction, "rendering")
        # Content that differs per job and attempt: a consumer can tell two outputs apart.
        seed = f"{request.spec.id}:{request.attempt}".encode()
        block = hashlib.sha256(seed).digest()
        request.output.parent.mkdir(parents=True, exist_ok=True)
        with open(request.output, "wb") as out:
            left = behaviour.size
            while left > 0:
                out.write(block[: min(left, len(block))])
                left -= len(block)


def _write(path: Path, size: int) -> None:
    if size:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"\0" * size)


def make_spool(root: Path, settings: Mapping[str, Any] | None = None) -> SpoolConfig:
    """A new spool at ``root`` (``spoolrender init``'s directories) whose spoolrender.yaml
    holds ``settings``; its config, read as a runner would, without the process's
    ``SPOOLRENDER_*`` environment. Raises SpoolrenderError for a setting that is wrong."""
    layout = init_spool(root)
    text = yaml.safe_dump(dict(settings or {}), sort_keys=True)
    (layout.root / defaults.CONFIG_FILENAME).write_text(text, encoding="utf-8")
    return load_config(layout.root, environ={})


def make_request(
    config: SpoolConfig,
    job: Mapping[str, Any],
    directory: Path,
    *,
    attempt: int = 1,
    threads: int = 1,
) -> RenderRequest:
    """A render request for ``job`` (a job file's mapping, validated as the runner does), its
    output, work directory and log in ``directory``: for testing a renderer on its own (the
    renderer contract suite in tests/ does). Raises JobInvalid for a job that is wrong."""
    spec = parse_job(json.dumps(dict(job)).encode(), "job.yaml", config)
    directory.mkdir(parents=True, exist_ok=True)
    job_file = directory / defaults.JOB_FILENAME
    job_file.write_text(yaml.safe_dump(dict(job)), encoding="utf-8")
    work_dir = directory / "work"
    work_dir.mkdir(exist_ok=True)
    props, settings, _ = spec.settings_for_attempt(attempt)
    return RenderRequest(
        spec=spec,
        job_file=job_file,
        output=directory / ("output" + (spec.output.suffix or defaults.DEFAULT_OUTPUT_SUFFIX)),
        work_dir=work_dir,
        log=directory / "render.log",
        threads=threads,
        attempt=attempt,
        props=props,
        settings=settings,
    )


@contextmanager
def running_runner(config: SpoolConfig, fake: FakeRenderer, **runner_options: Any) -> Iterator[Runner]:
    """A long-running :class:`~spoolrender.runner.loop.Runner` that renders with ``fake``, in a
    thread of this process, for the ``with`` block; then stopped as by a second SIGTERM
    (a running render is cancelled at once and its job put back) and joined. ``runner_options`` go to Runner
    (``clock``, ``capacity``, ``max_jobs``...). Wait for jobs with the API's ``Job.wait``;
    unlike a drain, the runner stays for retries that are not due yet."""
    from spoolrender.runner.loop import Runner  # the whole runner: only for this helper

    runner = Runner(config, make_renderer=fake.factory, **runner_options)
    failed: list[BaseException] = []

    def run() -> None:
        try:
            runner.run()
        except BaseException as exc:  # handed to the test's thread below
            failed.append(exc)

    thread = threading.Thread(target=run, name="spoolrender-testing-runner", daemon=True)
    thread.start()
    try:
        yield runner
    finally:
        runner.request_stop(force=True)
        thread.join(timeout=120)
    if thread.is_alive():
        raise SpoolrenderError("the runner did not stop within 120 s of its stop request")
    if failed:
        raise failed[0]
