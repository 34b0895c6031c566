"""A split job's ledger (``.spoolrender/chunks/<id>.<uid>/``): its plan, its finished
chunks, and what each chunk is doing now, from listings.

- ``plan.json``: written once, before the split is decided; every later run of the job
  reuses it, so the chunks' ranges never change under finished ones;
- ``finished/NNNN/``: the entry of chunk NNNN, renamed here by the run that decided it
  (rendered: its last record says which files in the store are its own; or failed for
  good). The rename is the chunk's one completion: a second copy of a chunk (re-created
  after a crash) finds the name taken and drops itself.
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from spoolrender import defaults
from spoolrender.chunks.plan import ChunkPlan
from spoolrender.core.run_error import UNREADABLE_CHUNK_ERROR
from spoolrender.intake.seal import SEAL_KEY
from spoolrender.renderers.base import ChunkPart
from spoolrender.spool.chunk_names import chunk_store_name, chunk_uid, ledger_dir, store_dir
from spoolrender.spool.durable import create_exclusive
from spoolrender.spool.layout import RETRY_NAME, RUNNING_NAME, SpoolLayout, list_names
from spoolrender.spool.records import FAILED, PUBLISHING, read_runs

PLAN_FILENAME = "plan.json"
FINISHED_DIR = "finished"


def finished_dir(layout: SpoolLayout, key: str) -> Path:
    return ledger_dir(layout, key) / FINISHED_DIR


def write_plan(layout: SpoolLayout, key: str, plan: ChunkPlan) -> ChunkPlan:
    """Record ``plan`` for job ``key``, or return the plan an earlier run recorded."""
    ledger = ledger_dir(layout, key)
    (ledger / FINISHED_DIR).mkdir(parents=True, exist_ok=True)
    # Exclusive: two runs of one job (a stalled owner and its recoverer's successor)
    # must agree on one plan; the second reads the first's.
    if create_exclusive(ledger / PLAN_FILENAME, plan.to_json()):
        return plan
    existing = read_plan(layout, key)
    if existing is None:
        raise OSError(f"unreadable chunk plan in {ledger}")
    return existing


def read_plan(layout: SpoolLayout, key: str) -> ChunkPlan | None:
    try:
        return ChunkPlan.from_json((ledger_dir(layout, key) / PLAN_FILENAME).read_bytes())
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError):
        return None


@dataclass(frozen=True)
class Finished:
    part: ChunkPart
    entry: Path  # finished/NNNN
    files: Path | None  # its verified files in the store; None when it failed
    error: dict[str, Any] | None = None  # the failure, when it failed
    job_sha256: str | None = None  # the job bytes its decided run rendered from (its seal)


@dataclass
class ChunkStates:
    """Where each chunk of a plan is, from one listing of retry/, running/ and the ledger."""

    plan: ChunkPlan
    finished: dict[int, Finished] = field(default_factory=dict)
    running: dict[int, str] = field(default_factory=dict)  # index -> running/ entry name
    waiting: set[int] = field(default_factory=set)

    @property
    def failed(self) -> list[Finished]:
        return [f for f in self.finished.values() if f.error is not None]

    @property
    def done(self) -> list[Finished]:
        return [f for f in self.finished.values() if f.error is None]

    @property
    def missing(self) -> list[int]:
        """Chunks that nobody will render: neither waiting, running nor finished."""
        present = set(self.finished) | set(self.running) | self.waiting
        return [i for i in range(self.plan.count) if i not in present]

    @property
    def complete(self) -> bool:
        return len(self.done) == self.plan.count


def read_finished(layout: SpoolLayout, output_root: Path, key: str, part: ChunkPart) -> Finished | None:
    entry = finished_dir(layout, key) / f"{part.index:04d}"
    try:
        runs = read_runs(entry)
    except FileNotFoundError:
        return None
    decided = [r for r in runs if r.outcome in (PUBLISHING, FAILED)]
    if not decided:
        return None  # pragma: no cover - only decided chunks are renamed here
    last = decided[-1]
    if last.outcome == FAILED:
        return Finished(part, entry, None, last.error or UNREADABLE_CHUNK_ERROR.to_record())
    files = store_dir(output_root, key) / chunk_store_name(part.index, last.token)
    sealed = last.details.get(SEAL_KEY) if isinstance(last.details, dict) else None
    return Finished(part, entry, files, job_sha256=sealed if isinstance(sealed, str) else None)


def chunk_states(layout: SpoolLayout, output_root: Path, key: str, parent_uid: str, plan: ChunkPlan) -> ChunkStates:
    states = ChunkStates(plan)
    by_uid = {chunk_uid(parent_uid, p.index): p.index for p in plan.parts}
    # Listings are no snapshot: a chunk moves while we list. Listed in this order, a chunk
    # that makes one move during it (retry/ -> running/ by a claim, running/ -> retry/ after
    # a failure, running/ -> finished/ when done) is still seen in one listing or another
    # (the destination is listed again after the source was first listed; see
    # spool/state_listings.py), and one seen in two is where the later listing found it.
    first = _list_waiting(layout, by_uid)
    for name in list_names(layout.running):
        m = RUNNING_NAME.fullmatch(name)
        if m is not None and m.group("uid") in by_uid:
            states.running[by_uid[m.group("uid")]] = name
    for name in list_names(finished_dir(layout, key)):
        if name.isdigit() and int(name) < plan.count:
            found = read_finished(layout, output_root, key, plan.parts[int(name)])
            if found is not None:
                states.finished[int(name)] = found
                states.running.pop(int(name), None)
    again = _list_waiting(layout, by_uid)
    for index in again:
        states.running.pop(index, None)  # back in retry/ after running/ was listed
    # Claimed after the first listing: running. Finished: for good (a second copy of a
    # finished chunk, re-created after a crash, drops itself when it runs).
    states.waiting = {i for i in first | again if i not in states.running and i not in states.finished}
    return states


def _list_waiting(layout: SpoolLayout, by_uid: dict[str, int]) -> set[int]:
    """The chunks (indexes) with an entry in retry/ now."""
    return {
        by_uid[m.group("uid")]
        for name in list_names(layout.retry)
        if (m := RETRY_NAME.fullmatch(name)) is not None and m.group("uid") in by_uid
    }


def chunk_info(job_dir: Path) -> dict[str, Any] | None:
    """The ``chunk.json`` of a chunk entry; None for a job's own entry."""
    try:
        with open(job_dir / defaults.CHUNK_FILENAME, "rb") as fh:
            info = json.loads(fh.read())
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {}  # a chunk entry whose chunk.json is unreadable: still never a job
    return info if isinstance(info, dict) else {}


def is_chunk_entry(job_dir: Path) -> bool:
    return os.path.lexists(job_dir / defaults.CHUNK_FILENAME)


def progress_of(states: ChunkStates, running_progress: dict[int, float]) -> float:
    """The fraction of the job's frames rendered: finished chunks and running ones' progress."""
    total = states.plan.span.frames
    frames: float = sum(f.part.frames for f in states.done)
    for index, fraction in running_progress.items():
        with contextlib.suppress(IndexError):
            frames += states.plan.parts[index].frames * max(0.0, min(1.0, fraction))
    return frames / total
