"""Commands that change the queue from outside a runner: submit, retry, cancel, pause, purge."""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import sys
import time
from pathlib import Path
from typing import BinaryIO

from spoolrender import defaults
from spoolrender.clock import SystemClock, spool_now
from spoolrender.compositions import cached_compositions, submit_problems
from spoolrender.config import SpoolConfig
from spoolrender.display import has_control_characters
from spoolrender.durable import rename_durable, write_atomic
from spoolrender.errors import JobInvalid, JobNotFound, SpoolrenderError
from spoolrender.heartbeat import HOSTNAME
from spoolrender.jobfile import JobSpec, is_candidate_name, parse_job
from spoolrender.layout import (
    FINAL_NAME,
    RETRY_NAME,
    SpoolLayout,
    list_names,
    new_token,
    priority_from_key,
    retry_name,
)
from spoolrender.lookup import LIVE_STATES, find_job
from spoolrender.records import FAILED, RESET, RunRecord, decide, next_run_number, read_runs


def submit(config: SpoolConfig, data: bytes, name: str, *, check: bool = True, props_check: bool = True) -> Path:
    """Drop job ``data`` into incoming/ as ``name``, atomically; returns the new path.

    With ``check`` the job is validated first and refused with every problem listed,
    so a mistake is reported to the person submitting, not discovered in failed/ later:
    that includes an id that is already queued, running, or done (unless ``rerun``),
    which the runner would refuse anyway (the runner's id reservation stays the guard).
    """
    layout = SpoolLayout(config.spool)
    layout.check()
    if not name or "/" in name or not is_candidate_name(name) or has_control_characters(name):
        raise SpoolrenderError(
            f"invalid job file name {name!r} (no '/', no control characters, no leading '.', no .part/.tmp/~)"
        )
    if len(os.fsencode(name)) > 250:  # NAME_MAX is 255, and ".yaml" may be appended
        raise SpoolrenderError(f"invalid job file name {name[:40]!r}...: longer than 250 bytes")
    if not name.endswith(defaults.JOB_SUFFIXES):
        name += ".yaml"
    if len(data) > config.max_job_bytes:
        raise JobInvalid([f"job file: over the limit of {config.max_job_bytes} bytes (max_job_bytes)"])
    target = layout.incoming / name
    if os.path.lexists(target):
        raise SpoolrenderError(f"{target} already exists; choose another name (--name)")
    if check:
        spec = parse_job(data, name, config)
        check_id_is_free(config, spec)
        if props_check:
            check_props(config, spec)
    # Maildir's rule: written under a name the runner ignores (leading dot), fsynced,
    # then renamed into place, so the runner never sees a partial file and the rename
    # (IN_MOVED_TO) tells it at once that the job is complete; the directory is fsynced
    # before we return, so the job is acknowledged only once its name is durable. Mode
    # 0644 whatever the submitter's umask: the runner is often another user.
    write_atomic(target, data, mode=0o644)
    return target


def check_props(config: SpoolConfig, spec: JobSpec) -> None:
    """Refuse a Remotion job whose composition or props the project's cached listing
    (``spoolrender compositions``) rejects. Without a listing of the project's current
    content nothing is checked here: submit never bundles or starts a browser."""
    if spec.renderer != "remotion" or spec.composition is None:
        return
    listing = cached_compositions(config.project_dir(spec.project), config.cache_dir)
    if listing is None:
        return
    problems = submit_problems(listing, spec.composition, spec.props)
    if problems:
        raise JobInvalid(problems, job_id=spec.id)


def check_id_is_free(config: SpoolConfig, spec: JobSpec) -> None:
    """Refuse a job whose id is in retry/, running, or done (without ``rerun: true``).

    From listings only (the cost of a submit must not grow with the backlog): a waiting
    file in incoming/ that declares the same id under another name is refused by the
    runner's id reservation when it is claimed, with the reason in its failure record.
    """
    for where in find_job(config, spec.id, incoming=False):
        if where.state in LIVE_STATES:
            raise JobInvalid([f"field 'id': {spec.id!r} is already queued or running ({where.entry})"])
        if where.state == "done" and not spec.rerun:
            raise JobInvalid(
                [
                    f"field 'id': {spec.id!r} was already rendered ({where.entry}); "
                    "use another id, or set rerun: true to render it again"
                ]
            )


def read_submission(source: str, name: str | None, max_bytes: int) -> tuple[bytes, str]:
    """Bytes and incoming/ name for ``spoolrender submit FILE|-``, reading at most ``max_bytes + 1``.

    A named file must be a regular file: it is opened non-blocking, so a FIFO (or a
    device such as /dev/zero) is refused at once instead of blocking or reading forever.
    Standard input is what the caller chose to pipe in; it is read until EOF or one byte
    past the limit, whichever comes first, so an endless producer is cut off there.
    """
    if source == "-":
        data = read_limited(sys.stdin.buffer, max_bytes, "standard input")
        return data, name or f"stdin-{time.strftime('%Y%m%dT%H%M%S')}-{new_token()[:6]}.yaml"
    try:
        fd = os.open(source, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise SpoolrenderError(f"cannot read {source}: {exc.strerror}") from exc
    with os.fdopen(fd, "rb") as fh:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise SpoolrenderError(f"cannot submit {source}: not a regular file (to pipe a job in, use `submit -`)")
        data = read_limited(fh, max_bytes, source)
    return data, name or Path(source).name


def read_limited(stream: BinaryIO, max_bytes: int, what: str) -> bytes:
    """Up to ``max_bytes`` from ``stream``; JobInvalid as soon as there is one byte more."""
    chunks: list[bytes] = []
    size = 0
    while size <= max_bytes:
        chunk = stream.read(min(1 << 16, max_bytes + 1 - size))
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    if size > max_bytes:
        raise JobInvalid([f"job file: {what} is over the limit of {max_bytes} bytes (max_job_bytes)"])
    return b"".join(chunks)


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
