"""Carrying out a decided run: moving the job directory to retry/, failed/ or done/.

Only whoever won a run's record (see :mod:`spoolrender.spool.records`) calls these, and a
recoverer that finds a decided run whose owner died calls the same functions, so a crash
at any point between "decided" and "moved" is finished by the next runner that looks
(roll forward, as a database replays its log). Each step is idempotent for that reason.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from pathlib import Path, PurePosixPath
from typing import Any

from spoolrender import defaults
from spoolrender.chunks.ledger import is_chunk_entry
from spoolrender.chunks.moves import decided_at, discard_chunks, finish_chunk, move_to_split
from spoolrender.config.hooks import HookSpec
from spoolrender.core.failpoints import crash_point
from spoolrender.core.run_error import RunError
from spoolrender.core.vocabulary import FailureKind
from spoolrender.errors import PublishError
from spoolrender.hooks.plan import plan_hooks
from spoolrender.lifecycle.rerun import last_published, refusal_for
from spoolrender.render_cache.entries import RESULT_FIELDS as CACHE_FIELDS
from spoolrender.spool.chunk_names import is_chunk_name, ledger_dir
from spoolrender.spool.durable import rename_durable, write_json_atomic
from spoolrender.spool.heartbeat import HOSTNAME, heartbeat_path, lock_path
from spoolrender.spool.ids import release_id
from spoolrender.spool.io_trouble import is_spool_io
from spoolrender.spool.job_file_modes import private_file_mode
from spoolrender.spool.layout import SpoolLayout, final_name, retry_name
from spoolrender.spool.output_index import record_publish
from spoolrender.spool.publish import Published, RenderedFile, publish_output
from spoolrender.spool.records import (
    FAILED,
    PUBLISHING,
    REQUEUE,
    RESET,
    RETRY,
    RUNNER_DIED,
    SPLIT,
    RunRecord,
    attempts_used,
    decide,
    read_run,
    read_runs,
)

log = logging.getLogger(__name__)

Hooks = dict[str, HookSpec] | None


def log_transition(logger: logging.Logger, job_id: str, src: str, dst: str, **fields: Any) -> None:
    """One line per state change, with the fields also attached for ``--log-format json``."""
    shown = {k: v for k, v in fields.items() if v is not None}
    detail = " ".join(f"{k}={json.dumps(v) if isinstance(v, str) and ' ' in v else v}" for k, v in shown.items())
    event = {"job": job_id, "from": src, "to": dst, "host": HOSTNAME, **shown}
    logger.info("job %s: %s -> %s %s", job_id, src, dst, detail, extra={"event": event})


def _drop_heartbeat(job_dir: Path, claim_token: str | None) -> None:
    """Remove the heartbeat and lock of the caller's own claim ``claim_token`` from the moved
    ``job_dir``; None (a recoverer carrying out a dead claim's run) removes none of its names.

    Only running/ entries have a meaningful heartbeat and lock; the caller's own are
    removed, since nobody else may: every other claim's names are left where they are
    (spool/heartbeat.py's docstring). Their owner may be frozen in the middle of writing them, and
    on GlusterFS an unlink of such a name waits for as long as it stays frozen. Left, they
    travel with the job under a token no later claim has, and nothing reads them. Unlinking
    our own lock file is safe: nobody else ever locks that name, and its flock lives on
    the inode until released.

    An older version's ``heartbeat`` is removed by whoever moves the job, as those versions did
    (so a frozen older runner's lock on it is no new wait): older runners judge every
    claim by that name alone, and one left here would stand, never changing, for the
    job's next claim, which they would then recover a lease later, live.
    """
    with contextlib.suppress(OSError):
        (job_dir / defaults.HEARTBEAT_FILENAME).unlink()
    if claim_token is None:
        return
    for path in (heartbeat_path(job_dir, claim_token), lock_path(job_dir, claim_token)):
        with contextlib.suppress(OSError):
            path.unlink()


def attempt_hosts(runs: list[RunRecord]) -> list[dict[str, Any]]:
    """Where every attempt ran, in order: ``{"attempt", "host", "outcome", "kind"}`` (retry
    elsewhere). A ``runner-died`` attempt's record is written by the host that recovered it
    (``recovered_by``); its ``host`` is the one it ran and died on, from the dead owner's
    heartbeat (None if it died before its first heartbeat)."""
    hosts = []
    for r in runs:
        if r.attempt is None:
            continue
        kind = (r.error or {}).get("kind")
        item = {"attempt": r.attempt, "host": r.host, "outcome": r.outcome, "kind": kind}
        if kind == RUNNER_DIED:
            item["host"] = r.details.get("ran_on")
            item["recovered_by"] = r.host
        hosts.append(item)
    return hosts


def retry_due(job_dir: Path, record: RunRecord) -> float:
    """When a RETRY/REQUEUE decision is due, on the spool filesystem's clock.

    The decider chose a delay (``due - ended``, both read from its own wall clock a moment
    apart, so its offset cancels); it runs from the decision's time by the spool's clock
    (the record file's mtime). Every host, whatever its own clock says, then sees the same
    due time, and a recoverer rolling the decision forward names the entry alike.
    """
    delay = 0.0 if record.due is None else max(0.0, record.due - record.ended)
    return decided_at(job_dir, record) + delay


def move_to_retry(
    layout: SpoolLayout,
    job_dir: Path,
    job_id: str,
    uid: str,
    record: RunRecord,
    hooks: Hooks = None,
    *,
    claim_token: str | None = None,
) -> Path:
    due = retry_due(job_dir, record)
    priority = int(record.details.get("priority", defaults.DEFAULT_PRIORITY))
    target = layout.retry / retry_name(job_id, uid, due, priority)
    if record.outcome == RETRY and hooks:  # a requeue after a shutdown is no failure: no hook
        retry = {
            "id": job_id, "uid": uid, "run": record.run, "attempt": record.attempt, "host": record.host,
            "error": record.error, "due": due, "details": record.details,
        }  # fmt: skip
        plan_hooks(layout, hooks, job_dir, job_id, uid, record.run, "retry", retry)
    rename_durable(job_dir, target)
    _drop_heartbeat(target, claim_token)
    return target


def move_to_failed(
    layout: SpoolLayout,
    job_dir: Path,
    job_id: str,
    uid: str,
    record: RunRecord,
    hooks: Hooks = None,
    file_mode: int | None = None,
    *,
    claim_token: str | None = None,
    runs: list[RunRecord] | None = None,
) -> Path:
    runs = read_runs(job_dir) if runs is None else runs
    error = record.error or {}
    failure = {
        "id": job_id,
        "uid": uid,
        "reason": error.get("message", "failed"),
        "kind": error.get("kind", FailureKind.ERROR),
        "attempts": attempts_used(runs),
        "failed_at": record.ended,
        "host": record.host,
        "attempt_hosts": attempt_hosts(runs),
        "runs": [r.__dict__ for r in runs],
    }
    # Written before the move: failed/ entries are complete the moment they appear. No more
    # readable than the job: its reason quotes what the render printed (spool/job_file_modes.py).
    mode = private_file_mode(job_dir) if file_mode is None else file_mode
    write_json_atomic(job_dir / defaults.FAILURE_FILENAME, failure, mode=mode)
    if hooks:
        plan_hooks(layout, hooks, job_dir, job_id, uid, record.run, "failed", failure)
    target = layout.failed / final_name(job_id, uid)
    rename_durable(job_dir, target)
    _drop_heartbeat(target, claim_token)
    release_id(layout, job_id, uid)
    return target


def complete_publish(
    layout: SpoolLayout,
    output_root: Path,
    job_dir: Path,
    job_id: str,
    uid: str,
    record: RunRecord,
    hooks: Hooks = None,
    file_mode: int | None = None,
    *,
    claim_token: str | None = None,
    runs: list[RunRecord] | None = None,
) -> Path:
    """Publish the verified output named in a PUBLISHING record, then move the job to done/.
    ``file_mode``: result.json's (job_file_modes.private_file_mode), if the caller knows it;
    ``claim_token``: the caller's own claim, whose heartbeat and lock go (_drop_heartbeat);
    ``runs``: the job's run records as read_runs would read them now, if the caller knows
    them (carry_out)."""
    info = record.publish or {}
    # ``temp`` is relative to the output root (absolute in records of older versions):
    # joined with *our* output root, it works on a host that mounts it elsewhere.
    rel = PurePosixPath(info["output"])
    published: Published = publish_output(
        output_root,
        rel,
        output_root / info["temp"],
        replace=bool(info.get("replace")),
        expect=RenderedFile.recorded(info),
        # A re-run replaces only the output its own id published last (spoolrender.lifecycle.rerun).
        may_replace=lambda st: refusal_for(st, last_published(layout, job_id, rel), rel, job_id),
    )
    # Who published the name last, for a later rerun: written before the done/ move, so a
    # crash in between is carried out again by recovery (spoolrender.spool.output_index).
    record_publish(layout, rel, job_id, uid, published.file)
    crash_point("after-publish")
    runs = read_runs(job_dir) if runs is None else runs
    # A job rendered in chunks took from its split to its join's end, not the join alone;
    # a split before the last `spoolrender retry` (RESET) belongs to an earlier try.
    since_reset = runs[max((i + 1 for i, r in enumerate(runs) if r.outcome == RESET), default=0) :]
    splits = [r.started for r in since_reset if r.outcome == SPLIT and r.started is not None]
    started = splits[-1] if splits and record.started is not None else record.started
    result = {
        "id": job_id,
        "uid": uid,
        "output": str(published.path),
        "bytes": published.bytes,
        "attempts": attempts_used(runs),
        "host": record.host,
        "attempt_hosts": attempt_hosts(runs),
        "started": started,
        "finished": record.ended,
        "duration_seconds": None if started is None else round(record.ended - started, 3),
        "details": record.details,
        "runs": [r.__dict__ for r in runs],
        # The render cache, when the job used it: hit (and from which job), miss or stored.
        **{k: record.details[k] for k in CACHE_FIELDS if k in record.details},
    }
    # Its runs quote earlier attempts' errors: no more readable than the job either.
    mode = private_file_mode(job_dir) if file_mode is None else file_mode
    write_json_atomic(job_dir / defaults.RESULT_FILENAME, result, mode=mode)
    if hooks:
        plan_hooks(layout, hooks, job_dir, job_id, uid, record.run, "done", result)
    target = layout.done / final_name(job_id, uid)
    rename_durable(job_dir, target)
    _drop_heartbeat(target, claim_token)
    return target


def carry_out(
    layout: SpoolLayout,
    output_root: Path,
    job_dir: Path,
    job_id: str,
    uid: str,
    record: RunRecord,
    hooks: Hooks = None,
    *,
    chunk_entry: bool | None = None,
    file_mode: int | None = None,
    claim_token: str | None = None,
    runs: list[RunRecord] | None = None,
) -> Path:
    """Move the job where its decided ``record`` says; returns the new directory.

    ``hooks`` (the spool's completion hooks) are planned before the move (see hook_plan).
    A chunk of a split job (spoolrender.chunks) ends in its job's ledger instead, and
    fires no hook: the job it belongs to does, once. The run's owner passes what it knows
    already, saving a look each: ``chunk_entry`` (is it a chunk entry, ledger.is_chunk_entry)
    and ``file_mode`` (its outcome file's mode, job_file_modes.private_file_mode), and
    ``claim_token``, its own claim's: that claim's heartbeat and lock are removed from the
    moved directory. A recoverer passes none, and no file of the dead claim is touched
    (_drop_heartbeat). ``runs``: every run record of the job, ``record`` last, exactly as
    read_runs would read them (the owner of a first run, which has just written the only
    one: no listing and no read-back of its own record, P2 in bench/README.md).
    """
    if is_chunk_name(job_id) or (is_chunk_entry(job_dir) if chunk_entry is None else chunk_entry):
        if record.outcome in (PUBLISHING, FAILED):
            return finish_chunk(layout, output_root, job_dir, record)
        hooks = None
    if record.outcome in (RETRY, REQUEUE):
        return move_to_retry(layout, job_dir, job_id, uid, record, hooks, claim_token=claim_token)
    if record.outcome == SPLIT:
        target = move_to_split(layout, output_root, job_dir, job_id, uid, record)
        _drop_heartbeat(target, claim_token)
        return target
    if record.outcome == FAILED:
        target = move_to_failed(
            layout, job_dir, job_id, uid, record, hooks, file_mode, claim_token=claim_token, runs=runs
        )
        _end_chunks(layout, output_root, job_id, uid)
        return target
    if record.outcome == PUBLISHING:
        return _publish_or_fail(layout, output_root, job_dir, job_id, uid, record, hooks, file_mode, claim_token, runs)
    raise ValueError(f"cannot carry out outcome {record.outcome!r}")


def _publish_or_fail(
    layout: SpoolLayout,
    output_root: Path,
    job_dir: Path,
    job_id: str,
    uid: str,
    record: RunRecord,
    hooks: Hooks,
    file_mode: int | None,
    claim_token: str | None,
    runs: list[RunRecord] | None,
) -> Path:
    """Carry out a PUBLISHING ``record`` (carry_out's arguments): done/, or, if its output
    cannot be put in place, failed/ by a follow-up record."""
    try:
        target = complete_publish(
            layout, output_root, job_dir, job_id, uid, record, hooks, file_mode, claim_token=claim_token, runs=runs
        )
        _end_chunks(layout, output_root, job_id, uid)
        return target
    except PublishError as exc:
        if is_spool_io(exc.__cause__):
            # A full (or read-only...) output filesystem passes: the decision is tried
            # again (spool/io_trouble.py), never turned into a failure of the job.
            raise exc.__cause__  # noqa: B904 - the OSError itself is what callers handle
        # The run was decided as a success but its output cannot be put in place (a
        # name taken meanwhile, a symlink planted in the output tree, disk trouble).
        # A follow-up record fails the job with the reason instead of looping here;
        # `spoolrender retry` sends it round again once the operator has looked.
        log.warning("job %s: publishing failed: %s", job_id, exc)
        follow = RunRecord(
            run=record.run + 1,
            outcome=FAILED,
            host=HOSTNAME,
            pid=os.getpid(),
            token=record.token,
            started=record.ended,
            ended=time.time(),
            error=RunError(exc.kind or FailureKind.PUBLISH, f"rendered, but not published: {exc}", False).to_record(),
            details=record.details,
        )
        if not decide(job_dir, follow):
            decided = read_run(job_dir, follow.run)
            if decided is None:
                raise
            follow = decided
        return carry_out(
            layout, output_root, job_dir, job_id, uid, follow, hooks, file_mode=file_mode, claim_token=claim_token
        )


def _end_chunks(layout: SpoolLayout, output_root: Path, job_id: str, uid: str) -> None:
    """A job that was split has ended: its chunk files and entries are not needed any more
    (a crash before this leaves them to the sweep, spoolrender.chunks.sweep)."""
    key = final_name(job_id, uid)
    if os.path.lexists(ledger_dir(layout, key)):
        discard_chunks(layout, output_root, key)
