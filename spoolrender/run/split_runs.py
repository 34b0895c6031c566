"""The executor's part of a split job: a chunk's run, the split decision, the join.

A split job is claimed like any job. Its run decides, after validating and reserving the
id, whether to split (``chunks: N`` / ``chunk_frames: F`` in the job, or the spool's
``split_seconds`` when more than one slot is idle); if so it plans the frame ranges
(written once into the ledger), and decides ``split``: a fenced decision like any other,
using no attempt, carried out by :func:`spoolrender.chunks.moves.move_to_split`. Each
chunk is an entry of its own that any runner claims, renders into scratch, verifies and
decides (fenced by its own run records), after which its files move into the store.
The last chunk wakes the job; its next run joins the chunks and publishes like a whole
render. A chunk that failed for good fails the job with the chunk's reason.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Protocol

from spoolrender import defaults
from spoolrender.chunks.ledger import ChunkStates, chunk_states, read_plan, write_plan
from spoolrender.chunks.plan import ChunkPlan, automatic_split, explicit_split, plan_parts
from spoolrender.core.failpoints import crash_point
from spoolrender.core.run_error import RunError
from spoolrender.core.vocabulary import CancelReason, FailureKind
from spoolrender.errors import RenderCancelled, RenderError
from spoolrender.hosts.health import online_hosts
from spoolrender.intake.owncopy import prepare_private_file
from spoolrender.intake.seal import JOB_CHANGED, SEAL_KEY, refused_change
from spoolrender.renderers.base import ChunkPart, JoinRequest, RenderResult
from spoolrender.run.run_end import RunEnd
from spoolrender.spool.beacons import PROBE_PREFIX
from spoolrender.spool.chunk_names import ledger_dir
from spoolrender.spool.clock import spool_now
from spoolrender.spool.layout import final_name
from spoolrender.spool.publish import fsync_file, prepare_scratch, remove_tree, scratch_dir
from spoolrender.spool.records import FAILED, PUBLISHING, SPLIT, log_path

if TYPE_CHECKING:
    from pathlib import Path

    from spoolrender.config.spool_config import SpoolConfig
    from spoolrender.intake.claim import Claim
    from spoolrender.jobfile import JobSpec
    from spoolrender.renderers.base import Renderer, RenderRequest
    from spoolrender.run.cache_step import CacheStep
    from spoolrender.spool.clock import Clock
    from spoolrender.spool.heartbeat import HeartbeatWriter
    from spoolrender.spool.layout import SpoolLayout

log = logging.getLogger(__name__)

CHUNK_OUTCOME_PREFIX = "chunk-"  # RunEnd.outcome of a chunk's run: chunk-done, chunk-retry, ...


class RunSteps(Protocol):
    """The steps of a run that a split job's runs share with every run: those of the
    :class:`~spoolrender.run.executor.JobExecutor` that holds them (its own, not an API)."""

    def _renderer(self, name: str) -> Renderer: ...
    def _finish(
        self, claim: Claim, base: dict[str, Any], outcome: str, *, error: RunError | None = None, **fields: Any
    ) -> RunEnd: ...
    def _request(
        self, claim: Claim, base: dict[str, Any], spec: JobSpec, attempt: int, output: Path,
        chunk: ChunkPart | None = None,
    ) -> RenderRequest: ...  # fmt: skip
    def _interrupted(
        self, claim: Claim, base: dict[str, Any], spec: JobSpec, attempt: int, exc: Exception
    ) -> RunEnd: ...
    def _produce(
        self, claim: Claim, base: dict[str, Any], spec: JobSpec, attempt: int, request: RenderRequest,
        produce: Callable[[Renderer], RenderResult],
    ) -> RunEnd: ...  # fmt: skip
    def _progress(self, token: str) -> Callable[..., None]: ...


class SplitJobRuns:
    """A split job's runs for one slot, held by that slot's executor (whose ``steps`` it uses)."""

    def __init__(
        self,
        steps: RunSteps,
        layout: SpoolLayout,
        config: SpoolConfig,
        clock: Clock,
        heartbeat: HeartbeatWriter,
        threads: int,
        cache: CacheStep,
    ) -> None:
        self._steps = steps
        self._layout = layout
        self._config = config
        self._clock = clock
        self._heartbeat = heartbeat
        self._threads = threads
        self._cache = cache

    # --- one chunk ---------------------------------------------------------------------

    def run_chunk(
        self, claim: Claim, base: dict[str, Any], spec: JobSpec, attempt: int, info: dict[str, Any]
    ) -> RunEnd:
        """Render one chunk; the end's outcome says ``chunk-<outcome>`` (never counted as a job's)."""
        end = self._render_chunk(claim, base, spec, attempt, info)
        return replace(end, outcome=f"{CHUNK_OUTCOME_PREFIX}{end.outcome}")

    def _render_chunk(
        self, claim: Claim, base: dict[str, Any], spec: JobSpec, attempt: int, info: dict[str, Any]
    ) -> RunEnd:
        try:
            key = final_name(str(info["parent_id"]), str(info["parent_uid"]))
            part = ChunkPart(int(info["index"]), int(info["count"]), int(info["first"]), int(info["last"]))
        except (KeyError, TypeError, ValueError) as exc:
            problem = RunError(FailureKind.INVALID_CHUNK, f"unreadable {defaults.CHUNK_FILENAME}: {exc}", False)
            return self._steps._finish(claim, base, FAILED, error=problem)
        base["details"]["chunk"] = {"index": part.index, "count": part.count, "first": part.first, "last": part.last}
        planned = info.get(SEAL_KEY)
        if planned is not None and claim.job_file is not None and planned != claim.job_file.sha256:
            # Its job file is not the parent's copy it was planned from: never rendered.
            refusal = refused_change(str(planned), f"of this chunk is {claim.job_file.short()}")
            return self._steps._finish(claim, base, FAILED, error=RunError(JOB_CHANGED, refusal, False))
        if not ledger_dir(self._layout, key).is_dir():
            # Its job ended (done, failed, cancelled) after this chunk was queued.
            message = "its job has ended; this chunk is not needed"
            return self._steps._finish(
                claim, base, FAILED, attempt=None, error=RunError(FailureKind.CHUNK_ORPHANED, message, False)
            )
        scratch = scratch_dir(self._config.output_root, claim.key)
        request = self._steps._request(claim, base, spec, attempt, scratch / "chunk", chunk=part)
        renderer = self._steps._renderer(spec.renderer)
        timer = threading.Timer(spec.timeout, claim.cancel.cancel, args=(CancelReason.TIMEOUT,))
        timer.daemon = True
        try:
            # A scratch tree another user made is refused (spoolrender.spool.trusted_dirs).
            prepare_scratch(self._config.output_root, claim.key)
            request.output.mkdir()
            timer.start()
            result = renderer.render(request, self._steps._progress(claim.token), claim.cancel)
            if claim.cancel.is_set():
                raise RenderCancelled(claim.cancel.reason or "cancelled")
            renderer.verify(request, result)
        except (RenderCancelled, RenderError, OSError) as exc:
            return self._steps._interrupted(claim, base, spec, attempt, exc)
        finally:
            timer.cancel()
        base["details"].update(result.details)
        for path in request.output.rglob("*"):
            if path.is_file():
                fsync_file(path)  # data first, then the decision (as for a whole output)
        publish = {"temp": str(request.output.relative_to(self._config.output_root)), "chunk": part.index}
        return self._steps._finish(claim, base, PUBLISHING, publish=publish)

    # --- the job: split, wait, join ------------------------------------------------------

    def split_or_join(self, claim: Claim, base: dict[str, Any], spec: JobSpec, attempt: int) -> RunEnd | None:
        """The run of a split job (or one that splits now); None: render it whole."""
        key = final_name(claim.job_id, claim.uid)
        # Only a run of this job writes its plan, and any run that got that far is recorded
        # (decided by itself, or by a recoverer when it died): a first run (no run file yet,
        # as every claim from incoming/, whose uid is new) has none to read.
        plan = read_plan(self._layout, key) if claim.run > 1 else None
        if plan is None:
            planned = self._plan(claim, base, spec, attempt)
            if not isinstance(planned, ChunkPlan):
                return planned
            plan = write_plan(self._layout, key, planned)
            crash_point("after-plan")
        base["details"]["chunks"] = plan.count
        states = chunk_states(self._layout, self._config.output_root, key, claim.uid, plan)
        if states.failed:
            first = min(states.failed, key=lambda f: f.part.index)
            err = first.error or {}
            message = (
                f"chunk {first.part.index + 1} of {plan.count} (frames {first.part.first}-{first.part.last}) "
                f"failed: {err.get('message', 'failed')}"
            )
            return self._steps._finish(
                claim, base, FAILED, error=RunError(str(err.get("kind", FailureKind.ERROR)), message, False)
            )
        if states.complete and not self._broken_chunks(claim, base, spec, attempt, states):
            return self._join(claim, base, spec, attempt, plan, states)
        # Wait in split/ for the chunks (missing ones are queued again on the way there).
        return self._steps._finish(claim, base, SPLIT, attempt=None)

    def _plan(self, claim: Claim, base: dict[str, Any], spec: JobSpec, attempt: int) -> ChunkPlan | RunEnd | None:
        explicit = explicit_split(spec)
        idle = 0
        if not explicit:
            if not automatic_split(spec, self._config.split_seconds):
                return None
            idle = self._idle_slots()
            if idle < 2:
                return None
        renderer = self._steps._renderer(spec.renderer)
        scratch = scratch_dir(self._config.output_root, claim.key)
        whole = self._steps._request(
            claim, base, spec, attempt, scratch / ("output" + (spec.output.suffix or defaults.DEFAULT_OUTPUT_SUFFIX))
        )
        if self._cache.holds(renderer, whole):
            return None  # rendered before: published from the render cache, never split
        request = self._steps._request(claim, base, spec, attempt, scratch)
        refusal = renderer.split_refusal(request)
        if refusal is not None:
            if explicit:
                message = f"this job cannot be rendered in chunks: {refusal}"
                return self._steps._finish(claim, base, FAILED, error=RunError(FailureKind.INVALID_JOB, message, False))
            log.info("job %s: rendered whole (%s)", claim.job_id, refusal)
            return None
        try:
            span = renderer.frame_span(request, claim.cancel)
        except (RenderCancelled, RenderError, OSError) as exc:
            return self._steps._interrupted(claim, base, spec, attempt, exc)
        if explicit:
            parts = plan_parts(span, chunks=None if spec.chunk_frames else spec.chunks, chunk_frames=spec.chunk_frames)
        elif span.seconds > (self._config.split_seconds or 0):
            parts = plan_parts(span, chunks=idle)
        else:
            return None
        if not parts:
            log.info("job %s: %d frames are too few to split; rendered whole", claim.job_id, span.frames)
            return None
        log.info("job %s: split into %d chunks of frames %d-%d", claim.job_id, len(parts), span.first, span.last)
        return ChunkPlan(span, parts, self._clock.wall())

    def _idle_slots(self) -> int:
        """Idle slots of every online runner (by their beacons, at most a heartbeat old),
        plus the slot of this job, which it frees while its chunks render."""
        probe = self._layout.private / f"{PROBE_PREFIX}split-{os.getpid()}-{threading.get_ident()}"
        fs_now = spool_now(probe) or self._clock.wall()
        with contextlib.suppress(OSError):
            os.unlink(probe)
        idle = 1
        for beacons in online_hosts(self._layout, fs_now, self._config.lease_seconds).values():
            for beacon in beacons:
                try:
                    idle += max(0, int(beacon.get("slots", 0)) - int(beacon.get("busy", 0)))
                except (TypeError, ValueError):
                    continue
        return idle

    def _broken_chunks(
        self, claim: Claim, base: dict[str, Any], spec: JobSpec, attempt: int, states: ChunkStates
    ) -> bool:
        """Check every finished chunk's files; a missing or corrupt one is forgotten (its
        ledger entry removed) so that it is queued again. True if any was."""
        renderer = self._steps._renderer(spec.renderer)
        broken = False
        for done in states.done:
            problem = None
            if done.files is None or not done.files.is_dir():
                problem = "its files are missing"
            elif claim.job_file is not None and done.job_sha256 not in (None, claim.job_file.sha256):
                # Rendered from other bytes than the job's copy: joining it would publish
                # (and store in the render cache under this job's key) what was not asked.
                problem = f"it was rendered from other job bytes (sha256 {str(done.job_sha256)[:12]})"
            else:
                check = self._steps._request(claim, base, spec, attempt, done.files, chunk=done.part)
                try:
                    renderer.verify(check, RenderResult())
                except RenderError as exc:
                    problem = exc.message
            if problem is not None:
                log.warning("job %s: chunk %d is rendered again: %s", claim.job_id, done.part.index + 1, problem)
                remove_tree(done.entry)
                if done.files is not None:
                    remove_tree(done.files)
                broken = True
        return broken

    def _join(
        self, claim: Claim, base: dict[str, Any], spec: JobSpec, attempt: int, plan: ChunkPlan, states: ChunkStates
    ) -> RunEnd:
        scratch = scratch_dir(self._config.output_root, claim.key)
        props, settings, _ = spec.settings_for_attempt(attempt)
        parts = tuple((d.part, d.files) for d in sorted(states.done, key=lambda d: d.part.index) if d.files)
        request = JoinRequest(
            spec=spec,
            parts=parts,
            span=plan.span,
            output=scratch / ("output" + (spec.output.suffix or defaults.DEFAULT_OUTPUT_SUFFIX)),
            work_dir=scratch,
            log=prepare_private_file(log_path(claim.job_dir, claim.run), claim.job_dir, claim.file_mode()),
            threads=self._threads,
            props=props,
            settings=settings,
            on_spawn=lambda pgid: self._heartbeat.set_pgid(claim.token, pgid),
        )
        # The whole job as the render cache sees it: an identical job published meanwhile
        # makes the join unnecessary, and a joined output is stored like a whole render.
        whole = self._steps._request(claim, base, spec, attempt, request.output)

        def join(renderer: Renderer) -> RenderResult:
            result = renderer.join(request, self._steps._progress(claim.token), claim.cancel)
            if claim.cancel.is_set():
                raise RenderCancelled(claim.cancel.reason or "cancelled")
            crash_point("join-before-verify")
            renderer.verify_join(request, result)
            return result

        return self._steps._produce(claim, base, spec, attempt, whole, join)
