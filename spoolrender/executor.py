"""Running one claimed job from start to its next state: the life of one run.

validate -> reserve id -> render into scratch -> verify -> decide -> publish -> done/
and on the way: permanent errors to failed/, transient ones to retry/ with backoff,
shutdown back to retry/ without using an attempt, and a lost job (recovered elsewhere
while we worked) simply dropped, its scratch output deleted, never published.
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import shutil
import threading
from collections.abc import Callable
from typing import Any

from spoolrender import defaults
from spoolrender.claim import Claim
from spoolrender.clock import Clock
from spoolrender.config import SpoolConfig
from spoolrender.errors import JobInvalid, PublishError, RenderCancelled, RenderError
from spoolrender.heartbeat import HOSTNAME, HeartbeatWriter
from spoolrender.ids import reserve_id
from spoolrender.jobfile import JobSpec, parse_job, read_job_bytes
from spoolrender.layout import SpoolLayout
from spoolrender.publish import fsync_file, output_exists, remove_scratch, scratch_dir
from spoolrender.records import (
    FAILED,
    PUBLISHING,
    REQUEUE,
    RETRY,
    RunRecord,
    attempts_used,
    decide,
    log_path,
    read_run,
    read_runs,
)
from spoolrender.renderers.base import Renderer, RenderRequest
from spoolrender.transitions import backoff_delay, carry_out

log = logging.getLogger(__name__)

RendererFactory = Callable[[str], Renderer]


class JobExecutor:
    """Runs claimed jobs for one slot; owns that slot's renderers (kept warm)."""

    def __init__(
        self,
        layout: SpoolLayout,
        config: SpoolConfig,
        clock: Clock,
        rng: random.Random,
        heartbeat: HeartbeatWriter,
        make_renderer: RendererFactory,
        threads: int,
    ) -> None:
        self._layout = layout
        self._config = config
        self._clock = clock
        self._rng = rng
        self._heartbeat = heartbeat
        self._make_renderer = make_renderer
        self._threads = threads
        self._renderers: dict[str, Renderer] = {}

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

    def execute(self, claim: Claim) -> str:
        """Run ``claim`` to its next state; returns that state (or ``lost``)."""
        try:
            return self._execute(claim)
        finally:
            self._heartbeat.remove(claim.token)
            claim.release()
            remove_scratch(self._config.output_root, claim.key)

    def _execute(self, claim: Claim) -> str:
        job_dir = claim.job_dir
        runs = read_runs(job_dir)
        attempt = attempts_used(runs) + 1
        base: dict[str, Any] = {
            "run": claim.run,
            "host": HOSTNAME,
            "pid": os.getpid(),
            "token": claim.token,
            "started": claim.started,
            "attempt": attempt,
        }
        try:
            spec = parse_job(
                read_job_bytes(job_dir / defaults.JOB_FILENAME, self._config.max_job_bytes),
                claim.source_name,
                self._config,
            )
        except JobInvalid as exc:
            return self._finish(
                claim, base, FAILED, error=_error("invalid-job", "; ".join(exc.problems), False)
            )
        base["details"] = {"priority": spec.priority, "output": str(spec.output), "renderer": spec.renderer}
        if attempt > spec.max_attempts:
            return self._finish(
                claim,
                base,
                FAILED,
                error=_error(
                    "attempts-exhausted",
                    f"no attempts left ({attempt - 1} of {spec.max_attempts} used)",
                    False,
                ),
            )
        try:
            reserve_id(self._layout, spec.id, claim.uid, rerun=spec.rerun)
            if not spec.rerun and output_exists(self._config.output_root, spec.output):
                raise JobInvalid(
                    [
                        f"field 'output': {str(spec.output)!r} already exists under the output root; "
                        "choose another output or set rerun: true to replace it"
                    ]
                )
        except JobInvalid as exc:
            return self._finish(
                claim, base, FAILED, error=_error("invalid-job", "; ".join(exc.problems), False)
            )
        except PublishError as exc:
            return self._failure(claim, base, spec, attempt, _error("output", str(exc), exc.transient))
        return self._render(claim, base, spec, attempt)

    def _render(self, claim: Claim, base: dict[str, Any], spec: JobSpec, attempt: int) -> str:
        scratch = scratch_dir(self._config.output_root, claim.key)
        props, settings, fallback_used = spec.settings_for_attempt(attempt)
        request = RenderRequest(
            spec=spec,
            job_file=claim.job_dir / defaults.JOB_FILENAME,
            output=scratch / ("output" + (spec.output.suffix or defaults.DEFAULT_OUTPUT_SUFFIX)),
            work_dir=scratch,
            log=log_path(claim.job_dir, claim.run),
            threads=self._threads,
            attempt=attempt,
            props=props,
            settings=settings,
            on_spawn=lambda pgid: self._heartbeat.set_pgid(claim.token, pgid),
        )
        if fallback_used:
            base["details"]["fallback_used"] = True
        timer = threading.Timer(spec.timeout, claim.cancel.cancel, args=("timeout",))
        timer.daemon = True
        try:
            shutil.rmtree(scratch, ignore_errors=True)
            scratch.mkdir(parents=True)
            renderer = self._renderer(spec.renderer)
            timer.start()
            result = renderer.render(request, self._progress(claim.token), claim.cancel)
            if claim.cancel.is_set():
                raise RenderCancelled(claim.cancel.reason or "cancelled")
            renderer.verify(request, result)
        except RenderCancelled:
            reason = claim.cancel.reason or "cancelled"
            if reason == "timeout":
                return self._failure(
                    claim, base, spec, attempt, _error("timeout", f"timed out after {spec.timeout:g} s", True)
                )
            if reason == "shutdown":
                return self._finish(claim, base, REQUEUE, due=self._clock.wall(), attempt=None)
            if reason == "lost":
                return self._lost(claim)
            return self._finish(
                claim, base, FAILED, error=_error("cancelled", f"cancelled ({reason})", False)
            )
        except RenderError as exc:
            return self._failure(claim, base, spec, attempt, _error(exc.kind, exc.message, exc.transient))
        except OSError as exc:
            return self._failure(claim, base, spec, attempt, _error("io", f"{exc.strerror or exc}", True))
        finally:
            timer.cancel()
        st = request.output.stat()
        base["details"].update(result.details)
        publish = {
            "temp": str(request.output),
            "output": str(spec.output),
            "replace": spec.rerun,
            "bytes": st.st_size,
            "inode": st.st_ino,
        }
        # Data first, then the decision: a power cut after "publishing" was recorded must
        # find a complete file to publish (see durable.py).
        fsync_file(request.output)
        return self._finish(claim, base, PUBLISHING, publish=publish)

    def _failure(
        self, claim: Claim, base: dict[str, Any], spec: JobSpec, attempt: int, error: dict[str, Any]
    ) -> str:
        if error["transient"] and attempt < spec.max_attempts:
            delay = backoff_delay(
                attempt, self._config.backoff_base_seconds, self._config.backoff_cap_seconds, self._rng
            )
            return self._finish(claim, base, RETRY, error=error, due=self._clock.wall() + delay)
        if error["transient"]:
            error = {
                **error,
                "message": f"{error['message']} (attempt {attempt} of {spec.max_attempts}, none left)",
            }
        return self._finish(claim, base, FAILED, error=error)

    def _finish(self, claim: Claim, base: dict[str, Any], outcome: str, **fields: Any) -> str:
        record = RunRecord(**{**base, "outcome": outcome, "ended": self._clock.wall(), **fields})
        try:
            won = decide(claim.job_dir, record)
        except FileNotFoundError:
            won = False
        if not won:
            return self._lost(claim)
        # Decided: stop beating before the directory moves (a recoverer that finds the
        # job silent from now on can only carry out this same decision).
        self._heartbeat.remove(claim.token)
        try:
            target = carry_out(
                self._layout, self._config.output_root, claim.job_dir, claim.job_id, claim.uid, record
            )
        except FileNotFoundError:
            # Decided by us, moved by a recoverer who judged us dead meanwhile and carried
            # out our own decision (roll forward): the job is where we sent it.
            log.info("job %s: moved by another runner after this one decided it", claim.job_id)
            return outcome
        state = target.parent.name
        err = record.error or {}
        log.info(
            "job %s: running -> %s (run %d, attempt %s%s)",
            claim.job_id, state, claim.run, record.attempt,
            f", {err.get('kind')}: {err.get('message')}" if err else "",
        )  # fmt: skip
        return state

    def _lost(self, claim: Claim) -> str:
        decided = None
        with contextlib.suppress(OSError):
            decided = read_run(claim.job_dir, claim.run)
        log.warning(
            "job %s: another runner took it over while this runner worked on it (%s); "
            "discarding this run's output",
            claim.job_id, f"run decided as {decided.outcome}" if decided else "its directory moved",
        )  # fmt: skip
        return "lost"

    def _progress(self, token: str) -> Callable[..., None]:
        def report(fraction: float | None, stage: str | None = None) -> None:
            self._heartbeat.set_progress(token, fraction, stage)

        return report


def _error(kind: str, message: str, transient: bool) -> dict[str, Any]:
    # The first line is what `status` and failure.json show; keep it short and useful.
    return {"kind": kind, "message": message, "transient": transient}
