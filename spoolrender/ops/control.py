"""Commands that change the queue from outside a runner: retry, cancel, pause (purge:
:mod:`spoolrender.ops.purge`; submit: :mod:`spoolrender.ops.submission`)."""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Callable, Collection
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from spoolrender import defaults
from spoolrender.config.spool_config import SpoolConfig
from spoolrender.core.run_error import RunError
from spoolrender.core.vocabulary import FailureKind, JobState
from spoolrender.errors import JobInvalid, JobNotFound, SpoolrenderError
from spoolrender.jobfile import job_fields, read_job_bytes
from spoolrender.ops.id_hints import id_hint
from spoolrender.ops.lookup import Located, find_job, job_dir_of
from spoolrender.spool.clock import SystemClock, spool_time
from spoolrender.spool.durable import write_atomic
from spoolrender.spool.heartbeat import HOSTNAME
from spoolrender.spool.layout import (
    FINAL_NAME,
    RETRY_NAME,
    SpoolLayout,
    new_token,
    priority_from_key,
    retry_name,
)
from spoolrender.spool.records import FAILED, RESET, RunRecord, decide, next_run_number, read_runs, recorded_priority
from spoolrender.spool.spooldir import DirHandle, SpoolPathRefused

log = logging.getLogger(__name__)


def retry_all_failed(config: SpoolConfig) -> list[str]:
    """Send every failed job back to retry/ with fresh attempts; returns their ids."""
    return [change.entry.removeprefix("failed/").rsplit(".", 1)[0] for change in _reset_failed(config, None)]


@dataclass(frozen=True)
class RetryChange:
    """What ``retry`` did to one entry of a job, for people (``text``) and the HTTP API."""

    entry: str  # the entry as it was: "failed/<name>" or "retry/<name>"
    due: float  # when the job is due now (epoch seconds)
    text: str


def retry(config: SpoolConfig, job_id: str) -> list[RetryChange]:
    """``spoolrender retry ID`` (and the Python and HTTP APIs' retry): "try it again, as submitted".

    A failed job, cancelled ones included, goes back to retry/ with fresh attempts, due
    now; a cancel request is withdrawn with it (the retry is the operator's newer word).
    A job waiting in retry/ is made due now (its attempts are kept). Either way a job
    never runs before its ``not_before``: a scheduled job that was cancelled and retried
    waits for its time again, and retry does not move a schedule forward (submit the job
    with another not_before for that).
    """
    # retry/ first: a failed entry moved there below is due already.
    changes = make_due_now(config, job_id)
    changes += _reset_failed(config, job_id)
    if not changes:
        found = find_job(config, job_id)
        if not found:
            raise JobNotFound(job_id, f"no job with id {job_id!r}{id_hint(config.spool, job_id)}")
        states = ", ".join(sorted({w.state for w in found}))
        raise SpoolrenderError(f"job {job_id!r} is {states}: nothing to retry (only failed or retry-waiting jobs)")
    return changes


def _job_values(config: SpoolConfig, job_dir: Path) -> dict[str, Any]:
    """The validated fields of the job file in ``job_dir`` ({}: unreadable or invalid)."""
    try:
        data = read_job_bytes(job_dir / defaults.JOB_FILENAME, config.max_job_bytes)
        return job_fields(data, defaults.JOB_FILENAME, config).values
    except (OSError, JobInvalid):
        return {}


def _not_before(config: SpoolConfig, job_dir: Path, values: dict[str, Any] | None = None) -> float | None:
    """The ``not_before`` of the job file in ``job_dir`` (None: none, or unreadable)."""
    value = (_job_values(config, job_dir) if values is None else values).get("not_before")
    return float(value) if isinstance(value, int | float) else None


def job_priority(config: SpoolConfig, job_dir: Path, values: dict[str, Any] | None = None) -> int:
    """The priority of the job in ``job_dir``: as its runs recorded it, else its job file's
    (a job cancelled before any run read it; ``values``: its fields, read already), else
    the default."""
    priority = recorded_priority(read_runs(job_dir))
    if priority is not None:
        return priority
    value = (_job_values(config, job_dir) if values is None else values).get("priority")
    return int(value) if isinstance(value, int) else defaults.DEFAULT_PRIORITY


def _when(due: float, now: float, not_before: float | None) -> str:
    if not_before is not None and due == not_before and due > now:
        return f"due {utc_text(due)} (its not_before)"
    return "due now"


def utc_text(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def retry_entries(config: SpoolConfig, names: list[str]) -> list[RetryChange]:
    """Send the failed/ entries ``names`` back to retry/ with fresh attempts (`retry --kind`,
    `--queue`, `--all-failed` without the hopeless kinds: :mod:`spoolrender.cli.failed_select`)."""
    return _reset_failed(config, None, only=frozenset(names))


def _reset_failed(config: SpoolConfig, job_id: str | None, only: frozenset[str] | None = None) -> list[RetryChange]:
    """Entries in failed/ (one id's, or all, or those named in ``only``) moved back to
    retry/ with a reset record."""
    layout = SpoolLayout(config.spool)
    layout.check()
    # "Now" on the spool's clock, like every due time: read once (a probe file written and
    # stat'ed), not once per entry, so `retry --all-failed` costs one probe, not thousands.
    now = spool_time(layout.private, "retry")
    # Through descriptors (spoolrender.spool.spooldir): an entry is never followed anywhere.
    with DirHandle.open(layout.failed) as failed, DirHandle.open(layout.retry) as retry_dir:
        chosen = []
        for name in sorted(failed.names()):
            m = FINAL_NAME.fullmatch(name)
            if m is None or (job_id is not None and m.group("id") != job_id) or (only is not None and name not in only):
                continue
            chosen.append(m)

        def reset(m: re.Match[str]) -> RetryChange | None:
            try:
                with failed.sub(m.group(0)) as job:
                    return _reset_one(config, failed, job, retry_dir, m, now)
            except (FileNotFoundError, SpoolPathRefused):
                return None  # gone, or no job directory (never followed)

        # Each reset waits for four fsyncs (its record, the record's directory, both ends of
        # the move): one after another that is a journal commit each (45 ms here, 45 s for
        # `retry --all-failed` over 1,000). Jobs are independent (each one's reset is
        # decided exclusively in its own directory), so they are reset side by side and the
        # filesystem commits their fsyncs together; the order of a job's own steps is kept.
        if len(chosen) <= 1:
            changes = [reset(m) for m in chosen]
        else:
            with ThreadPoolExecutor(min(len(chosen), defaults.RETRY_RESET_THREADS)) as pool:
                changes = list(pool.map(reset, chosen))
    return [c for c in changes if c is not None]


def _reset_one(
    config: SpoolConfig, failed: DirHandle, job: DirHandle, retry_dir: DirHandle, m: re.Match[str], now: float
) -> RetryChange | None:
    name = m.group(0)
    job_dir = job.through  # the open directory itself, for the record readers and writers
    values = _job_values(config, job_dir)  # read once, for both
    priority = job_priority(config, job_dir, values)
    wall = time.time()
    not_before = _not_before(config, job_dir, values)
    due = max(now, not_before or now)
    # The cancel request goes first: a runner claiming the job from retry/ would fail
    # it as cancelled again at once. Withdrawn before the reset is decided, so a crash
    # in between leaves a failed job without it, which the next retry moves as usual.
    job.unlink_if_present(defaults.CANCEL_FILENAME)
    record = RunRecord(
        run=next_run_number(job_dir),
        outcome=RESET,
        host=HOSTNAME,
        pid=os.getpid(),
        token=new_token(),
        ended=wall,
        details={"by": "spoolrender retry"},
    )
    # The reset is recorded (exclusively) before the move, so a runner claiming the
    # job from retry/ already counts attempts from zero.
    if not decide(job_dir, record):
        return None  # another `retry` is doing this one
    try:
        failed.move(name, retry_dir, retry_name(m.group("id"), m.group("uid"), due, priority))
    except FileNotFoundError:
        return None
    text = f"failed/{name}: back to retry/, {_when(due, now, not_before)}, with fresh attempts"
    return RetryChange(f"failed/{name}", due, text)


def make_due_now(config: SpoolConfig, job_id: str) -> list[RetryChange]:
    """Make the retry/ entries of ``job_id`` due now (or at their ``not_before``, if later).

    The due time is only a part of the entry's name (the listing is the queue), so one
    rename within retry/ re-queues it: a runner that claims the old name first wins (our
    rename then finds nothing), and a runner listing afterwards sees a due entry; the
    rename into retry/ is also the event that wakes watching runners at once.
    """
    return _make_due(config, lambda m: m.group("id") == job_id)


def make_entries_due_now(config: SpoolConfig, names: Collection[str]) -> list[RetryChange]:
    """:func:`make_due_now` for the retry/ entries ``names`` (a bulk retry: one listing for all)."""
    wanted = frozenset(names)
    return _make_due(config, lambda m: m.group(0) in wanted)


def _make_due(config: SpoolConfig, chosen: Callable[[re.Match[str]], bool]) -> list[RetryChange]:
    layout = SpoolLayout(config.spool)
    layout.check()
    now = spool_time(layout.private, "retry")  # due times are on the spool's clock
    changed = []
    with DirHandle.open(layout.retry) as retry_dir:
        for name in sorted(retry_dir.names()):
            m = RETRY_NAME.fullmatch(name)
            if m is None or not chosen(m):
                continue
            try:
                change = _due_now(config, retry_dir, m, now)
            except (FileNotFoundError, SpoolPathRefused):
                continue  # claimed meanwhile (it is running now), or no job directory
            changed.append(change)
    return changed


def _due_now(config: SpoolConfig, retry_dir: DirHandle, m: re.Match[str], now: float) -> RetryChange:
    name, job_id = m.group(0), m.group("id")
    with retry_dir.sub(name) as job:
        # As for a failed job: a cancel request left in the entry (a cancelled split job
        # woken, a run that failed before it saw the cancel) would fail it again at once.
        job.unlink_if_present(defaults.CANCEL_FILENAME)
        not_before = _not_before(config, job.through)
    was_due = int(m.group("due")) / 1000
    due = max(now, not_before or now)
    if was_due <= due:
        already = "already due; the next runner to look claims it"
        if was_due > now and not_before is not None:
            already = f"not made due now: its not_before is {utc_text(not_before)} (retry never runs a job early)"
        return RetryChange(f"retry/{name}", was_due, f"retry/{name}: {already}")
    target = retry_name(job_id, m.group("uid"), due, priority_from_key(m.group("prio")))
    retry_dir.move(name, retry_dir, target)  # FileNotFoundError: claimed meanwhile
    text = f"retry/{name}: {_when(due, now, not_before)} (was due later), attempts kept"
    return RetryChange(f"retry/{name}", due, text)


# --- pause / resume ---------------------------------------------------------------------


def is_paused(layout: SpoolLayout) -> bool:
    return os.path.exists(layout.pause_marker)  # following a link, as Path.exists did


def pause(config: SpoolConfig, reason: str) -> Path:
    """Stop every runner on every host from claiming (running jobs go on)."""
    layout = SpoolLayout(config.spool)
    layout.check()
    marker = layout.private / defaults.PAUSE_FILENAME
    write_atomic(marker, f"{reason}\n".encode())
    return marker


def resume(config: SpoolConfig) -> bool:
    """Let runners claim again; False if the spool was not paused."""
    layout = SpoolLayout(config.spool)
    layout.check()
    try:
        (layout.private / defaults.PAUSE_FILENAME).unlink()
    except FileNotFoundError:
        return False
    return True


# --- cancel -----------------------------------------------------------------------------


def cancel(config: SpoolConfig, job_id: str, who: str) -> list[str]:
    """Cancel a job: waiting ones go to failed/ at once, a running one is stopped by its owner.

    A queued job is claimed like a runner would (so no runner can start it meanwhile) and
    failed as cancelled. For a running job a ``cancel`` file is written into its
    directory; the owning runner, on any host, sees it at its next heartbeat, stops the
    render and fails the job. Returns what was done, one line per job found.
    """
    done: list[str] = []
    for _ in range(5):  # a claim lost to a runner means the job is running now: look again
        pending = [
            w
            for w in find_job(config, job_id)
            if w.state in (JobState.INCOMING, JobState.RETRY, JobState.RUNNING, JobState.SPLIT)
        ]
        if not pending:
            break
        lost_race = False
        for where in pending:
            line = cancel_entry(config, where, who)
            if line is not None:
                done.append(line)
            # A split job is in retry/ now (or running): look again for it.
            lost_race = lost_race or line is None or where.state == JobState.SPLIT
        if not lost_race:
            break
    if not done:
        hint = "" if find_job(config, job_id, incoming=False) else id_hint(config.spool, job_id)
        raise SpoolrenderError(f"no queued or running job with id {job_id!r}{hint}")
    return done


def cancel_listed(config: SpoolConfig, where: Located, who: str) -> list[str]:
    """Cancel the one entry ``where`` as listed (a bulk cancel's plan), not every entry of
    its id; follow only the move the cancel itself makes (a split job woken into retry/).
    Empty: it moved on meanwhile (claimed, finished) and is left as it is."""
    line = cancel_entry(config, where, who)
    if line is None:
        return []
    done = [line]
    if where.state == JobState.SPLIT:
        woken = [
            w
            for w in find_job(config, where.job_id, incoming=False)
            if w.state == JobState.RETRY and w.uid == where.uid
        ]
        # Not there: a runner claimed it first and fails it as cancelled itself (the mark).
        done += [line for w in woken if (line := cancel_entry(config, w, who)) is not None]
    return done


def cancel_entry(config: SpoolConfig, where: Located, who: str) -> str | None:
    """One pass of :func:`cancel` over one entry: what was done, or None if it moved on
    meanwhile (gone, or claimed by a runner first)."""
    # Imported here: the claim and transition machinery (and renderers, filelock) would
    # add a tenth of a second to every `spoolrender submit` and `status` start.
    from spoolrender.chunks.moves import parent_priority, wake_parent
    from spoolrender.intake.claim import Candidate, claim
    from spoolrender.lifecycle.transitions import carry_out
    from spoolrender.spool.heartbeat import HeartbeatWriter

    layout = SpoolLayout(config.spool)
    clock = SystemClock()
    message = f"cancelled by {who}"
    if where.state == JobState.SPLIT:
        # Waiting for its chunks: marked, then woken into retry/, where the next pass
        # claims and fails it like any queued job (its chunks stop then).
        try:
            priority = _mark_cancelled(where, message, parent_priority)
        except (FileNotFoundError, NotADirectoryError, SpoolPathRefused):
            return None  # woken meanwhile
        wake_parent(layout, where.name, priority, spool_time(layout.private, "cancel"))
        # A runner that claims it first fails it as cancelled itself, else the next pass
        # does; either way its chunks are stopped when it fails.
        return f"{where.entry}: cancel marked; its chunks stop when it is failed"
    if where.state == JobState.RUNNING:
        try:
            _mark_cancelled(where, message)
        except (FileNotFoundError, NotADirectoryError, SpoolPathRefused):
            return None  # it just moved on
        return f"{where.entry}: asked its runner to stop it"
    uid = None
    if where.state == JobState.RETRY:
        m = RETRY_NAME.fullmatch(where.path.name)
        uid = m.group("uid") if m else None
    # incoming/ names are relative to it (a queue directory's files are <queue>/<name>)
    name = where.name
    candidate = Candidate((0, 0, 0.0, name), name, where.state, where.job_id, uid)
    heartbeat = HeartbeatWriter(clock, config.heartbeat_seconds, f"cancel-{os.getpid()}")
    claimed = claim(layout, candidate, heartbeat, clock, max_job_bytes=config.max_job_bytes)
    if claimed is None:
        return None
    try:
        record = RunRecord(
            run=claimed.run, outcome=FAILED, host=HOSTNAME, pid=os.getpid(), token=claimed.token,
            ended=clock.wall(), started=claimed.started, attempt=None,
            error=RunError(FailureKind.CANCELLED, message, False).to_record(),
            details={"priority": job_priority(config, claimed.job_dir)},  # kept by a later retry
        )  # fmt: skip
        if not decide(claimed.job_dir, record):
            return None  # someone else decided this run meanwhile
        target = carry_out(layout, config.output_root, claimed.job_dir, where.job_id, claimed.uid, record, config.hooks,
                           claim_token=claimed.token)  # fmt: skip
        return f"{where.entry}: moved to {target.parent.name}/{target.name}"
    finally:
        heartbeat.remove(claimed.token)
        claimed.release()


def _mark_cancelled(where: Located, message: str, priority_of: Callable[[Path], int] = lambda _: 0) -> int:
    """Write the cancel request into a job's directory, opened through descriptors (never a
    symlink); returns ``priority_of`` that directory (a split job's, to wake it with)."""
    with job_dir_of(where) as job:
        job.write_file(defaults.CANCEL_FILENAME, f"{message}\n".encode())
        return priority_of(job.through)
