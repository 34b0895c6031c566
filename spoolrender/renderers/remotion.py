"""The Remotion renderer: one long-lived Node render worker per job slot.

The worker (``spoolrender/worker/render-worker.mjs``, shipped in this package, run in the
user's Remotion project and loading that project's own Remotion packages) loads the cached
bundle and opens Debian's Chromium once, then renders job after job with ``selectComposition`` +
``renderMedia`` on that browser. We talk to it with one JSON message per line over its
stdin/stdout; its stderr (and anything else it prints) goes to the job's run log.

It is spawned with ``node`` directly (never ``npx``, whose death leaves the render
running as an orphan) in its own session, so cancelling can fall back to killing the
whole process group: the worker, Chromium and ffmpeg.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import queue
import shutil
import signal
import subprocess
import threading
import time
from collections import OrderedDict
from pathlib import Path, PurePosixPath
from typing import IO, Any

from spoolrender import defaults
from spoolrender.bundle_cache import ensure_bundle
from spoolrender.config import SpoolConfig
from spoolrender.errors import ConfigError, RenderCancelled, RenderError
from spoolrender.jobfile.limits import render_size_problem
from spoolrender.jobfile.media import DEFAULT_STILL_FORMAT, remotion_options, still_format_of
from spoolrender.records import NOT_AN_ATTEMPT, read_runs
from spoolrender.renderers import output_check
from spoolrender.renderers.base import (
    CancelToken,
    ProgressFn,
    RenderRequest,
    RenderResult,
    WholeRendersOnly,
    terminate_group,
)
from spoolrender.renderers.cache_keys import digest_of, stat_identity
from spoolrender.renderers.command import verify_nonempty
from spoolrender.renderers.memory import OomCount, memory_line, oom_evidence, oom_kills
from spoolrender.renderers.remotion_project import WORKER_DIR, bundle_key, check_project, setup_error
from spoolrender.renderers.worker_tmp import PROFILE_PREFIX, WorkerTmp

log = logging.getLogger(__name__)

READY_TIMEOUT_S = 120.0
CANCEL_TIMEOUT_S = 10.0
# Failure kinds from the worker that no retry can fix: the job file must change.
PERMANENT_KINDS = frozenset({"composition-not-found", "invalid-props", "component-error", "invalid-settings"})
OUT_OF_MEMORY = "out-of-memory"
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
        self._log: IO[bytes] | None = None
        self._tail: list[str] = []
        self.ffprobe: str | None = None  # the project's own ffprobe (from the ready event)
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
            raise RenderError(f"cannot start the Remotion worker: {exc}", transient=True, kind="worker") from exc
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
            self._log = fh

    def _write_log(self, line: bytes) -> None:
        text = line.decode("utf-8", "replace").rstrip()
        if self.memory is None:
            self.memory = memory_line(text)
        with self._log_lock:
            self._tail = [*self._tail[-19:], text]
            if self._log is not None:
                self._log.write(line)
                self._log.flush()

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
                return event
            if event["type"] == "fatal":
                if event.get("kind") == "setup":
                    raise setup_error(str(event.get("message")))
                raise RenderError(f"Remotion worker failed to start: {event.get('message')}", transient=True,
                                  kind="worker")  # fmt: skip
        raise RenderError("Remotion worker did not become ready in time", transient=True, kind="worker")

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


class RemotionRenderer(WholeRendersOnly):
    name = "remotion"

    """Renders ``renderer: remotion`` jobs for one slot: one warm worker per project, at
    most ``warm_projects`` of them, the least recently used stopped to make room."""

    def __init__(self, config: SpoolConfig) -> None:
        self._config = config
        # project dir -> (its worker, the bundle it serves); least recently used first.
        self._warm: OrderedDict[Path, tuple[RemotionWorker, Path]] = OrderedDict()
        self._worker: RemotionWorker | None = None  # the worker of the current/last job
        self.workers_started = 0

    def _project(self, request: RenderRequest) -> Path:
        try:
            return self._config.project_dir(request.spec.project).resolve()
        except ConfigError as exc:  # the job was accepted under another config
            raise setup_error(str(exc)) from exc

    def cache_key(self, request: RenderRequest) -> str | None:
        """The bundle's key (the project's package, lock and config files by content, its
        sources by name, size and mtime, the Remotion version, spoolrender's bundling
        scripts: see bundle_cache.py), the browser (path, size, mtime: a Chromium upgrade
        is a new key), the composition, the resolved props, every render setting, the
        still frame and format, and the output's suffix.

        Not the concurrency or thread count: Remotion renders the same frames either way.
        Cost: what every render already pays before it starts, a stat per project source
        file and reading the package and config files; no bundle is built and no worker or
        browser started (a project whose bundle was never built gets a key all the same).
        Raises the render's own setup error when the project cannot render at all.
        """
        project = self._project(request)
        version = check_project(project)
        return digest_of(
            {
                "renderer": "remotion",
                "remotion": version,
                "bundle": bundle_key(project, version, self._config.cache_dir.expanduser()),
                "browser": stat_identity(Path(self._config.browser_executable)),
                "composition": request.spec.composition,
                "props": request.props,
                "settings": request.settings,
                "still": _still_request(request),
                "output_suffix": request.output.suffix,
            }
        )

    def _ensure_worker(self, request: RenderRequest, log_fh: IO[bytes]) -> RemotionWorker:
        project = self._project(request)
        serve_url = ensure_bundle(project, self._config.cache_dir, request.log)
        worker, warm_url = self._warm.pop(project, (None, None))
        if worker is not None and (not worker.alive() or serve_url != warm_url):
            worker.stop()  # dead, or the project changed: a fresh worker with the new bundle
            worker = None
        if worker is None:
            self._worker = None
            # Room first: a slot never holds more than warm_projects browsers.
            while len(self._warm) >= self._config.warm_projects:
                _, (lru, _) = self._warm.popitem(last=False)
                log.info("stopping the warm worker of %s (least recently used)", lru.project)
                lru.stop()
            if not Path(self._config.browser_executable).exists():
                raise setup_error(
                    f"browser {self._config.browser_executable} not found: install Debian's chromium "
                    "(scripts/setup.sh does) or set browser_executable"
                )
            worker = RemotionWorker(self._config, project, serve_url, WorkerTmp())
            worker.set_log(log_fh)  # start-up errors belong in the job's log too
            request.on_spawn(worker.pgid)
            try:
                worker.wait_ready()
            except (RenderError, WorkerDied) as exc:
                worker.stop()
                if isinstance(exc, WorkerDied):
                    raise exc.as_render_error("worker") from exc
                raise
            self.workers_started += 1
        self._warm[project] = (worker, serve_url)  # the most recently used, last
        self._worker = worker
        return worker

    def render(self, request: RenderRequest, progress: ProgressFn, cancel: CancelToken) -> RenderResult:
        # A job whose last attempt ran out of memory is not tried the same way again: this
        # attempt renders one frame at a time, and running out again is final.
        after_oom = _last_attempt_ran_out_of_memory(request.job_file.parent)
        concurrency = 1 if after_oom else request.threads
        kills_before = oom_kills()
        with open(request.log, "ab") as log_fh:
            if after_oom:
                log_fh.write(b"--- the last attempt ran out of memory: this one renders at concurrency 1\n")
            try:
                return self._render_on_worker(request, concurrency, log_fh, progress, cancel)
            except RenderError as exc:
                died = exc.__cause__ if isinstance(exc.__cause__, WorkerDied) else None
                own_sigkill = died is not None and died.killed_by == signal.SIGKILL
                verdict = _memory_verdict(exc, kills_before, oom_kills(), concurrency, own_sigkill=own_sigkill)
                if verdict is exc:
                    raise
                raise verdict from exc
            finally:
                log_fh.write(f"--- end of {request.spec.id} run log\n".encode())

    def _render_on_worker(
        self, request: RenderRequest, concurrency: int, log_fh: IO[bytes], progress: ProgressFn, cancel: CancelToken
    ) -> RenderResult:
        worker = self._ensure_worker(request, log_fh)
        request.on_spawn(worker.pgid)
        worker.set_log(log_fh)
        try:
            return self._render_with(worker, request, concurrency, progress, cancel)
        except WorkerDied as exc:
            self._discard_worker()
            raise exc.as_render_error("worker-died") from exc
        finally:
            worker.set_log(None)
            if self._worker is worker:
                worker.clean_tmp()
            request.on_spawn(None)

    def _render_with(
        self,
        worker: RemotionWorker,
        request: RenderRequest,
        concurrency: int,
        progress: ProgressFn,
        cancel: CancelToken,
    ) -> RenderResult:
        job_id = f"{request.spec.id}#{request.attempt}"
        settings = request.settings
        worker.send(
            {
                "type": "render",
                "jobId": job_id,
                "composition": request.spec.composition,
                "inputProps": request.props,
                "outputLocation": str(request.output),
                "concurrency": concurrency,
                # Unset: remotion.config.ts's defaults, then Remotion's.
                "options": remotion_options(settings),
                "still": _still_request(request),
            }
        )
        started: dict[str, Any] = {}
        cancel_sent_at: float | None = None
        too_large: str | None = None  # over the spool's render-size caps: cancelled, failed for good
        while True:
            if cancel.is_set() and cancel_sent_at is None:
                worker.send({"type": "cancel", "jobId": job_id})
                cancel_sent_at = time.monotonic()
            if cancel_sent_at is not None and time.monotonic() - cancel_sent_at > CANCEL_TIMEOUT_S:
                # The cancel signal was not honoured in time: kill the whole group.
                self._discard_worker()
                if too_large is not None:
                    raise RenderError(too_large, transient=False, kind="too-large")
                raise RenderCancelled(cancel.reason or "cancelled")
            event = worker.next_event(0.1)
            if event is None or event.get("jobId") not in (job_id, None):
                continue
            kind = event["type"]
            if kind == "started":
                started = event
                # The composition's size is known only now (props can set it): check the
                # spool's caps before the first frame, and stop the render if it is over.
                too_large = render_size_problem(
                    self._config,
                    int(event.get("width") or 0),
                    int(event.get("height") or 0),
                    int(event.get("durationInFrames") or 0),
                    float(settings.get("scale", 1)),
                )
                if too_large is not None and cancel_sent_at is None:
                    worker.send({"type": "cancel", "jobId": job_id})
                    cancel_sent_at = time.monotonic()
                progress(0.0, "rendering")
            elif kind == "progress":
                progress(float(event.get("progress", 0.0)), str(event.get("stage") or "rendering"))
            elif too_large is not None and kind in ("done", "failed"):
                raise RenderError(too_large, transient=False, kind="too-large")
            elif kind == "done":
                return RenderResult(details=_details(started, event))
            elif kind == "failed":
                if event.get("kind") == "cancelled" or cancel.is_set():
                    raise RenderCancelled(cancel.reason or "cancelled")
                raise _classify(event)

    def verify(self, request: RenderRequest, result: RenderResult) -> None:
        verify_nonempty(request.output)
        details = result.details
        ffprobe = self._worker.ffprobe if self._worker is not None else None
        if ffprobe is None or not details.get("frames"):
            return  # a project whose compositor has no ffprobe: the file is at least there
        if details.get("still"):
            scale = float(request.settings.get("scale", 1))
            width, height = round(int(details["width"]) * scale), round(int(details["height"]) * scale)
            output_check.check_still(ffprobe, request.output, str(details["still"]), width, height)
        elif details.get("codec") in output_check.AUDIO_ONLY_CODECS:
            output_check.check_audio(ffprobe, request.output, int(details["frames"]), float(details["fps"]))
        else:
            output_check.check_video(ffprobe, request.output, details.get("codec"), int(details["frames"]))

    def _discard_worker(self) -> None:
        worker = self._worker
        if worker is not None:
            self._warm.pop(worker.project, None)
            worker.stop()
            self._worker = None

    def close(self) -> None:
        while self._warm:
            _, (worker, _) = self._warm.popitem()
            worker.stop()
        self._worker = None


def _details(started: dict[str, Any], done: dict[str, Any]) -> dict[str, Any]:
    stats = done.get("stats") or {}
    return {
        "composition_frames": started.get("durationInFrames"),
        "frames": done.get("frameCount", done.get("durationInFrames", started.get("durationInFrames"))),
        "fps": done.get("fps", started.get("fps")),
        "width": done.get("width", started.get("width")),
        "height": done.get("height", started.get("height")),
        "codec": done.get("codec"),
        "still": done.get("still"),
        "render_ms": done.get("renderMs"),
        "worker": {k: stats.get(k) for k in ("browserLaunches", "bundleLoads", "jobsRendered", "jobsFailed")},
    }


def _still_request(request: RenderRequest) -> dict[str, Any] | None:
    still = request.spec.still
    if still is None:
        return None
    fmt = still["format"] or still_format_of(PurePosixPath(request.spec.output)) or DEFAULT_STILL_FORMAT
    return {"frame": still["frame"], "imageFormat": fmt}


def _classify(event: dict[str, Any]) -> RenderError:
    kind = str(event.get("kind") or "error")
    message = str(event.get("message") or "render failed").strip().splitlines()[0]
    location = event.get("location")
    if location and str(location) not in message:
        message = f"{message} (at {location})"
    return RenderError(message, transient=kind not in PERMANENT_KINDS, kind=kind)


def _last_attempt_ran_out_of_memory(job_dir: Path) -> bool:
    attempts = [r for r in read_runs(job_dir) if r.outcome not in NOT_AN_ATTEMPT]
    return bool(attempts) and (attempts[-1].error or {}).get("kind") == OUT_OF_MEMORY


# Failures that a process killed for memory shows up as.
_KILLED_KINDS = frozenset({"browser-crashed", "worker-died", "worker", "error"})


def _memory_verdict(
    exc: RenderError,
    kills_before: OomCount | None,
    kills_after: OomCount | None,
    concurrency: int,
    *,
    own_sigkill: bool,
) -> RenderError:
    """``exc`` as an out-of-memory failure when it was one, final when the render already
    ran one frame at a time (retrying it the same way would only exhaust memory again).

    Only certain evidence makes it final: a host-wide OOM count that rose while the render
    crashed (memory.oom_evidence) is *possibly* out of memory, retried at concurrency 1.
    """
    error = exc
    possibly = False
    if exc.kind in _KILLED_KINDS:
        evidence = oom_evidence(kills_before, kills_after, own_sigkill=own_sigkill)
        if evidence is not None:
            error = RenderError(f"{evidence.reason}: {exc.message}", transient=True, kind=OUT_OF_MEMORY)
            possibly = not evidence.certain
    if error.kind != OUT_OF_MEMORY:
        return exc
    if concurrency <= 1 and not possibly:
        return RenderError(
            f"{error.message} (not retried: it ran out of memory rendering one frame at a time; lower the "
            "resolution or scale, or give the host more memory)",
            transient=False,
            kind=OUT_OF_MEMORY,
        )
    return RenderError(f"{error.message} (the retry renders at concurrency 1)", transient=True, kind=OUT_OF_MEMORY)
