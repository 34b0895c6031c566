"""The Remotion renderer: one long-lived Node render worker per job slot.

The worker (:mod:`~spoolrender.renderers.remotion.node_worker`) loads the cached bundle and
opens Debian's Chromium once, then renders job after job with ``selectComposition`` +
``renderMedia`` on that browser. A slot keeps one warm worker per project it rendered
recently. Split jobs (:mod:`~spoolrender.renderers.remotion.splitting`) use the same worker:
it tells the frames a job renders, renders each chunk and joins them.
"""

from __future__ import annotations

import logging
import signal
import time
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import IO, Any, TypeVar

from spoolrender.config.spool_config import SpoolConfig
from spoolrender.core.vocabulary import FailureKind
from spoolrender.errors import ConfigError, RenderCancelled, RenderError
from spoolrender.jobfile.limits import render_size_problem
from spoolrender.jobfile.media import DEFAULT_STILL_FORMAT, remotion_options, still_format_of
from spoolrender.render_cache.keys import digest_of, stat_identity
from spoolrender.renderers.base import (
    CancelToken,
    FrameSpan,
    JoinRequest,
    ProgressFn,
    RenderRequest,
    RenderResult,
    WholeRendersOnly,
)
from spoolrender.renderers.command import verify_nonempty
from spoolrender.renderers.remotion import join_check, output_check
from spoolrender.renderers.remotion import splitting as remotion_chunks
from spoolrender.renderers.remotion.bundle_cache import ensure_bundle
from spoolrender.renderers.remotion.node_worker import OUT_OF_MEMORY, RemotionWorker, WorkerDied
from spoolrender.renderers.remotion.out_of_memory import OomCount, oom_evidence, oom_kills
from spoolrender.renderers.remotion.project import bundle_key, check_project, setup_error
from spoolrender.renderers.remotion.worker_tmp import WorkerTmp
from spoolrender.spool.records import NOT_AN_ATTEMPT, WARNINGS_KEY, read_runs

log = logging.getLogger(__name__)
T = TypeVar("T")

CANCEL_TIMEOUT_S = 10.0
# Failure kinds from the worker that no retry can fix: the job file must change.
PERMANENT_KINDS = frozenset(
    {
        FailureKind.COMPOSITION_NOT_FOUND,
        FailureKind.INVALID_PROPS,
        FailureKind.COMPONENT_ERROR,
        FailureKind.INVALID_SETTINGS,
        FailureKind.SETUP,
        FailureKind.NO_WEBGL,
    }
)


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

    def _project(self, request: RenderRequest | JoinRequest) -> Path:
        try:
            return self._config.project_dir(request.spec.project).resolve()
        except ConfigError as exc:  # the job was accepted under another config
            raise setup_error(str(exc)) from exc

    def cache_key(self, request: RenderRequest) -> str | None:
        """The bundle's key (the project's package, lock and config files by content, its
        sources by name, size and mtime, the Remotion version, spoolrender's bundling
        scripts: see renderers/remotion/bundle_cache.py), the browser (path, size, mtime: a Chromium upgrade
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

    def _ensure_worker(self, request: RenderRequest | JoinRequest, log_fh: IO[bytes]) -> RemotionWorker:
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
                    raise exc.as_render_error(FailureKind.WORKER) from exc
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
                return self._on_worker(
                    request, log_fh, lambda worker: self._render_with(worker, request, concurrency, progress, cancel)
                )
            except RenderError as exc:
                died = exc.__cause__ if isinstance(exc.__cause__, WorkerDied) else None
                own_sigkill = died is not None and died.killed_by == signal.SIGKILL
                verdict = _memory_verdict(exc, kills_before, oom_kills(), concurrency, own_sigkill=own_sigkill)
                if verdict is exc:
                    raise
                raise verdict from exc
            finally:
                log_fh.write(f"--- end of {request.spec.id} run log\n".encode())

    def _on_worker(
        self, request: RenderRequest | JoinRequest, log_fh: IO[bytes], action: Callable[[RemotionWorker], T]
    ) -> T:
        """``action`` on the warm worker of the request's project, its output in ``log_fh``."""
        worker = self._ensure_worker(request, log_fh)
        request.on_spawn(worker.pgid)
        worker.set_log(log_fh)
        try:
            return action(worker)
        except WorkerDied as exc:
            self._discard_worker()
            raise exc.as_render_error(FailureKind.WORKER_DIED) from exc
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
        message = {
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
        if request.chunk is not None:  # request.output is the chunk's directory
            message["chunk"] = remotion_chunks.chunk_message(request)
            message["outputLocation"] = str(request.output / remotion_chunks.CHUNK_VIDEO)

        def size_problem(started: dict[str, Any]) -> str | None:
            # The composition's size is known only now (props can set it): check the
            # spool's caps before the first frame, and stop the render if it is over.
            return render_size_problem(
                self._config,
                int(started.get("width") or 0),
                int(started.get("height") or 0),
                int(started.get("durationInFrames") or 0),
                float(settings.get("scale", 1)),
            )

        started, done = self._converse(worker, message, progress, cancel, size_problem)
        details = _details(started, done)
        if worker.version_warning is not None:
            details[WARNINGS_KEY] = [worker.version_warning]
        if request.chunk is not None:
            details["chunk_audio"] = done.get("audioLocation") is not None
            remotion_chunks.write_manifest(request, float(details["fps"]), details["chunk_audio"])
        return RenderResult(details=details)

    def _converse(
        self,
        worker: RemotionWorker,
        message: dict[str, Any],
        progress: ProgressFn,
        cancel: CancelToken,
        check_started: Callable[[dict[str, Any]], str | None] | None = None,
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """Send one render/span/join request and follow it to its end: its ("started",
        "done") events; RenderCancelled or RenderError otherwise. ``check_started`` says
        why a started render must stop for good (the render is then cancelled)."""
        job_id = message["jobId"]
        if cancel.is_set():  # cancelled while the worker started: nothing to stop yet
            raise RenderCancelled(cancel.reason or "cancelled")
        worker.send(message)
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
                    raise RenderError(too_large, transient=False, kind=FailureKind.TOO_LARGE)
                raise RenderCancelled(cancel.reason or "cancelled")
            event = worker.next_event(0.1)
            if event is None or event.get("jobId") not in (job_id, None):
                continue
            kind = event["type"]
            if kind == "started":
                started = event
                too_large = check_started(event) if check_started is not None else None
                if too_large is not None and cancel_sent_at is None:
                    worker.send({"type": "cancel", "jobId": job_id})
                    cancel_sent_at = time.monotonic()
                progress(0.0, "rendering")
            elif kind == "progress":
                progress(float(event.get("progress", 0.0)), str(event.get("stage") or "rendering"))
            elif too_large is not None and kind in ("done", "failed"):
                raise RenderError(too_large, transient=False, kind=FailureKind.TOO_LARGE)
            elif kind == "done":
                return started, event
            elif kind == "failed":
                if event.get("kind") == FailureKind.CANCELLED or cancel.is_set():
                    raise RenderCancelled(cancel.reason or "cancelled")
                raise _classify(event)

    def verify(self, request: RenderRequest, result: RenderResult) -> None:
        if request.chunk is not None:
            self._verify_chunk(request)
            return
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

    # --- split jobs (remotion_chunks says how chunks are rendered and joined) ---------------

    def split_refusal(self, request: RenderRequest) -> str | None:
        project = self._project(request)
        version = check_project(project)
        # The project's remotion.config.ts decides what the job file leaves out (its codec
        # above all): read from the bundle, which the render needs anyway.
        bundle = ensure_bundle(project, self._config.cache_dir, request.log)
        defaults = remotion_chunks.render_defaults(bundle)
        return remotion_chunks.split_refusal(request.spec, request.settings, defaults, version)

    def frame_span(self, request: RenderRequest, cancel: CancelToken) -> FrameSpan:
        message = {
            "type": "span",
            "jobId": f"{request.spec.id}#span",
            "composition": request.spec.composition,
            "inputProps": request.props,
            "options": remotion_options(request.settings),
        }
        with open(request.log, "ab") as log_fh:
            _, done = self._on_worker(
                request, log_fh, lambda worker: self._converse(worker, message, _no_progress, cancel)
            )
        try:
            return FrameSpan(int(done["first"]), int(done["last"]), float(done["fps"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise RenderError(f"the Remotion worker answered a span request with {done!r:.200}", transient=True,
                              kind=FailureKind.WORKER) from exc  # fmt: skip

    def join(self, request: JoinRequest, progress: ProgressFn, cancel: CancelToken) -> RenderResult:
        message, audio = remotion_chunks.join_message(request, f"{request.spec.id}#join")
        with open(request.log, "ab") as log_fh:
            log_fh.write(f"--- joining {len(request.parts)} chunks into {request.output.name}\n".encode())
            _, done = self._on_worker(request, log_fh, lambda worker: self._converse(worker, message, progress, cancel))
        return RenderResult(
            details={
                "frames": request.span.frames,
                "fps": request.span.fps,
                "codec": "h264",
                "chunks": len(request.parts),
                "audio": audio,
                "join_ms": done.get("joinMs"),
            }
        )

    def verify_join(self, request: JoinRequest, result: RenderResult) -> None:
        verify_nonempty(request.output)
        ffprobe = self._ffprobe(request)
        joins = [chunk.first - request.span.first for chunk, _ in request.parts[1:]]
        join_check.check_joined(ffprobe, request.output, request.span, bool(result.details.get("audio")), joins)

    def _verify_chunk(self, request: RenderRequest) -> None:
        chunk = request.chunk
        assert chunk is not None
        manifest = remotion_chunks.read_manifest(request.output, chunk)
        audio = request.output / remotion_chunks.CHUNK_AUDIO if manifest.get("audio") else None
        video = request.output / remotion_chunks.CHUNK_VIDEO
        join_check.check_chunk(self._ffprobe(request), chunk, float(manifest["fps"]), video, audio)

    def _ffprobe(self, request: RenderRequest | JoinRequest) -> str:
        """The project's own ffprobe (from its worker): a split job is verified with it or
        not published (its joins cannot be checked otherwise)."""
        worker = self._worker
        if worker is None or worker.project != self._project(request):  # not the one that rendered
            with open(request.log, "ab") as log_fh:
                worker = self._ensure_worker(request, log_fh)
                worker.set_log(None)
        ffprobe = worker.ffprobe
        if ffprobe is None:
            raise setup_error(
                "the Remotion project's compositor has no ffprobe: chunks and joined videos cannot be verified "
                "(reinstall @remotion/renderer)"
            )
        return ffprobe

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


def _no_progress(fraction: float | None, stage: str | None = None) -> None:
    pass


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
    kind = str(event.get("kind") or FailureKind.ERROR)  # unknown kinds pass through
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
