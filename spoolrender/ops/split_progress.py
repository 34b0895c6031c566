"""How a split job shows in `status`, `show` and `serve`: one job, with its chunks' progress.

Chunk entries are never listed as jobs; the job waiting in split/ is, with how many of
its chunks are done, running, waiting (and failed or missing), the share of its frames
rendered (running chunks by their heartbeat's progress) and an ETA from the pace so far.
The ETA covers the chunks; the join comes after it. Once its chunks need nothing more the
job is woken into retry/ for its join, and is shown as split, ``joining``, until then.
"""

from __future__ import annotations

import os
from enum import StrEnum
from pathlib import Path
from typing import Any

from spoolrender import defaults
from spoolrender.chunks.ledger import ChunkStates, chunk_states, progress_of, read_finished, read_plan
from spoolrender.chunks.plan import ChunkPlan
from spoolrender.ops.running_items import listed_heartbeat
from spoolrender.spool.chunk_names import ledger_dir
from spoolrender.spool.heartbeat import Heartbeat
from spoolrender.spool.layout import FINAL_NAME, RETRY_NAME, SpoolLayout, final_name
from spoolrender.spool.records import FAILED, PUBLISHING, REQUEUE, SPLIT, RunRecord, read_runs


def split_info(layout: SpoolLayout, output_root: Path, name: str, *, now: float) -> dict[str, Any]:
    """One ``split`` item of the status document (``name`` is a split/ entry)."""
    m = FINAL_NAME.fullmatch(name)
    info: dict[str, Any] = {"id": m.group("id") if m else name, "entry": name, "chunks": None,
                            "progress": None, "eta_seconds": None}  # fmt: skip
    progress = chunk_progress(layout, output_root, name, now=now)
    if progress is not None:
        info.update(progress)
    return info


def joining_key(layout: SpoolLayout, name: str) -> str | None:
    """The split job's key (``<id>.<uid>``) if retry/ entry ``name`` is a split job woken for
    its join (its chunks need nothing more), else None: nothing failed, it waits for its
    chunks' join, not for a retry. A join that failed and waits to be tried again is a retry;
    a join run stopped without a decision (REQUEUE: shutdown, spool I/O) still waits for its join."""
    m = RETRY_NAME.fullmatch(name)
    if m is None:
        return None
    key = final_name(m.group("id"), m.group("uid"))
    if not os.path.isdir(ledger_dir(layout, key)):  # one stat per retry entry: most were never split
        return None
    try:
        runs = read_runs(layout.retry / name)
    except FileNotFoundError:  # claimed (or moved on) since the listing: not waiting here any more
        return None
    decided = [r for r in runs if r.outcome != REQUEUE]
    if not decided or decided[-1].outcome != SPLIT:
        return None
    return key


def joining_info(layout: SpoolLayout, output_root: Path, name: str, key: str, *, now: float) -> dict[str, Any]:
    """The ``split`` item of retry/ entry ``name``, split job ``key`` waiting for its join."""
    info = split_info(layout, output_root, key, now=now)
    info.update(entry=name, joining=True)
    return info


def chunk_progress(layout: SpoolLayout, output_root: Path, key: str, *, now: float) -> dict[str, Any] | None:
    """``{"chunks": {...counts}, "progress", "eta_seconds"}`` of job ``key`` (``<id>.<uid>``);
    None if it has no chunk plan (it is not split)."""
    plan = read_plan(layout, key)
    if plan is None:
        return None
    states, heartbeats = _chunks_now(layout, output_root, key, plan)
    running = {index: (hb.progress or 0.0) if hb is not None else 0.0 for index, hb in heartbeats.items()}
    fraction = progress_of(states, running)
    elapsed = max(0.0, now - plan.created)
    eta = elapsed * (1 - fraction) / fraction if 0 < fraction < 1 else None
    return {
        "chunks": {
            "count": plan.count,
            "done": len(states.done),
            "running": len(states.running),
            "waiting": len(states.waiting),
            "failed": len(states.failed),
            "missing": len(states.missing),
        },
        "frames": plan.span.frames,
        "progress": round(fraction, 4),
        "eta_seconds": None if eta is None else round(eta, 1),
    }


class ChunkState(StrEnum):
    """Where one chunk of a split job is (a row of the dashboard's chunk table)."""

    DONE = "done"
    FAILED = "failed"
    RUNNING = "running"
    WAITING = "waiting"
    MISSING = "missing"  # neither waiting, running nor finished: queued again by the next pass


def chunk_table(layout: SpoolLayout, output_root: Path, key: str, *, now: float) -> list[dict[str, Any]] | None:
    """One row per chunk of split job ``key``: its frames, state, host, progress and time
    (finished: its deciding run's; running: so far). None if the job is not split."""
    plan = read_plan(layout, key)
    if plan is None:
        return None
    states, heartbeats = _chunks_now(layout, output_root, key, plan)
    rows = []
    for part in plan.parts:
        row: dict[str, Any] = {"chunk": part.index, "first": part.first, "last": part.last, "frames": part.frames,
                               "state": ChunkState.MISSING.value, "host": None, "progress": None, "seconds": None,
                               "error": None}  # fmt: skip
        finished = states.finished.get(part.index)
        if finished is not None:
            decided = [r for r in _runs(finished.entry) if r.outcome in (PUBLISHING, FAILED)]
            last = decided[-1] if decided else None
            row["state"] = (ChunkState.FAILED if finished.error is not None else ChunkState.DONE).value
            row["progress"] = None if finished.error is not None else 1.0
            row["error"] = finished.error
            if last is not None:
                row["host"] = last.host
                row["seconds"] = None if last.started is None else round(last.ended - last.started, 1)
        elif part.index in states.running:
            hb = heartbeats[part.index]
            row["state"] = ChunkState.RUNNING.value
            if hb is not None:
                row["host"], row["progress"] = hb.host, hb.progress
                row["seconds"] = None if hb.started is None else round(max(0.0, now - hb.started), 1)
        elif part.index in states.waiting:
            row["state"] = ChunkState.WAITING.value
        rows.append(row)
    return rows


def _chunks_now(
    layout: SpoolLayout, output_root: Path, key: str, plan: ChunkPlan
) -> tuple[ChunkStates, dict[int, Heartbeat | None]]:
    """Where split job ``key``'s chunks are, and the heartbeat of each running one.

    A chunk listed in running/ can end before its heartbeat is read (finished/, or back to
    retry/ after a failure): read then, it has none, and counted as running at 0% the job's
    progress fell back by its share (0.4 -> 0.25) until the next look. So a chunk found gone
    from running/ at its read is looked for in finished/ (where a chunk goes when it ends);
    one not there either moved back to retry/ (or was dropped), and the chunks are listed
    again, at most ``defaults.MOVED_READ_ATTEMPTS`` times (the last listing stands).
    """
    uid = key.rpartition(".")[2]
    for _ in range(defaults.MOVED_READ_ATTEMPTS):
        states = chunk_states(layout, output_root, key, uid, plan)
        heartbeats: dict[int, Heartbeat | None] = {}
        relist = False
        for index, entry in list(states.running.items()):
            read = listed_heartbeat(layout, entry)
            if read is None:  # ended since the listing
                finished = read_finished(layout, output_root, key, plan.parts[index])
                if finished is None:
                    relist = True
                    break
                states.finished[index] = finished
                del states.running[index]
                continue
            heartbeats[index] = read[0]
        if not relist:
            return states, heartbeats
    return states, {
        index: (listed_heartbeat(layout, entry) or (None, None))[0] for index, entry in states.running.items()
    }


def _runs(entry: Path) -> list[RunRecord]:
    try:
        return read_runs(entry)
    except FileNotFoundError:  # moved on since the listing
        return []
