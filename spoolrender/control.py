"""Commands that change the queue from outside a runner: submit, retry, cancel, pause, purge."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import sys
import time
from pathlib import Path

from spoolrender import defaults
from spoolrender.claim import Candidate, claim
from spoolrender.clock import SystemClock, spool_now
from spoolrender.config import SpoolConfig
from spoolrender.durable import rename_durable, write_atomic
from spoolrender.errors import JobInvalid, SpoolrenderError
from spoolrender.heartbeat import HOSTNAME, HeartbeatWriter
from spoolrender.jobfile import is_candidate_name, parse_job
from spoolrender.layout import FINAL_NAME, RETRY_NAME, SpoolLayout, list_names, new_token, retry_name
from spoolrender.lookup import find_job
from spoolrender.records import FAILED, RESET, RunRecord, decide, next_run_number, read_runs
from spoolrender.transitions import carry_out


def submit(config: SpoolConfig, data: bytes, name: str, *, check: bool = True) -> Path:
    """Drop job ``data`` into incoming/ as ``name``, atomically; returns the new path.

    With ``check`` the job is validated first and refused with every problem listed,
    so a mistake is reported to the person submitting, not discovered in failed/ later.
    """
    layout = SpoolLayout(config.spool)
    layout.check()
    if not name or "/" in name or not is_candidate_name(name):
        raise SpoolrenderError(f"invalid job file name {name!r} (no '/', no leading '.', no .part/.tmp/~)")
    if not name.endswith(defaults.JOB_SUFFIXES):
        name += ".yaml"
    if len(data) > config.max_job_bytes:
        raise JobInvalid([f"job file: {len(data)} bytes is over the limit of {config.max_job_bytes} (max_job_bytes)"])
    if check:
        parse_job(data, name, config)
    target = layout.incoming / name
    if os.path.lexists(target):
        raise SpoolrenderError(f"{target} already exists; choose another name (--name)")
    # Maildir's rule: written under a name the runner ignores (leading dot), fsynced,
    # then renamed into place, so the runner never sees a partial file and the rename
    # (IN_MOVED_TO) tells it at once that the job is complete; the directory is fsynced
    # before we return, so the job is acknowledged only once its name is durable. Mode
    # 0644 whatever the submitter's umask: the runner is often another user.
    write_atomic(target, data, mode=0o644)
    return target


def read_submission(source: str, name: str | None) -> tuple[bytes, str]:
    """Bytes and incoming/ name for ``spoolrender submit FILE|-``."""
    if source == "-":
        data = sys.stdin.buffer.read()
        return data, name or f"stdin-{time.strftime('%Y%m%dT%H%M%S')}-{new_token()[:6]}.yaml"
    path = Path(source)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise SpoolrenderError(f"cannot read {source}: {exc.strerror}") from exc
    return data, name or path.name


def retry_failed(config: SpoolConfig, job_id: str | None) -> list[str]:
    """Send failed jobs (one id, or all with ``job_id=None``) back to retry/ with fresh attempts."""
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
        moved.append(m.group("id"))
    if job_id is not None and not moved:
        raise SpoolrenderError(f"no failed job with id {job_id!r}")
    return moved


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

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_duration(text: str) -> float:
    """``90s``, ``15m``, ``12h``, ``7d``, ``2w`` (or plain seconds) as seconds."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*", text)
    if m is None:
        raise SpoolrenderError(f"invalid duration {text!r}: use e.g. 90s, 15m, 12h, 7d, 2w")
    return float(m.group(1)) * _UNITS[m.group(2) or "s"]


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
    layout = SpoolLayout(config.spool)
    clock = SystemClock()
    message = f"cancelled by {who}"
    done: list[str] = []
    for _ in range(5):  # a claim lost to a runner means the job is running now: look again
        pending = [w for w in find_job(config, job_id) if w.state in ("incoming", "retry", "running")]
        if not pending:
            break
        lost_race = False
        for where in pending:
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
