"""Commands that change the queue from outside a runner: retry, cancel, pause, purge
(submit: :mod:`spoolrender.submission`)."""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from pathlib import Path

from spoolrender import defaults
from spoolrender.clock import SystemClock, spool_now
from spoolrender.config import SpoolConfig
from spoolrender.durable import rename_durable, write_atomic
from spoolrender.errors import JobNotFound, SpoolrenderError
from spoolrender.heartbeat import HOSTNAME
from spoolrender.layout import (
    FINAL_NAME,
    RETRY_NAME,
    SpoolLayout,
    list_names,
    new_token,
    priority_from_key,
    retry_name,
)
from spoolrender.lookup import find_job
from spoolrender.records import FAILED, RESET, RunRecord, decide, next_run_number, read_runs


def retry_failed(config: SpoolConfig, job_id: str | None) -> list[str]:
    """Send failed jobs (one id, or all with ``job_id=None``) back to retry/ with fresh attempts."""
    moved = [name.rsplit(".", 1)[0] for name in _reset_failed(config, job_id)]
    if job_id is not None and not moved:
        raise JobNotFound(job_id, f"no failed job with id {job_id!r}")
    return moved


def retry(config: SpoolConfig, job_id: str) -> list[str]:
    """``spoolrender retry ID``: whatever "try it again" means for the job now.

    A failed job goes back to retry/ with fresh attempts; a job waiting in retry/ is
    made due now (its attempts are kept). Returns one line per entry changed.
    """
    # retry/ first: a failed entry moved there below is due now already.
    lines = make_due_now(config, job_id)
    lines += [f"failed/{name}: back to retry/, due now, with fresh attempts" for name in _reset_failed(config, job_id)]
    if not lines:
        found = find_job(config, job_id)
        if not found:
            raise JobNotFound(job_id)
        states = ", ".join(sorted({w.state for w in found}))
        raise SpoolrenderError(f"job {job_id!r} is {states}: nothing to retry (only failed or retry-waiting jobs)")
    return lines


def _reset_failed(config: SpoolConfig, job_id: str | None) -> list[str]:
    """Names in failed/ (one id's, or all) moved back to retry/ with a reset record."""
    layout = SpoolLayout(config.spool)
    layout.check()
    moved = []
    for name in sorted(list_names(layout.failed)):
        m = FINAL_NAME.fullmatch(name)
        if m is None or (job_id is not None and m.group("id") != job_id):
            continue
        job_dir = layout.failed / name
        runs = read_runs(job_dir)
        priority = defaults.DEFAULT_PRIORITY
        if runs:
            priority = int(runs[-1].details.get("priority", priority))
        now = time.time()
        record = RunRecord(
            run=next_run_number(job_dir),
            outcome=RESET,
            host=HOSTNAME,
            pid=os.getpid(),
            token=new_token(),
            ended=now,
            details={"by": "spoolrender retry"},
        )
        # The reset is recorded (exclusively) before the move, so a runner claiming the
        # job from retry/ already counts attempts from zero.
        if not decide(job_dir, record):
            continue  # another `retry` is doing this one
        try:
            rename_durable(job_dir, layout.retry / retry_name(m.group("id"), m.group("uid"), now, priority))
        except FileNotFoundError:
            continue
        moved.append(name)
    return moved


def make_due_now(config: SpoolConfig, job_id: str) -> list[str]:
    """Make the retry/ entries of ``job_id`` due now; one line per entry for the operator.

    The due time is only a part of the entry's name (the listing is the queue), so one
    rename within retry/ re-queues it: a runner that claims the old name first wins (our
    rename then finds nothing), and a runner listing afterwards sees a due entry; the
    rename into retry/ is also the event that wakes watching runners at once.
    """
    layout = SpoolLayout(config.spool)
    layout.check()
    now = time.time()
    changed = []
    for name in sorted(list_names(layout.retry)):
        m = RETRY_NAME.fullmatch(name)
        if m is None or m.group("id") != job_id:
            continue
        if int(m.group("due")) / 1000 <= now:
            changed.append(f"retry/{name}: already due; the next runner to look claims it")
            continue
        target = retry_name(job_id, m.group("uid"), now, priority_from_key(m.group("prio")))
        try:
            rename_durable(layout.retry / name, layout.retry / target)
        except FileNotFoundError:
            continue  # claimed meanwhile: it is running now
        changed.append(f"retry/{name}: due now (was due later), attempts kept")
    return changed


# --- pause / resume ---------------------------------------------------------------------


def is_paused(layout: SpoolLayout) -> bool:
    return (layout.private / defaults.PAUSE_FILENAME).exists()


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


# --- purge ------------------------------------------------------------------------------


def purge(
    config: SpoolConfig, older_than: float, states: tuple[str, ...] = ("done", "failed"), *, dry_run: bool = False
) -> list[str]:
    """Delete finished jobs' records older than ``older_than`` seconds; returns the entries.

    Age is the job directory's mtime (its last record was written just before it moved to
    done/ or failed/) against the spool filesystem's clock. Outputs are never touched. A
    purged job is forgotten: its id may be used again.
    """
    layout = SpoolLayout(config.spool)
    layout.check()
    probe = layout.private / f"clock-purge-{os.getpid()}"
    now = spool_now(probe) or time.time()
    with contextlib.suppress(OSError):
        probe.unlink()
    removed = []
    for state in states:
        directory = layout.state_dir(state)
        for name in list_names(directory):
            if name.startswith("."):
                continue
            try:
                age = now - os.stat(directory / name).st_mtime
            except FileNotFoundError:
                continue
            if age >= older_than:
                if not dry_run:
                    shutil.rmtree(directory / name, ignore_errors=True)
                removed.append(f"{state}/{name}")
    return removed


# --- cancel -----------------------------------------------------------------------------


def cancel(config: SpoolConfig, job_id: str, who: str) -> list[str]:
    """Cancel a job: waiting ones go to failed/ at once, a running one is stopped by its owner.

    A queued job is claimed like a runner would (so no runner can start it meanwhile) and
    failed as cancelled. For a running job a ``cancel`` file is written into its
    directory; the owning runner, on any host, sees it at its next heartbeat, stops the
    render and fails the job. Returns what was done, one line per job found.
    """
    # Imported here: the claim and transition machinery (and renderers, filelock) would
    # add a tenth of a second to every `spoolrender submit` and `status` start.
    from spoolrender.chunks.moves import parent_priority, wake_parent
    from spoolrender.claim import Candidate, claim
    from spoolrender.heartbeat import HeartbeatWriter
    from spoolrender.transitions import carry_out

    layout = SpoolLayout(config.spool)
    clock = SystemClock()
    message = f"cancelled by {who}"
    done: list[str] = []
    for _ in range(5):  # a claim lost to a runner means the job is running now: look again
        pending = [w for w in find_job(config, job_id) if w.state in ("incoming", "retry", "running", "split")]
        if not pending:
            break
        lost_race = False
        for where in pending:
            if where.state == "split":
                # Waiting for its chunks: marked, then woken into retry/, where the next
                # pass claims and fails it like any queued job (its chunks stop then).
                try:
                    write_atomic(where.path / defaults.CANCEL_FILENAME, f"{message}\n".encode())
                except FileNotFoundError:
                    lost_race = True  # woken meanwhile; look again
                    continue
                wake_parent(layout, where.path.name, parent_priority(where.path), clock.wall())
                # A runner that claims it first fails it as cancelled itself, else the next
                # pass here does; either way its chunks are stopped when it fails.
                done.append(f"{where.entry}: cancel marked; its chunks stop when it is failed")
                lost_race = True  # look again: it is in retry/ now (or running)
                continue
            if where.state == "running":
                try:
                    write_atomic(where.path / defaults.CANCEL_FILENAME, f"{message}\n".encode())
                    done.append(f"{where.entry}: asked its runner to stop it")
                except FileNotFoundError:
                    lost_race = True  # it just moved on; look again
                continue
            uid = None
            if where.state == "retry":
                m = RETRY_NAME.fullmatch(where.path.name)
                uid = m.group("uid") if m else None
            # incoming/ names are relative to it (a queue directory's files are <queue>/<name>)
            name = where.path.relative_to(layout.incoming).as_posix() if where.state == "incoming" else where.path.name
            candidate = Candidate((0, 0, 0.0, name), name, where.state, job_id, uid)
            heartbeat = HeartbeatWriter(clock, config.heartbeat_seconds, f"cancel-{os.getpid()}")
            claimed = claim(layout, candidate, heartbeat, clock)
            if claimed is None:
                lost_race = True
                continue
            try:
                record = RunRecord(
                    run=claimed.run, outcome=FAILED, host=HOSTNAME, pid=os.getpid(), token=claimed.token,
                    ended=clock.wall(), started=claimed.started, attempt=None,
                    error={"kind": "cancelled", "message": message, "transient": False},
                )  # fmt: skip
                if decide(claimed.job_dir, record):
                    target = carry_out(
                        layout, config.output_root, claimed.job_dir, job_id, claimed.uid, record, config.hooks
                    )
                    done.append(f"{where.entry}: moved to {target.parent.name}/{target.name}")
            finally:
                heartbeat.remove(claimed.token)
                claimed.release()
        if not lost_race:
            break
    if not done:
        raise SpoolrenderError(f"no queued or running job with id {job_id!r}")
    return done
