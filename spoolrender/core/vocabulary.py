"""The spool's vocabulary: job states, run outcomes, cancel reasons and failure kinds.

Every value is exactly the string spoolrender has always written to disk (state directory
names, ``outcome`` and ``error.kind`` in run records, ``kind`` in failure records) or
compared in memory, so records written by any older version stay valid. The members are
``enum.StrEnum``: equal to, hashed as and formatted as their plain string, so a member and
the string read back from an old record compare equal, and ``json.dumps`` writes the value.
``yaml.safe_dump`` refuses str subclasses: convert with ``str(member)`` before YAML.

Records are read back as plain ``str``, never converted to these enums: a record may hold a
kind no member names (from a command renderer, a future worker, an older or newer version).
``RenderError.kind`` therefore stays ``str``; :data:`FailureKind` lists the kinds spoolrender
itself and its Node worker (``spoolrender/renderers/remotion/worker/*.mjs``) report.

This module imports nothing from the package, so any module may import it.
"""

from __future__ import annotations

import enum


class JobState(enum.StrEnum):
    """A spool state directory: where a job is (spoolrender.spool.layout, defaults.STATE_DIRS)."""

    INCOMING = "incoming"  # dropped, not claimed yet
    RUNNING = "running"  # claimed by a runner: its private copy renders
    RETRY = "retry"  # waiting for its due time (after a transient failure or a requeue)
    DONE = "done"  # output published
    FAILED = "failed"  # failed for good (permanent failure, attempts used up, cancelled)
    SPLIT = "split"  # rendered in chunks: waits until they are done (optional directory)


class RunOutcome(enum.StrEnum):
    """A run record's ``outcome``: where the run sends the job (spoolrender.spool.records)."""

    PUBLISHING = "publishing"  # output verified; publish it, then done/
    RETRY = "retry"  # transient failure with attempts left
    FAILED = "failed"  # permanent failure, or attempts exhausted
    REQUEUE = "requeue"  # stopped by shutdown (or the spool's filesystem): back to retry/, no attempt used
    RESET = "reset"  # `spoolrender retry`: attempts start again from here
    SPLIT = "split"  # rendered in chunks: wait in split/ until they are done (spoolrender.chunks)


class CancelReason(enum.StrEnum):
    """Why a CancelToken was set (spoolrender.renderers.base); the first reason wins."""

    TIMEOUT = "timeout"  # the job's timeout passed: a transient failure of kind ``timeout``
    SHUTDOWN = "shutdown"  # the runner stops: the job is requeued, no attempt used
    LOST = "lost"  # another runner took the claim over (a stale heartbeat): nothing is recorded
    USER = "user"  # `spoolrender cancel`: the job fails for good, kind ``cancelled``


class FailureKind(enum.StrEnum):
    """An ``error.kind`` spoolrender or its Node worker records (transient: may be retried).

    Not closed: a command renderer or a future worker may report any other kind, which is
    passed through as a plain string. Two names look alike and mean different things:
    ``chunk-invalid`` (CHUNK_INVALID) is a chunk *output* found missing or corrupt when the
    chunks are joined (that chunk is rendered again); ``invalid-chunk`` (INVALID_CHUNK) is a
    chunk *job* whose chunk description cannot be read (the chunk run fails for good). Both
    strings are on disk in old records, so neither is renamed.
    """

    # --- decided by the runner (executor, chunks, recovery, control, publish) ---
    ERROR = "error"  # unclassified failure (RenderError's default; the worker's catch-all): transient
    INVALID_JOB = "invalid-job"  # the job file (or the entry) is not a valid job: permanent
    JOB_CHANGED = "job-changed"  # the job file changed after it was sealed (spoolrender.intake.seal): permanent
    UPLOAD_IN_PROGRESS = "upload-in-progress"  # the submitted job file is still being written: requeued
    ATTEMPTS_EXHAUSTED = "attempts-exhausted"  # claimed with no attempts left: permanent
    CANCELLED = "cancelled"  # an operator's `spoolrender cancel` (also the worker's report of it): permanent
    TIMEOUT = "timeout"  # the job's timeout passed: transient
    IO = "io"  # an OSError during the run that is not the spool's filesystem: transient
    SPOOL_IO = "spool-io"  # the spool's filesystem failed (full, read-only): requeued, bounded free requeues
    RUNNER_DIED = "runner-died"  # the owner died mid-run; recorded by the recoverer: transient
    CLAIM_ABANDONED = "claim-abandoned"  # the runner died or stalled before it started the job: requeued
    PUBLISH = "publish"  # rendered, but the publish failed (spool/publish.py's default): permanent
    OUTPUT = "output"  # the output path cannot be used, found before the render (a PublishError of no kind)
    RERUN_REFUSED = "rerun-refused"  # `rerun: true` whose output is not its own to replace: permanent
    UNTRUSTED_DIR = "untrusted-dir"  # a scratch directory another user may write, refused: transient
    FOREIGN_OUTPUT_TREE = "foreign-output-tree"  # a scratch tree another user made, not movable aside: permanent
    INVALID_CHUNK = "invalid-chunk"  # a chunk job's chunk description is unreadable: permanent (see above)
    CHUNK_ORPHANED = "chunk-orphaned"  # a chunk whose job has ended: not needed, failed without an attempt
    # --- reported by renderers (spoolrender.renderers, bundle_cache, compositions) ---
    CONFIG = "config"  # the spool config does not allow the render (command, split, join): permanent
    SETUP = "setup"  # the Remotion project cannot be set up (also the worker's): permanent
    BUNDLE = "bundle"  # bundling the Remotion project failed or waited too long: transient
    COMPOSITIONS = "compositions"  # listing the compositions failed: transient
    WORKER = "worker"  # the Remotion worker could not start or answer: transient
    WORKER_DIED = "worker-died"  # the Remotion worker died during the render: transient
    KILLED = "killed"  # a signal from outside ended the render (operator, OOM killer): transient, not the host's fault
    OUT_OF_MEMORY = "out-of-memory"  # ran out of memory (also the worker's): transient, retried at concurrency 1
    TOO_LARGE = "too-large"  # the output went over the spool's size cap: permanent
    VERIFY = "verify"  # the output (or a join) failed its check: transient
    NO_OUTPUT = "no-output"  # a command reported success but wrote no (or an empty) output: transient
    COMMAND_EXIT = "command-exit"  # a command exited non-zero: transient unless a sysexits code (not EX_TEMPFAIL)
    CHUNK_PLAN = "chunk-plan"  # the job cannot be split or its chunks joined as planned: permanent
    CHUNK_INVALID = "chunk-invalid"  # a chunk output is missing or corrupt at the join: transient (see above)
    FAKE_HANG = "fake-hang"  # spoolrender.testing's FakeRenderer hung and was never cancelled: transient
    # --- reported by the Node worker (spoolrender/renderers/remotion/worker/errors.mjs, render.mjs, render-worker.mjs)
    INVALID_SETTINGS = "invalid-settings"  # settings Remotion refuses (also a still in chunks): permanent
    INVALID_PROPS = "invalid-props"  # props fail the composition's schema: permanent
    COMPOSITION_NOT_FOUND = "composition-not-found"  # no composition with that id: permanent
    COMPONENT_ERROR = "component-error"  # the composition's code threw: permanent
    NO_WEBGL = "no-webgl"  # no WebGL context with the job's gl backend on this host: permanent
    NO_SPACE = "no-space"  # ENOSPC while rendering: transient
    BROWSER_CRASHED = "browser-crashed"  # the browser crashed or could not start: transient
    BUSY = "busy"  # the worker was sent a second render while busy (a protocol slip): transient


# Kinds the Node worker emits (spoolrender/renderers/remotion/worker/*.mjs), passed through by remotion.py.
WORKER_KINDS = frozenset(
    {
        FailureKind.ERROR,
        FailureKind.CANCELLED,
        FailureKind.SETUP,
        FailureKind.OUT_OF_MEMORY,
        FailureKind.INVALID_SETTINGS,
        FailureKind.INVALID_PROPS,
        FailureKind.COMPOSITION_NOT_FOUND,
        FailureKind.COMPONENT_ERROR,
        FailureKind.NO_WEBGL,
        FailureKind.NO_SPACE,
        FailureKind.BROWSER_CRASHED,
        FailureKind.BUSY,
    }
)


_KIND_VALUES = frozenset(k.value for k in FailureKind)


def is_known_kind(kind: object) -> bool:
    """Whether ``kind`` (as read back from a record: any JSON value) is a FailureKind's value;
    an unknown one is still valid (passed through), only not one spoolrender reports."""
    return isinstance(kind, str) and kind in _KIND_VALUES
