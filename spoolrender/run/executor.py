"""Running one claimed job from start to its next state: the life of one run.

validate -> reserve id -> render into scratch -> verify -> decide -> publish -> done/
and on the way: permanent errors to failed/, transient ones to retry/ with backoff,
shutdown back to retry/ without using an attempt, and a lost job (recovered elsewhere
while we worked) simply dropped, its scratch output deleted, never published.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import random
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

from filelock import Timeout

from spoolrender import defaults
from spoolrender.config.spool_config import SpoolConfig
from spoolrender.core.failpoints import crash_point
from spoolrender.core.run_error import RunError
from spoolrender.core.vocabulary import CancelReason, FailureKind, JobState
from spoolrender.errors import JobInvalid, PublishError, RenderCancelled, RenderError
from spoolrender.hosts.health import record_failure
from spoolrender.intake import seal
from spoolrender.intake.claim import Claim
from spoolrender.intake.owncopy import continued_append, drop_copy, holds_job, others_may_write, prepare_private_file
from spoolrender.intake.watch import is_network_filesystem
from spoolrender.jobfile import JobSpec
from spoolrender.lifecycle.rerun import rerun_refusal
from spoolrender.lifecycle.transitions import carry_out, log_transition
from spoolrender.renderers.base import ChunkPart, Renderer, RendererFactory, RenderRequest, RenderResult
from spoolrender.run.admission import admit
from spoolrender.run.cache_step import CacheMetrics, CacheStep, CacheTurn
from spoolrender.run.deadlines import DEADLINES, Deadline
from spoolrender.run.run_end import RunEnd
from spoolrender.run.split_runs import SplitJobRuns
from spoolrender.spool.chunk_names import parent_id
from spoolrender.spool.clock import CLOCK_OFFSET_KEY, Clock, SpoolClock
from spoolrender.spool.heartbeat import HOSTNAME, HeartbeatWriter
from spoolrender.spool.ids import reserve_id
from spoolrender.spool.io_trouble import (
    SpoolIOCondition,
    attempt_counted,
    filesystem_trouble,
    filled_by_run,
    is_spool_io,
    room_by_device,
    strerror,
)
from spoolrender.spool.layout import SpoolLayout
from spoolrender.spool.publish import fsync_file, output_taken_problem, prepare_scratch, remove_scratch, scratch_dir
from spoolrender.spool.records import (
    FAILED,
    PUBLISHING,
    REQUEUE,
    RETRY,
    SPLIT,
    SPOOL_IO,
    WARNINGS_KEY,
    RunRecord,
    as_read_back,
    attempts_used,
    decide,
    log_path,
    read_run,
    read_runs,
    spool_io_requeues,
)

log = logging.getLogger(__name__)

_STATE_OF: dict[str, JobState] = {
    PUBLISHING: JobState.DONE, FAILED: JobState.FAILED, RETRY: JobState.RETRY, REQUEUE: JobState.RETRY,
    SPLIT: JobState.SPLIT,
}  # fmt: skip
T = TypeVar("T")
# A run waiting for a failing spool gives up only when it must: a shutdown past its grace
# time, or the job taken over elsewhere.
_GIVE_UP_REASONS = (CancelReason.SHUTDOWN, CancelReason.LOST)
_METRIC_OF: dict[str, str] = {PUBLISHING: "done", FAILED: "failed", RETRY: "retry", REQUEUE: "requeue", SPLIT: "split"}


class JobExecutor:
    """Runs claimed jobs for one slot; owns that slot's renderers (kept warm).

    Split jobs' runs (a chunk's, the split decision, the join) are a :class:`SplitJobRuns` it
    holds, which uses this executor's steps (:class:`~spoolrender.run.split_runs.RunSteps`).
    """

    def __init__(
        self,
        layout: SpoolLayout,
        config: SpoolConfig,
        clock: Clock,
        rng: random.Random,
        heartbeat: HeartbeatWriter,
        make_renderer: RendererFactory,
        threads: int,
        cache_metrics: CacheMetrics | None = None,
        spool_io: SpoolIOCondition | None = None,
        spool_clock: SpoolClock | None = None,
    ) -> None:
        self._layout = layout
        self._spool_clock = spool_clock
        self._config = config
        self._clock = clock
        self._rng = rng
        self._heartbeat = heartbeat
        self._make_renderer = make_renderer
        self._threads = threads
        self._renderers: dict[str, Renderer] = {}
        self._cache = CacheStep(layout, config, clock, heartbeat, cache_metrics)
        self._split = SplitJobRuns(self, layout, config, clock, heartbeat, threads, self._cache)
        # On a network filesystem the job file is read past the client's caches: another
        # host may have written more than this client has seen (spoolrender.spool.netcache).
        self._uncached = is_network_filesystem(config.spool)
        self._spool_io = spool_io or SpoolIOCondition(clock, HOSTNAME)

    def close(self) -> None:
        for renderer in self._renderers.values():
            try:
                renderer.close()
            except Exception:  # closing must not stop the others from closing
                log.exception("closing renderer failed")
        self._renderers.clear()

    def _renderer(self, name: str) -> Renderer:
        if name not in self._renderers:
            self._renderers[name] = self._make_renderer(name)
        return self._renderers[name]

    def execute(self, claim: Claim) -> RunEnd:
        """Run ``claim`` to its next state."""
        claim.room_at_start = room_by_device(self._config.output_root, claim.job_dir)
        try:
            try:
                return self._execute(claim)
            except OSError as exc:
                if not is_spool_io(exc) or claim.decided:
                    raise
                # Reading, reserving the id, preparing: the spool failed before the run could
                # be decided. Not the job's fault: back to retry/, no attempt used.
                return self._spool_io_requeue(claim, {**_base(claim, None), "details": claim.details}, exc)
        except FileNotFoundError:
            if holds_job(claim.job_dir):
                raise
            # Our running/ directory moved away under us (we stalled past the lease and
            # another runner recovered the job): a lost claim, not a spool failure.
            return self._lost(claim)
        finally:
            self._heartbeat.remove(claim.token)
            claim.release()
            if not claim.keep_scratch:
                remove_scratch(self._config.output_root, claim.key)

    def _execute(self, claim: Claim) -> RunEnd:
        job_dir = claim.job_dir
        # A first run has no run file to read: its claim listed none (a retry/ entry's run
        # number is the next after its files; every claim from incoming/ makes a new
        # directory), and only a recoverer could have written one since, after moving the
        # directory away (holds_job below finds that out). One listing less per job.
        runs = read_runs(job_dir) if claim.run > 1 else []
        attempt = attempts_used(runs) + 1
        base = _base(claim, attempt)
        if claim.refusal is None and not holds_job(job_dir):
            # A claim without its job file was moved away (and maybe recreated by an old
            # runner): lost, never "invalid", which would fail a job that lives elsewhere.
            return self._lost(claim)
        cancel_request = _cancel_request(job_dir)
        if cancel_request is not None:  # asked while the job waited, or before a recovery
            return self._finish(
                claim, base, FAILED, attempt=None, error=RunError(FailureKind.CANCELLED, cancel_request, False)
            )
        admitted = admit(claim, base, runs, attempt, self._config)
        if isinstance(admitted, RunError):
            return self._finish(claim, base, FAILED, error=admitted)
        spec = admitted.spec
        if admitted.chunk is not None:
            return self._split.run_chunk(claim, base, spec, attempt, admitted.chunk)
        refused = self._reserve(claim, base, spec, attempt)
        if refused is not None:
            return refused
        split = self._split.split_or_join(claim, base, spec, attempt)
        if split is not None:
            return split
        return self._render(claim, base, spec, attempt)

    def _reserve(self, claim: Claim, base: dict[str, Any], spec: JobSpec, attempt: int) -> RunEnd | None:
        """Reserve the job's id and check its output name: None if both are the job's, else
        how the run ended (failed, or retried while the output's trouble is transient)."""
        try:
            reserve_id(self._layout, spec.id, claim.uid, rerun=spec.rerun, origin=spec.id_origin)
            taken = output_taken_problem(self._config.output_root, spec.output, rerun=spec.rerun)
            if taken is not None:
                raise JobInvalid([taken])
            if spec.rerun and (refused := rerun_refusal(self._layout, self._config.output_root, spec.output, spec.id)):
                raise refused
        except JobInvalid as exc:
            return self._finish(
                claim, base, FAILED, error=RunError(FailureKind.INVALID_JOB, "; ".join(exc.problems), False)
            )
        except PublishError as exc:
            error = RunError(exc.kind or FailureKind.OUTPUT, str(exc), exc.transient)
            return self._failure(claim, base, spec, attempt, error)
        return None

    def _render(self, claim: Claim, base: dict[str, Any], spec: JobSpec, attempt: int) -> RunEnd:
        scratch = scratch_dir(self._config.output_root, claim.key)
        request = self._request(
            claim, base, spec, attempt, scratch / ("output" + (spec.output.suffix or defaults.DEFAULT_OUTPUT_SUFFIX))
        )

        def render(renderer: Renderer) -> RenderResult:
            result = renderer.render(request, self._progress(claim.token), claim.cancel)
            if claim.cancel.is_set():
                raise RenderCancelled(claim.cancel.reason or "cancelled")
            renderer.verify(request, result)
            return result

        return self._produce(claim, base, spec, attempt, request, render)

    def _produce(
        self,
        claim: Claim,
        base: dict[str, Any],
        spec: JobSpec,
        attempt: int,
        request: RenderRequest,
        produce: Callable[[Renderer], RenderResult],
    ) -> RunEnd:
        """Write the job's whole output (``request.output``, in an emptied scratch dir) under
        the job's timeout: from the render cache, or with ``produce`` (a render or a join,
        verified), stored in the cache; then the publish decision."""
        timer: Deadline | None = None
        turn: CacheTurn | None = None
        try:
            prepare_scratch(self._config.output_root, claim.key)  # request.output's directory
            renderer = self._renderer(spec.renderer)
            timer = DEADLINES.call_after(spec.timeout, functools.partial(claim.cancel.cancel, CancelReason.TIMEOUT))
            # The render cache (off unless enabled): a hit, or a miss this run renders (having
            # waited while an identical job rendered), under the same timeout and cancel.
            turn = self._cache.lookup(renderer, request, claim)
            if turn is not None and turn.hit is not None:
                result = self._cache.hit_result(turn)
            else:
                result = produce(renderer)
                self._cache.store(turn, request, claim, result)
        except (RenderCancelled, RenderError, OSError) as exc:
            return self._interrupted(claim, base, spec, attempt, exc)
        finally:
            if timer is not None:
                timer.cancel()
            self._cache.release(turn)
        if turn is not None:
            base["details"].update(turn.record())
        return self._publishing(claim, base, spec, request.output, result)

    def _request(
        self,
        claim: Claim,
        base: dict[str, Any],
        spec: JobSpec,
        attempt: int,
        output: Path,
        chunk: ChunkPart | None = None,
    ) -> RenderRequest:
        props, settings, fallback_used = spec.settings_for_attempt(attempt)
        if fallback_used:
            base["details"]["fallback_used"] = True
        return RenderRequest(
            spec=spec,
            job_file=claim.job_dir / defaults.JOB_FILENAME,
            output=output,
            work_dir=scratch_dir(self._config.output_root, claim.key),
            log=prepare_private_file(log_path(claim.job_dir, claim.run), claim.job_dir, claim.file_mode()),
            threads=self._threads,
            attempt=attempt,
            props=props,
            settings=settings,
            on_spawn=lambda pgid: self._heartbeat.set_pgid(claim.token, pgid),
            chunk=chunk,
        )

    def _interrupted(self, claim: Claim, base: dict[str, Any], spec: JobSpec, attempt: int, exc: Exception) -> RunEnd:
        """The run ends without a verified output: cancelled, timed out, failed."""
        if isinstance(exc, RenderCancelled):
            reason = claim.cancel.reason or "cancelled"
            if reason == CancelReason.TIMEOUT:
                timed_out = RunError(FailureKind.TIMEOUT, f"timed out after {spec.timeout:g} s", True)
                return self._failure(claim, base, spec, attempt, timed_out)
            if reason == CancelReason.SHUTDOWN:
                return self._finish(claim, base, REQUEUE, due=self._clock.wall(), attempt=None)
            if reason == CancelReason.LOST:
                return self._lost(claim)
            message = _cancel_request(claim.job_dir) or f"cancelled ({reason})"
            return self._finish(
                claim, base, FAILED, attempt=None, error=RunError(FailureKind.CANCELLED, message, False)
            )
        if isinstance(exc, RenderError):
            full = filesystem_trouble(self._config.output_root, claim.job_dir)
            if full is not None and not self._filled_by_run(claim, full):
                # Its output or log had no room, and not for its own sake: the disk's condition.
                # Said in the log because it is judged by statvfs at this moment, not by the
                # render's own error: an operator (or a test) freeing space sees when it counted.
                log.warning(
                    "job %s: its render failed while %s had no room: the disk's condition, not the job's",
                    claim.job_id, full.filename,
                )  # fmt: skip
                where = f"{full.filename} after the render failed: {exc}"
                return self._spool_io_requeue(claim, base, full, where, spec)
            message = exc.message if full is None else f"{exc.message} ({_filled_it(full)})"
            return self._failure(claim, base, spec, attempt, RunError(exc.kind, message, exc.transient))
        assert isinstance(exc, OSError)
        if is_spool_io(exc) and not self._filled_by_run(claim, exc):
            return self._spool_io_requeue(claim, base, exc, spec=spec)  # the filesystem's, not the job's
        message = f"{exc.strerror or exc}" + (f" ({_filled_it(exc)})" if is_spool_io(exc) else "")
        return self._failure(claim, base, spec, attempt, RunError(FailureKind.IO, message, True))

    def _filled_by_run(self, claim: Claim, trouble: OSError) -> bool:
        """Did this run's own files (scratch output, log) fill the disk ``trouble`` is about?"""
        own = (scratch_dir(self._config.output_root, claim.key), log_path(claim.job_dir, claim.run))
        return filled_by_run(trouble, claim.room_at_start, own)

    def _spool_io_requeue(
        self, claim: Claim, base: dict[str, Any], exc: OSError, where: str | None = None, spec: JobSpec | None = None
    ) -> RunEnd:
        """The run stopped because a filesystem failed (full, read-only...): back to retry/
        without using an attempt, recorded with its own kind and the kernel's text; unless
        the job has had SPOOL_IO_FREE_REQUEUES of those in a row: then it uses an attempt
        (``spec``: the job's limits, None when it stopped before they were read)."""
        self._spool_io.failed(exc, f"running job {claim.job_id}")
        if where is None:
            where = f"writing {Path(exc.filename).name}" if exc.filename else "writing to the spool"
        try:
            runs = read_runs(claim.job_dir)
        except OSError:
            runs = []  # unreadable now: the bound is checked at its next stop
        requeues = spool_io_requeues(runs)
        if requeues < defaults.SPOOL_IO_FREE_REQUEUES:
            error = RunError(SPOOL_IO, f"{strerror(exc)} ({where}); requeued without using an attempt", True)
            return self._finish(claim, base, REQUEUE, attempt=None, error=error, due=self._clock.wall())
        # Free requeues are bounded, so that no job can loop for ever without using an attempt.
        attempt = attempts_used(runs) + 1
        base = {**base, "attempt": attempt}
        error = RunError(SPOOL_IO, f"{strerror(exc)} ({where}); {attempt_counted(requeues)}", True)
        if spec is not None:
            return self._failure(claim, base, spec, attempt, error, against_host=False)
        # The job's limits are unknown here: its next run fails it if this was its last attempt.
        delay = self._config.job_retry.delay(attempt, self._rng)
        return self._finish(claim, base, RETRY, error=error, due=self._clock.wall() + delay)

    def _spool_write(self, claim: Claim, what: str, op: Callable[[], T]) -> T:
        """``op()`` (a decision, a move), tried again with the spool I/O backoff while the
        filesystem fails: the claim (lock, heartbeat) is kept meanwhile, so nobody takes
        the job for dead. Only a shutdown that cannot wait any more gives up (the heartbeat
        then says why, and the recoverer requeues the job without using an attempt)."""

        def attempt() -> T:
            try:
                return op()
            except OSError as exc:
                if is_spool_io(exc):
                    self._heartbeat.set_spool_io(claim.token, strerror(exc))
                raise

        result = self._spool_io.retry(attempt, what, give_up=lambda: claim.cancel.reason in _GIVE_UP_REASONS)
        self._heartbeat.set_spool_io(claim.token, None)
        return result

    def _publishing(
        self, claim: Claim, base: dict[str, Any], spec: JobSpec, output: Path, result: RenderResult
    ) -> RunEnd:
        """Decide to publish the verified ``output`` (a scratch file) as the job's output."""
        st = output.stat()
        base["details"].update(result.details)
        publish = {
            # Relative to the output root: whoever carries this decision out (another host
            # mounting the output root elsewhere) resolves it against its own root.
            "temp": str(output.relative_to(self._config.output_root)),
            "output": str(spec.output),
            "replace": spec.rerun,
            "bytes": st.st_size,
            "inode": st.st_ino,
            # Recognises the output where inode numbers differ per host (sshfs).
            "mtime_ns": st.st_mtime_ns,
        }
        # Data first, then the decision: a power cut after "publishing" was recorded must
        # find a complete file to publish (see spool/durable.py).
        fsync_file(output)
        return self._finish(claim, base, PUBLISHING, publish=publish)

    def _failure(
        self,
        claim: Claim,
        base: dict[str, Any],
        spec: JobSpec,
        attempt: int,
        error: RunError,
        *,
        against_host: bool = True,
    ) -> RunEnd:
        """A failed attempt: retried while it is transient and attempts are left.
        ``against_host``: a transient failure counts against this host (hosts/health.py), but for
        a full or failing spool, which is every host's."""
        delay = None
        if error.transient:
            delay = self._config.job_retry.with_attempts(spec.max_attempts).retry_in(attempt, self._rng)
        if delay is not None:
            end = self._finish(claim, base, RETRY, error=error, due=self._clock.wall() + delay)
        elif error.transient:
            last = error.with_message(f"{error.message} (attempt {attempt} of {spec.max_attempts}, none left)")
            end = self._finish(claim, base, FAILED, error=last)
        else:
            return self._finish(claim, base, FAILED, error=error)
        # Only a failure this run decided counts against the host: not one of a run taken
        # over meanwhile (a host frozen past the lease that times out on waking), nor a
        # discarded one (an upload that went on, see _upload_went_on).
        counted = end.outcome in (_METRIC_OF[RETRY], _METRIC_OF[FAILED]) and end.error_kind == error.kind
        if against_host and counted:
            try:
                # A split job's chunks count as that one job against the host.
                now = None if self._spool_clock is None else self._spool_clock.now()
                job = parent_id(claim.job_id)
                record_failure(self._layout, self._config, HOSTNAME, job, error.kind, now or self._clock.wall())
            except (OSError, Timeout) as exc:  # host health must never stop a job's own record
                log.warning("could not record the failure against host %s: %s", HOSTNAME, exc)
        return end

    def _discard(self, claim: Claim, base: dict[str, Any], problem: str) -> RunEnd:
        """The upload was not finished when the job was claimed: this run never counts."""
        log.warning(
            "job %s: discarding run %d: the submitted job file %s; it runs again once the upload has finished",
            claim.job_id, claim.run, problem,
        )  # fmt: skip
        # The copy of the unfinished upload goes before the decision: the next claim copies
        # the file again (recovery re-queues a directory left without a copy meanwhile).
        drop_copy(claim.job_dir)
        crash_point("discard-before-decide")
        error = RunError(seal.UPLOAD_IN_PROGRESS, f"the submitted job file {problem}", True)
        due = self._clock.wall() + self._config.settle_seconds
        return self._finish(claim, base, REQUEUE, attempt=None, error=error, due=due)

    def _upload_went_on(self, claim: Claim, base: dict[str, Any]) -> str | None:
        """Before the job's first decision: why the run must be discarded (its submitted
        file was still being appended to), or None. Capped: after MAX_UPLOAD_DISCARDS the
        job decides from its copy, and its record says what was seen."""
        if claim.sealed or claim.job_file is None:
            return None
        problem = continued_append(claim.job_dir, claim.job_file, self._config.max_job_bytes, uncached=self._uncached)
        if problem is None:
            return None
        others = others_may_write(claim.job_dir, claim.submitted_owner)
        if others is not None:
            # Not necessarily the submitter's upload: another user's append must not be
            # copied by a re-claim (nor discard the run). Decided from the copy.
            base["details"][seal.SUBMITTED_NOTE_KEY] = (
                f"the submitted job file {problem}, but it {others}: not taken as an upload "
                f"in progress; rendered from the copy made at the claim ({claim.job_file.short()})"
            )
            return None
        if seal.upload_discards(read_runs(claim.job_dir)) < defaults.MAX_UPLOAD_DISCARDS:
            return problem
        base["details"][seal.SUBMITTED_NOTE_KEY] = (
            f"the submitted job file {problem}; rendered from the copy made at the claim "
            f"({claim.job_file.short()}) after {defaults.MAX_UPLOAD_DISCARDS} discarded runs"
        )
        return None

    def _finish(
        self, claim: Claim, base: dict[str, Any], outcome: str, *, error: RunError | None = None, **fields: Any
    ) -> RunEnd:
        if outcome != REQUEUE:
            problem = self._upload_went_on(claim, base)
            if problem is not None:
                return self._discard(claim, base, problem)
        recorded = None if error is None else error.to_record()
        record = RunRecord(**{**base, "outcome": outcome, "ended": self._clock.wall(), "error": recorded, **fields})
        offset = None if self._spool_clock is None else self._spool_clock.offset()
        if offset is not None:
            # Both clocks: ``started``/``ended``/``due`` are this host's; minus this, the spool's.
            record = replace(record, details={**record.details, CLOCK_OFFSET_KEY: round(offset, 3)})
        encoded = record.to_json()
        try:
            won = self._spool_write(
                claim,
                f"recording run {claim.run} of job {claim.job_id}",
                lambda: decide(claim.job_dir, record, claim.file_mode(), encoded=encoded),
            )
        except FileNotFoundError:
            won = False
        except OSError:
            # Not known to be decided, yet the record may be on disk all the same (a link
            # that reported an error below a GlusterFS quorum): whoever recovers the job may
            # find it and roll it forward, which needs the verified output. An orphan's
            # scratch is the sweep's (recovery.Recoverer.sweep).
            claim.keep_scratch = claim.keep_scratch or outcome == PUBLISHING
            raise
        self._cache.decided(won and outcome == PUBLISHING)  # a staged render becomes an entry only now
        if not won:
            return self._lost(claim)
        claim.decided = True
        crash_point("after-decide")
        # Decided: stop beating before the directory moves (a recoverer that finds the
        # job silent from now on can only carry out this same decision).
        self._heartbeat.remove(claim.token)
        # A first run's record is the job's only one: its claim found no run file (a new
        # directory, or a retry/ entry without any, whose run number would be higher), and
        # only a recoverer could add one, after moving the directory away (then the move
        # below fails). What the move would read back is what this run just wrote.
        runs = [as_read_back(encoded)] if claim.run == 1 else None
        end = RunEnd(
            state=_STATE_OF[outcome],
            outcome=_METRIC_OF[outcome],
            attempts=None if record.attempt is None else record.attempt,
            duration=None if record.started is None else record.ended - record.started,
            error_kind=None if error is None else error.kind,
            error_message=None if error is None else error.message,
            warnings=tuple(str(w) for w in record.details.get(WARNINGS_KEY) or ()),
        )
        try:
            target = self._spool_write(
                claim,
                f"moving job {claim.job_id} to {_STATE_OF[outcome]}/",
                lambda: carry_out(
                    self._layout, self._config.output_root, claim.job_dir, claim.job_id, claim.uid, record,
                    self._config.hooks, chunk_entry=claim.chunk_entry, file_mode=claim.file_mode(),
                    claim_token=claim.token, runs=runs,
                ),
            )  # fmt: skip
        except FileNotFoundError:
            # Decided by us, moved by a recoverer who judged us dead meanwhile and carried
            # out our own decision (roll forward): the job is where we sent it.
            log.info("job %s: moved by another runner after this one decided it", claim.job_id)
            return end
        except OSError:
            # Decided but not carried out (the spool or output filesystem failed). Whoever
            # recovers the job rolls the decision forward, and a verified output must
            # still be there to publish: keep the scratch.
            claim.keep_scratch = outcome == PUBLISHING
            raise
        log_transition(
            log, claim.job_id, JobState.RUNNING, target.parent.name,
            run=claim.run, attempt=record.attempt,
            duration=None if end.duration is None else round(end.duration, 3),
            kind=None if error is None else error.kind, reason=None if error is None else error.message,
        )  # fmt: skip
        return replace(end, state=target.parent.name)

    def _lost(self, claim: Claim) -> RunEnd:
        decided = None
        with contextlib.suppress(OSError):
            decided = read_run(claim.job_dir, claim.run)
        log.warning(
            "job %s: another runner took it over while this runner worked on it (%s); "
            "discarding this run's output",
            claim.job_id, f"run decided as {decided.outcome}" if decided else "its directory moved",
        )  # fmt: skip
        return RunEnd("lost", "lost", None, None)

    def _progress(self, token: str) -> Callable[..., None]:
        def report(fraction: float | None, stage: str | None = None) -> None:
            self._heartbeat.set_progress(token, fraction, stage)

        return report


def _base(claim: Claim, attempt: int | None) -> dict[str, Any]:
    """The fields every record of this run shares."""
    return {
        "run": claim.run,
        "host": HOSTNAME,
        "pid": os.getpid(),
        "token": claim.token,
        "started": claim.started,
        "attempt": attempt,
    }


def _filled_it(trouble: OSError) -> str:
    """Why a run that filled its disk itself (spool_io.filled_by_run) used an attempt."""
    where = f"the filesystem of {trouble.filename}" if trouble.filename else "their filesystem"
    return f"this run's own files filled {where}"


def _cancel_request(job_dir: Path) -> str | None:
    """The text of a `spoolrender cancel` request for this job, if there is one."""
    try:
        text = (job_dir / defaults.CANCEL_FILENAME).read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return None
    return text or "cancelled"
