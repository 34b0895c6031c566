"""Planning completion hooks: what a run's move to done/, retry/ or failed/ owes.

Called while a decided run is carried out (:mod:`spoolrender.lifecycle.transitions`), *before*
the job directory moves: a marker in ``.spoolrender/hooks/pending/`` (the index: due
deliveries are found by listing one small directory, never done/), then the delivery
state ``hook-<run>-<event>.json`` in the job's directory, which moves with the job. A
crash before the move is rolled forward by recovery, which plans again (a no-op once the
state exists). Delivery is :mod:`spoolrender.hooks.dispatcher`.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spoolrender.config.hooks import HOOK_EVENTS, HookSpec
from spoolrender.core.vocabulary import JobState
from spoolrender.spool.durable import write_json_atomic
from spoolrender.spool.job_entries import entry_names
from spoolrender.spool.job_file_modes import private_file_mode
from spoolrender.spool.layout import TOKEN_HEX, SpoolLayout, final_name
from spoolrender.spool.spooldir import DirHandle, SpoolPathRefused
from spoolrender.spool.state_listings import LISTING_ORDER

MARKER_NAME = re.compile(
    rf"(?P<due>\d{{13}})-(?P<run>\d{{4,}})-(?P<event>{'|'.join(HOOK_EVENTS)})-(?P<id>.+)\.(?P<uid>[0-9a-f]{{{TOKEN_HEX}}})"
)


def pending_dir(layout: SpoolLayout) -> Path:
    return layout.private / "hooks" / "pending"


def taken_dir(layout: SpoolLayout) -> Path:
    return layout.private / "hooks" / "taken"


def state_filename(run: int, event: str) -> str:
    return f"hook-{run:04d}-{event}.json"


def delivery_id(job_id: str, uid: str, run: int, event: str) -> str:
    """Stable across retries of a delivery: a receiver drops repeats by it."""
    return f"{final_name(job_id, uid)}-{run}-{event}"


def marker_name(due: float, run: int, event: str, job_id: str, uid: str) -> str:
    return f"{max(0, int(due * 1000)):013d}-{run:04d}-{event}-{final_name(job_id, uid)}"


def plan_hooks(
    layout: SpoolLayout,
    hooks: dict[str, HookSpec],
    job_dir: Path,
    job_id: str,
    uid: str,
    run: int,
    event: str,
    record: dict[str, Any],
) -> None:
    """Record the deliveries that ``event`` of this run owes; call before the job moves."""
    names = [name for name, spec in hooks.items() if event in spec.events]
    if not names:
        return
    state_path = job_dir / state_filename(run, event)
    if state_path.exists():
        return  # planned before a crash: recovery replays the move, not the deliveries
    for directory in (pending_dir(layout), taken_dir(layout)):
        directory.mkdir(parents=True, exist_ok=True)
    # The marker first, then the state: a marker without state means "not decided yet"
    # to a dispatcher, while state without a marker would never be delivered.
    marker = pending_dir(layout) / marker_name(0, run, event, job_id, uid)
    with contextlib.suppress(FileExistsError):
        os.close(os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
    state = {
        "event": event,
        "id": job_id,
        "uid": uid,
        "run": run,
        "delivery": delivery_id(job_id, uid, run, event),
        "record": record,
        "hooks": {
            name: {"attempts": 0, "next_at": 0.0, "delivered_at": None, "gave_up_at": None, "last": None}
            for name in names
        },
    }
    # The state holds the payload (the run's error, the job's result): no more readable
    # than the job (spool/job_file_modes.py).
    write_json_atomic(state_path, state, mode=private_file_mode(job_dir))


@dataclass(frozen=True)
class Marker:
    name: str
    due: float
    run: int
    event: str
    job_id: str
    uid: str


def parse_marker(name: str) -> Marker | None:
    m = MARKER_NAME.fullmatch(name)
    if m is None:
        return None
    return Marker(
        name, int(m.group("due")) / 1000, int(m.group("run")), m.group("event"), m.group("id"), m.group("uid")
    )


@contextlib.contextmanager
def open_job_dir(layout: SpoolLayout, job_id: str, uid: str) -> Iterator[DirHandle | None]:
    """The job ``job_id.uid`` open wherever it is now, in any state (it keeps moving while
    hooks wait), or None. Found and opened through the state directories' descriptors
    (spoolrender.spool.spooldir: a listed name is never re-resolved by path); its ``through``
    names the directory itself, wherever it is renamed to while it is open.

    Looked for in done/ first (one open, no listing: where a hook's job almost always is).
    A job whose run ended after done/, failed/, split/ and retry/ were looked in and before
    running/ was listed is in none of them: then it is looked for once more in
    state_listings.LISTING_ORDER, where a job making any one move is seen. Not found, a
    marker past ORPHAN_AFTER_S was dropped as its job's (its hooks never delivered), and a
    delivery's state could not be saved (the hook sent again)."""
    found = next(
        (
            held
            for state in (*_QUICK_ORDER, *LISTING_ORDER)
            if (held := _open_in(layout, state, job_id, uid)) is not None
        ),
        None,
    )
    if found is None:
        yield None
        return
    with found:
        yield found


_QUICK_ORDER = (JobState.DONE, JobState.FAILED, JobState.SPLIT, JobState.RETRY, JobState.RUNNING)


def _open_in(layout: SpoolLayout, state: JobState, job_id: str, uid: str) -> DirHandle | None:
    """Job ``job_id.uid``'s entry in ``state``'s directory, opened, if it is there. Which
    names are its entry is spool/job_entries.py's (with ``find_job``'s, the one rule): by
    its id and uid as the listings parse them, never another user's job whose id starts
    with this one's name; listed through the descriptor it is then opened through, and in
    done/, failed/ and split/ opened by name without a listing."""
    return _open_first(layout.state_dir(state), lambda held: entry_names(state, job_id, uid, held.names))


def _open_first(state_dir: Path, names: Callable[[DirHandle], list[str]]) -> DirHandle | None:
    """The first of ``names`` (of the open ``state_dir``) that is a directory, opened."""
    try:
        holder = DirHandle.open(state_dir)
    except (OSError, SpoolPathRefused):
        return None
    with holder:
        for name in names(holder):
            with contextlib.suppress(OSError, SpoolPathRefused):
                return holder.sub(name)
    return None
