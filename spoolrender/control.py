"""Commands that change the queue from outside a runner: submit and retry."""

from __future__ import annotations

import contextlib
import os
import sys
import time
from pathlib import Path

from spoolrender import defaults
from spoolrender.config import SpoolConfig
from spoolrender.durable import fsync_dir, rename_durable
from spoolrender.errors import JobInvalid, SpoolrenderError
from spoolrender.heartbeat import HOSTNAME
from spoolrender.jobfile import is_candidate_name, parse_job
from spoolrender.layout import FINAL_NAME, SpoolLayout, list_names, new_token, retry_name
from spoolrender.records import RESET, RunRecord, decide, next_run_number, read_runs


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
        raise JobInvalid(
            [f"job file: {len(data)} bytes is over the limit of {config.max_job_bytes} (max_job_bytes)"]
        )
    if check:
        parse_job(data, name, config)
    target = layout.incoming / name
    if os.path.lexists(target):
        raise SpoolrenderError(f"{target} already exists; choose another name (--name)")
    # Maildir's rule: write under a name the runner ignores (leading dot), fsync, then
    # rename into place, so the runner never sees a partial file, and the rename
    # (IN_MOVED_TO) tells it at once that the job is complete.
    tmp = layout.incoming / f".{name}.{new_token()}.part"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o664)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.rename(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    # The job is acknowledged to the submitter only once its name is durable.
    fsync_dir(layout.incoming)
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
