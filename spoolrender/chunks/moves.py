"""The renames that carry out a split job's decisions; each idempotent, like
:mod:`spoolrender.lifecycle.transitions` (a recoverer that finds a decided run whose owner died
calls the same functions).

- the parent's ``split`` decision: into split/, then its missing chunks into retry/;
- a chunk's decision (rendered, or failed for good): its files into the store, its entry
  into the ledger's finished/ (exclusively: one completion per chunk), then the parent
  is woken when nothing is left to wait for: one rename from split/ to retry/, due now,
  so that of several runners finishing chunks at once exactly one wakes it;
- the parent's end (done or failed): its chunks stopped and every chunk file removed.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
from pathlib import Path

from spoolrender import defaults
from spoolrender.chunks.ledger import ChunkStates, chunk_info, chunk_states, finished_dir, read_plan
from spoolrender.chunks.plan import ChunkPlan
from spoolrender.config.queues import QUEUE_FILENAME
from spoolrender.core.failpoints import crash_point
from spoolrender.intake.owncopy import write_copy
from spoolrender.intake.seal import SEAL_KEY, JobFileState
from spoolrender.spool.chunk_names import (
    STORE_DIR,
    chunk_id,
    chunk_store_name,
    chunk_uid,
    ledger_dir,
    ledgers_root,
    store_dir,
)
from spoolrender.spool.durable import fsync_dir, rename_durable, write_atomic
from spoolrender.spool.layout import RETRY_NAME, RUNNING_NAME, SpoolLayout, final_name, new_token, retry_name
from spoolrender.spool.publish import remove_tree
from spoolrender.spool.records import PUBLISHING, RunRecord, read_runs, recorded_priority, run_path
from spoolrender.spool.spooldir import DirHandle, SpoolPathRefused
from spoolrender.spool.trusted_dirs import UntrustedDir, ensure_trusted_path

log = logging.getLogger(__name__)

_TAKEN = (errno.EEXIST, errno.ENOTEMPTY)
DROPPED = "dropped"  # the "state" a chunk entry nobody needs ends in (it is removed)


def move_to_split(
    layout: SpoolLayout, output_root: Path, job_dir: Path, job_id: str, uid: str, record: RunRecord
) -> Path:
    """Carry out a ``split`` decision: wait in split/, with every chunk waiting or done."""
    crash_point("split-after-decide")
    layout.split.mkdir(exist_ok=True)  # spools made before chunked rendering lack it
    target = layout.split / final_name(job_id, uid)
    if os.path.lexists(job_dir):
        rename_durable(job_dir, target)
    elif not os.path.lexists(target):
        raise FileNotFoundError(job_dir)
    crash_point("after-split-move")
    key = final_name(job_id, uid)
    priority = int(record.details.get("priority", defaults.DEFAULT_PRIORITY))
    # "Now" by the spool filesystem's clock (the decision's record was stamped by it): a
    # decider whose own clock is an hour fast must not queue its chunks an hour late for
    # every other host.
    now = decided_at(target, record)
    plan = read_plan(layout, key)
    if plan is None:  # the ledger is gone (the job ended meanwhile): its next run decides
        wake_parent(layout, key, priority, now)
        return target
    states = chunk_states(layout, output_root, key, uid, plan)
    for index in states.missing:
        # Due at the decision's time: a re-created chunk keeps its place in the queue.
        create_chunk(layout, target, job_id, uid, plan, index, due=now, priority=priority)
    # A chunk that finished while we were still in running/ could not wake us: look once
    # more now that we are in split/ (of the two, at least one sees the other's move).
    wake_if_ready(layout, output_root, key, uid, priority, now)
    return target


def decided_at(job_dir: Path, record: RunRecord) -> float:
    """When ``record`` was decided by the spool filesystem's clock (its file's mtime: on
    NFS and sshfs the server stamps it), else by its decider's clock."""
    try:
        return os.stat(run_path(job_dir, record.run)).st_mtime
    except OSError:
        return record.ended


def create_chunk(
    layout: SpoolLayout, parent_dir: Path, job_id: str, uid: str, plan: ChunkPlan, index: int, *, due: float,
    priority: int,
) -> Path:  # fmt: skip
    """Put chunk ``index`` into retry/ as a complete entry (staged, then one rename)."""
    part = plan.parts[index]
    key = final_name(job_id, uid)
    stage = ledger_dir(layout, key) / f".new-{index:04d}-{new_token()}"
    stage.mkdir()
    try:
        # The parent's private copy (intake/owncopy.py), copied in turn: the chunk validates and
        # renders exactly what the parent validated, and checks it against the hash here.
        parent_copy = parent_dir / defaults.JOB_FILENAME
        data = parent_copy.read_bytes()
        with DirHandle.open(stage) as staged:
            write_copy(staged, data, os.stat(parent_copy).st_mode)  # as readable as the parent's
            staged.fsync()  # no decision follows in here to make its name durable
        with contextlib.suppress(FileNotFoundError):  # its queue directory, for routing
            write_atomic(stage / QUEUE_FILENAME, (parent_dir / QUEUE_FILENAME).read_bytes())
        info = {"parent_id": job_id, "parent_uid": uid, "index": index, "count": plan.count,
                "first": part.first, "last": part.last, "fps": plan.span.fps,
                SEAL_KEY: JobFileState.of(data).sha256}  # fmt: skip
        write_atomic(stage / defaults.CHUNK_FILENAME, json.dumps(info, indent=2).encode())
        target = layout.retry / retry_name(chunk_id(job_id, index), chunk_uid(uid, index), due, priority)
        try:
            rename_durable(stage, target)
        except OSError as exc:
            if exc.errno not in _TAKEN and not os.path.lexists(target):
                raise
            # Queued already under this very name (a planner that was frozen meanwhile).
            remove_tree(stage)
    except BaseException:
        remove_tree(stage)
        raise
    log.debug("job %s: chunk %d of %d (frames %d-%d) queued", job_id, index + 1, plan.count, part.first, part.last)
    return target


def finish_chunk(layout: SpoolLayout, output_root: Path, job_dir: Path, record: RunRecord) -> Path:
    """Carry out a chunk's PUBLISHING or FAILED decision; returns where its entry went."""
    crash_point("chunk-after-decide")
    info = chunk_info(job_dir)
    if info is None:
        if not os.path.lexists(job_dir):
            raise FileNotFoundError(job_dir)  # moved on by another runner: theirs to carry out
        info = {}
    try:
        job_id, uid, index = str(info["parent_id"]), str(info["parent_uid"]), int(info["index"])
    except (KeyError, TypeError, ValueError):
        log.warning("%s: unreadable %s; dropping the chunk entry", job_dir.name, defaults.CHUNK_FILENAME)
        return _drop(job_dir, None)
    key = final_name(job_id, uid)
    if not finished_dir(layout, key).is_dir():
        # The job ended (cancelled, failed, done): nothing needs this chunk any more.
        log.info("job %s: chunk %d no longer needed; dropped", job_id, index)
        scratch = (record.publish or {}).get("temp")
        return _drop(job_dir, None if scratch is None else output_root / scratch)
    files: Path | None = None
    if record.outcome == PUBLISHING:
        files = store_dir(output_root, key) / chunk_store_name(index, record.token)
        scratch = output_root / (record.publish or {})["temp"]
        if os.path.lexists(scratch):
            store_root(output_root, key)
            os.rename(scratch, files)  # same filesystem: the scratch dir is on the output root
            fsync_dir(files.parent)
        crash_point("chunk-after-store")
    target = finished_dir(layout, key) / f"{index:04d}"
    try:
        # THE completion of the chunk: of two copies of one chunk, one rename wins.
        rename_durable(job_dir, target)
    except FileNotFoundError:
        if not finished_dir(layout, key).is_dir():
            # The job ended (cancelled, failed, done) meanwhile: nothing needs this chunk.
            log.info("job %s: chunk %d no longer needed; dropped", job_id, index)
            dropped = _drop(job_dir, files)
            with contextlib.suppress(OSError):  # the store's directory, if we made it again
                os.rmdir(store_dir(output_root, key))
            return dropped
        raise
    except OSError as exc:
        # Taken: ENOTEMPTY or EEXIST locally; sshfs reports a directory renamed onto a
        # non-empty one as EPERM, so the target's presence decides.
        if exc.errno not in _TAKEN and not os.path.lexists(target):
            raise
        log.info("job %s: chunk %d was finished by another copy; dropping this one", job_id, index)
        return _drop(job_dir, files)
    crash_point("chunk-after-finish")
    priority = int(record.details.get("priority", defaults.DEFAULT_PRIORITY))
    wake_if_ready(layout, output_root, key, uid, priority, decided_at(target, record))
    return target


def store_root(output_root: Path, key: str) -> Path:
    """The chunk store of job ``key``, made or found the runner's alone (trusted_dirs):
    in another user's store they could replace a chunk before the join. Raises
    PermissionError for one that is not (the decision is carried out again once the
    operator has removed it)."""
    try:
        return ensure_trusted_path(output_root, STORE_DIR, key)
    except UntrustedDir as exc:
        raise PermissionError(errno.EACCES, f"{exc}: refusing to store chunks in it; remove it") from exc


def _drop(job_dir: Path, files: Path | None) -> Path:
    """Remove a chunk entry nobody needs; returns a name that says so (never a directory)."""
    if files is not None:
        remove_tree(files)
    remove_tree(job_dir)
    return job_dir.parent.parent / DROPPED / job_dir.name


def waiting_for_nothing(states: ChunkStates) -> bool:
    """Whether the parent has nothing to wait for: every chunk done, or one failed for good."""
    return states.complete or bool(states.failed)


def wake_if_ready(layout: SpoolLayout, output_root: Path, key: str, uid: str, priority: int, now: float) -> bool:
    plan = read_plan(layout, key)
    if plan is None:
        return False
    if not waiting_for_nothing(chunk_states(layout, output_root, key, uid, plan)):
        return False
    return wake_parent(layout, key, priority, now)


def wake_parent(layout: SpoolLayout, key: str, priority: int, now: float) -> bool:
    """Move the parent from split/ to retry/, due ``now``; False if it is not in split/.

    ``now`` by the spool filesystem's clock where the caller has it (a chunk's decision),
    so that a waker with a skewed clock does not put the job off for the other hosts.
    """
    job_id, _, uid = key.rpartition(".")
    try:
        # One rename: of several runners finishing the last chunks, exactly one wakes it.
        rename_durable(layout.split / key, layout.retry / retry_name(job_id, uid, now, priority))
    except FileNotFoundError:
        return False
    crash_point("after-wake")
    log.info("job %s: woken from split/ (its chunks need nothing more)", job_id)
    return True


def parent_priority(job_dir: Path) -> int:
    """A job's priority as its last run recorded it (the waker of a job in split/ keeps it)."""
    try:
        runs = read_runs(job_dir)
    except OSError:
        return defaults.DEFAULT_PRIORITY
    priority = recorded_priority(runs)
    return defaults.DEFAULT_PRIORITY if priority is None else priority


def discard_chunks(layout: SpoolLayout, output_root: Path, key: str) -> None:
    """The job ``key`` has ended: stop its chunks and remove every chunk file and entry.

    The ledger goes first, in one rename: from then on a chunk that finishes finds no
    ledger and drops itself, and one that starts later does the same.
    """
    ledger = ledger_dir(layout, key)
    if os.path.lexists(ledger):
        gone = ledgers_root(layout) / f".gone-{key}-{new_token()}"
        with contextlib.suppress(FileNotFoundError):
            os.rename(ledger, gone)
            remove_tree(gone)
    job_id, _, uid = key.rpartition(".")
    uids = _chunk_uids(uid)
    # Listed entries are reached through their state directory's descriptor
    # (spoolrender.spool.spooldir), never by their names from the root again.
    with contextlib.suppress(FileNotFoundError), DirHandle.open(layout.retry) as retry:
        for name in retry.names():
            m = RETRY_NAME.fullmatch(name)
            if m is not None and m.group("uid") in uids:
                # A runner may claim it at this moment: its run then finds no ledger.
                with contextlib.suppress(OSError):  # gone meanwhile (claimed), as remove_tree
                    retry.rmtree(name)
    with contextlib.suppress(FileNotFoundError), DirHandle.open(layout.running) as running:
        for name in running.names():
            m = RUNNING_NAME.fullmatch(name)
            if m is not None and m.group("uid") in uids:
                # Its owner (on any host) stops the render at its next heartbeat.
                with contextlib.suppress(OSError, SpoolPathRefused), running.sub(name) as job_dir:
                    job_dir.write_file(defaults.CANCEL_FILENAME, b"its job has ended\n", durable=False)
    remove_tree(store_dir(output_root, key))
    log.debug("job %s: chunk files and entries removed", job_id)


def _chunk_uids(uid: str) -> set[str]:
    return {chunk_uid(uid, index) for index in range(defaults.MAX_CHUNKS)}
