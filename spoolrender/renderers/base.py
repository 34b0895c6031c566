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

from spoolrender.jobfile import JobSpec


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


@dataclass(frozen=True)
class RenderResult:
    details: dict[str, Any] = field(default_factory=dict)


class Renderer(Protocol):
    def render(self, request: RenderRequest, progress: ProgressFn, cancel: CancelToken) -> RenderResult: ...

    def verify(self, request: RenderRequest, result: RenderResult) -> None:
        """Raise RenderError unless ``request.output`` is a complete, valid file."""
        ...

    def close(self) -> None: ...


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
