"""The renderer interface: render one job with a thread budget, progress and a cancel token.

A renderer writes exactly one file, ``request.output`` (a scratch path on the output
root's filesystem; the runner verifies and publishes it), keeps its temporary files in
``request.work_dir``, appends its log to ``request.log``, and either returns a
:class:`RenderResult` or raises :class:`~spoolrender.errors.RenderError` (classified
transient or permanent) or :class:`~spoolrender.errors.RenderCancelled`.

One renderer instance serves one job slot, one job at a time, so long-lived workers
(the Remotion renderer's Node process) stay warm between jobs.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from spoolrender.core.vocabulary import FailureKind
from spoolrender.errors import RenderError
from spoolrender.jobfile import JobSpec

# The error kind of a render that a signal from outside spoolrender ended (an operator's
# kill, the OOM killer): not evidence against the host (spoolrender.hosts.health). Signals a
# process sends itself when it crashes (SIGSEGV, SIGABRT, SIGBUS) are not kills.
KILLED = FailureKind.KILLED
KILL_SIGNALS = frozenset({signal.SIGKILL, signal.SIGTERM, signal.SIGINT, signal.SIGHUP})


def killing_signal(returncode: int) -> int | None:
    """The kill signal (KILL_SIGNALS) that ended a process with ``returncode``: a negative
    code (it died of it), or 128 + the signal (a shell reporting its child's death)."""
    number = -returncode if returncode < 0 else returncode - 128 if returncode > 128 else None
    return number if number in KILL_SIGNALS else None


def _ignore_spawn(pgid: int | None) -> None:
    pass


class ProgressFn(Protocol):
    def __call__(self, fraction: float | None, stage: str | None = None) -> None: ...


class CancelToken:
    """A one-shot cancel request with a reason (``timeout``, ``shutdown``, ``lost``, ``user``).

    The first reason wins: a job that timed out and is then shut down stays a timeout.
    """

    def __init__(self) -> None:
        self._event = threading.Event()
        self._reason: str | None = None
        self._lock = threading.Lock()

    def cancel(self, reason: str) -> None:
        with self._lock:
            if self._reason is None:
                self._reason = reason
        self._event.set()

    @property
    def reason(self) -> str | None:
        return self._reason

    def is_set(self) -> bool:
        return self._event.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        return self._event.wait(timeout)


@dataclass(frozen=True)
class ChunkPart:
    """One chunk of a split job: composition frames ``first``..``last`` (inclusive)."""

    index: int  # 0-based
    count: int
    first: int
    last: int

    def __post_init__(self) -> None:
        if not 0 <= self.index < self.count or not 0 <= self.first <= self.last:
            raise ValueError(f"not a chunk: {self}")

    @property
    def frames(self) -> int:
        return self.last - self.first + 1


@dataclass(frozen=True)
class FrameSpan:
    """The frames a whole job renders (``first``..``last``, inclusive) and their rate."""

    first: int
    last: int
    fps: float

    def __post_init__(self) -> None:
        if not 0 <= self.first <= self.last or not self.fps > 0:
            raise ValueError(f"not a frame span: {self}")

    @property
    def frames(self) -> int:
        return self.last - self.first + 1

    @property
    def seconds(self) -> float:
        return self.frames / self.fps


@dataclass(frozen=True)
class RenderRequest:
    spec: JobSpec
    job_file: Path
    output: Path
    work_dir: Path
    log: Path
    threads: int
    attempt: int
    props: dict[str, Any]
    settings: dict[str, Any]
    # Called with the process group id of any process the renderer starts for this job
    # (None when it is gone), so that a runner recovering the job after our death can
    # stop the orphaned render too.
    on_spawn: Callable[[int | None], None] = _ignore_spawn
    # Set for one chunk of a split job: render only these frames, in the form that
    # Renderer.join() puts together seamlessly. ``output`` is then an (empty, existing)
    # directory that the renderer fills with the chunk's files.
    chunk: ChunkPart | None = None


@dataclass(frozen=True)
class JoinRequest:
    """Put a split job's verified chunks together into ``output`` (a scratch file)."""

    spec: JobSpec
    parts: tuple[tuple[ChunkPart, Path], ...]  # in order; each chunk's directory
    span: FrameSpan  # what the parts cover together
    output: Path
    work_dir: Path
    log: Path
    threads: int
    props: dict[str, Any]
    settings: dict[str, Any]
    on_spawn: Callable[[int | None], None] = _ignore_spawn


@dataclass(frozen=True)
class RenderResult:
    details: dict[str, Any] = field(default_factory=dict)


class Renderer(Protocol):
    def render(self, request: RenderRequest, progress: ProgressFn, cancel: CancelToken) -> RenderResult: ...

    def verify(self, request: RenderRequest, result: RenderResult) -> None:
        """Raise RenderError unless ``request.output`` is a complete, valid file."""
        ...

    def close(self) -> None: ...

    def cache_key(self, request: RenderRequest) -> str | None:
        """A hex digest of everything the output depends on, or None if not cacheable.

        Two requests with the same key must produce interchangeable outputs: the project's
        content and config, the renderer's version, the composition, the props, every
        render setting and the output kind all go into it.
        """
        ...

    def split_refusal(self, request: RenderRequest) -> str | None:
        """None if this job can be rendered in chunks and joined seamlessly, else why not."""
        ...

    def frame_span(self, request: RenderRequest, cancel: CancelToken) -> FrameSpan:
        """The frames the whole job renders (for planning chunks); raises RenderError."""
        ...

    def join(self, request: JoinRequest, progress: ProgressFn, cancel: CancelToken) -> RenderResult:
        """Write ``request.output`` from the chunks; raises RenderError or RenderCancelled."""
        ...

    def verify_join(self, request: JoinRequest, result: RenderResult) -> None:
        """Raise RenderError unless the joined output has every frame, no gap at a join and
        audio as long as the video."""
        ...


# A slot's renderer by the job's ``renderer:`` name, made on first use and kept warm by the executor.
RendererFactory = Callable[[str], Renderer]


def terminate_group(proc: subprocess.Popen[Any], grace: float) -> None:
    """Stop a process started with ``start_new_session=True`` and everything it spawned.

    SIGTERM to the whole process group first (a render's ffmpeg and browser children
    included), SIGKILL to whatever is left of the group after ``grace`` seconds.
    """
    pgid = proc.pid  # start_new_session=True: the leader's pid is the group id
    if _signal_group(pgid, signal.SIGTERM):
        deadline = time.monotonic() + grace
        while (proc.poll() is None or group_has_live_members(pgid)) and time.monotonic() < deadline:
            time.sleep(0.05)
        if proc.poll() is None or group_has_live_members(pgid):
            _signal_group(pgid, signal.SIGKILL)
    proc.wait()


def group_has_live_members(pgid: int) -> bool:
    """True if a process of group ``pgid`` is still running (zombies do not count).

    kill(-pgid, 0) is not enough: where PID 1 does not reap orphans (some containers),
    a group's dead grandchildren stay zombies forever and would look alive.
    """
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as fh:
                fields = fh.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        # After the command name: state, ppid, pgrp, ...
        if int(fields[2]) == pgid and fields[0] not in (b"Z", b"X"):
            return True
    return False


def _signal_group(pgid: int, sig: int) -> bool:
    """Send ``sig`` to the group; False if no process of the group is left."""
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class WholeRendersOnly:
    """What a renderer without a render cache or chunked rendering answers.

    Renderers inherit this and override what they support: nothing it renders is cached,
    and a job that asks for chunks is rendered whole.
    """

    name = "this"

    def cache_key(self, request: RenderRequest) -> str | None:
        return None

    def split_refusal(self, request: RenderRequest) -> str | None:
        return f"the {self.name} renderer renders jobs whole"

    def frame_span(self, request: RenderRequest, cancel: CancelToken) -> FrameSpan:
        raise RenderError(self.split_refusal(request) or "cannot split", transient=False, kind=FailureKind.CONFIG)

    def join(self, request: JoinRequest, progress: ProgressFn, cancel: CancelToken) -> RenderResult:
        raise RenderError(f"the {self.name} renderer cannot join chunks", transient=False, kind=FailureKind.CONFIG)

    def verify_join(self, request: JoinRequest, result: RenderResult) -> None:
        raise RenderError(f"the {self.name} renderer cannot join chunks", transient=False, kind=FailureKind.CONFIG)
