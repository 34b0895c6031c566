"""One Remotion render worker: the Node process (``spoolrender/renderers/remotion/worker/render-worker.mjs``)
and the threads that read its output.

The worker ships in this package, runs in the user's Remotion project and loads that
project's own Remotion packages; it loads the cached bundle and opens Debian's Chromium
once, then serves request after request. We talk to it with one JSON message per line over
its stdin/stdout; its stderr (and anything else it prints) goes to the job's run log.

It is spawned with ``node`` directly (never ``npx``, whose death leaves the render
running as an orphan) in its own session, so cancelling can fall back to killing the
whole process group: the worker, Chromium and ffmpeg.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import shutil
import subprocess
import threading
import time
from pathlib import Path
from typing import IO, Any

from spoolrender import defaults
from spoolrender.config.spool_config import SpoolConfig
from spoolrender.core.vocabulary import FailureKind
from spoolrender.errors import RenderError
from spoolrender.renderers.base import terminate_group
from spoolrender.renderers.remotion.out_of_memory import memory_line
from spoolrender.renderers.remotion.project import WORKER_DIR, setup_error
from spoolrender.renderers.remotion.worker_tmp import PROFILE_PREFIX, WorkerTmp
from spoolrender.renderers.run_log import RunLogLines

READY_TIMEOUT_S = 120.0
OUT_OF_MEMORY = FailureKind.OUT_OF_MEMORY
# What Chromium keeps in TMPDIR while it runs (its profile, its scratch dir).
BROWSER_FILES = (PROFILE_PREFIX, "org.chromium.Chromium.")


# How long a dead worker's stderr may take to drain before its death is described.
STDERR_DRAIN_S = 5.0


class WorkerDied(Exception):
    """The Node worker exited or closed its stdout; ``memory``: the line of its output
    that said it ran out of memory, if one did; ``killed_by``: the signal that ended it."""

    def __init__(self, message: str, memory: str | None = None, killed_by: int | None = None) -> None:
        super().__init__(message)
        self.memory = memory
        self.killed_by = killed_by  # the signal that ended the worker, when one did

    def as_render_error(self, kind: str) -> RenderError:
        if self.memory is not None:
            return RenderError(f"the Remotion worker ran out of memory: {self.memory}", transient=True,
                               kind=OUT_OF_MEMORY)  # fmt: skip
        return RenderError(str(self), transient=True, kind=kind)


class RemotionWorker:
    """One Node render worker process and the threads that read its output."""

    def __init__(self, config: SpoolConfig, project: Path, serve_url: Path, tmp: WorkerTmp) -> None:
        self._config = config
        self._events: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self._log_lock = threading.Lock()
        self._log: RunLogLines | None = None  # the job's log, while a job runs
        self._tail: list[str] = []
        self.ffprobe: str | None = None  # the project's own ffprobe (from the ready event)
        # Remotion's "Version mismatch" for the project's packages (ready event), or None.
        self.version_warning: str | None = None
        self.memory: str | None = None  # the first output line saying memory ran out
        self.tmp = tmp
        self.tmpdir = tmpdir = tmp.path
        self.project = project.resolve()
        argv = [
            "node",
            str(WORKER_DIR / "render-worker.mjs"),
            "--project", str(self.project),
            "--serve-url", str(serve_url),
            "--browser-executable", config.browser_executable,
        ]  # fmt: skip
        env = {**os.environ, "TMPDIR": str(tmpdir), "NODE_ENV": "production"}
        try:
            self.proc = subprocess.Popen(
                argv,
                cwd=self.project,
                env=env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
            )
        except OSError as exc:
            raise RenderError(
                f"cannot start the Remotion worker: {exc}", transient=True, kind=FailureKind.WORKER
            ) from exc
        assert self.proc.stdout is not None and self.proc.stderr is not None
        threading.Thread(target=self._read_stdout, args=(self.proc.stdout,), daemon=True).start()
        self._stderr_reader = threading.Thread(target=self._read_stderr, args=(self.proc.stderr,), daemon=True)
        self._stderr_reader.start()
        self.baseline = set(os.listdir(tmpdir))

    @property
    def pgid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def set_log(self, fh: IO[bytes] | None) -> None:
        with self._log_lock:
            self._log = None if fh is None else RunLogLines(fh)

    def _write_log(self, line: bytes) -> None:
        text = line.decode("utf-8", "replace").rstrip()
        if self.memory is None:
            self.memory = memory_line(text)
        with self._log_lock:
            self._tail = [*self._tail[-19:], text]
            if self._log is not None:
                # A line that cannot be written is lost, never this reader (run_log.py).
                self._log.write(line)

    def _read_stdout(self, stream: IO[bytes]) -> None:
        for raw in stream:
            try:
                event = json.loads(raw)
            except ValueError:
                event = None
            if isinstance(event, dict) and "type" in event:
                if event["type"] != "progress":
                    # The log tells the whole story: requests' outcomes and, for
                    # failures, the worker's full detail (stack, source-mapped frames).
                    detail = event.get("detail")
                    brief = {k: v for k, v in event.items() if k != "detail"}
                    self._write_log(json.dumps(brief).encode() + b"\n")
                    if detail:
                        self._write_log(str(detail).encode() + b"\n")
                self._events.put(event)
            else:
                self._write_log(raw)
        self._events.put(None)  # EOF: the worker is gone

    def _read_stderr(self, stream: IO[bytes]) -> None:
        for raw in stream:
            self._write_log(raw)

    def send(self, message: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(json.dumps(message).encode() + b"\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, ValueError) as exc:
            raise WorkerDied(self.describe_death(), self.memory, self.exit_signal()) from exc

    def next_event(self, timeout: float) -> dict[str, Any] | None:
        """The next protocol event, or None on timeout; raises WorkerDied at EOF."""
        try:
            event = self._events.get(timeout=timeout)
        except queue.Empty:
            return None
        if event is None:
            self._events.put(None)  # keep reporting death to later callers
            raise WorkerDied(self.describe_death(), self.memory, self.exit_signal())
        return event

    def wait_ready(self) -> dict[str, Any]:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            event = self.next_event(0.2)
            if event is None:
                continue
            if event["type"] == "ready":
                self.baseline = set(os.listdir(self.tmpdir))
                self.ffprobe = event.get("ffprobe")
                self.version_warning = event.get("versionWarning") or None
                return event
            if event["type"] == "fatal":
                if event.get("kind") == FailureKind.SETUP:
                    raise setup_error(str(event.get("message")))
                raise RenderError(f"Remotion worker failed to start: {event.get('message')}", transient=True,
                                  kind=FailureKind.WORKER)  # fmt: skip
        raise RenderError("Remotion worker did not become ready in time", transient=True, kind=FailureKind.WORKER)

    def describe_death(self) -> str:
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=2)
        # The last words (V8's "heap out of memory" among them) may still be in the stderr
        # pipe when stdout's EOF is seen: let the reader drain it before judging the death.
        # Bounded, since a browser that inherited the pipe can keep it open after we die.
        self._stderr_reader.join(timeout=STDERR_DRAIN_S)
        code = self.proc.poll()
        how = "still running" if code is None else (f"exit code {code}" if code >= 0 else f"signal {-code}")
        last = next((line for line in reversed(self._tail) if line.strip()), "")
        return f"the Remotion worker died ({how})" + (f": {last[:300]}" if last else "")

    def exit_signal(self) -> int | None:
        """The signal that ended the worker (read once it is dead: describe_death waits)."""
        code = self.proc.poll()
        return -code if code is not None and code < 0 else None

    def clean_tmp(self) -> None:
        """Delete what the last render left in the worker's TMPDIR. The browser's own
        files stay (a browser relaunched after a crash made new ones after ``baseline``);
        a killed browser's profile goes."""
        self.tmp.remove_dead_profiles()
        for name in set(os.listdir(self.tmpdir)) - self.baseline:
            if name.startswith(BROWSER_FILES):
                continue
            path = self.tmpdir / name
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                with contextlib.suppress(OSError):
                    path.unlink()

    def stop(self) -> None:
        if self.alive():
            with contextlib.suppress(WorkerDied, OSError):
                self.send({"type": "shutdown"})
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=5)
        terminate_group(self.proc, defaults.KILL_GRACE_S)
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()
        self.tmp.remove()
