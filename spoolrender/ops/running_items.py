"""A running job as `status` (and serve's pages, events and `list`) show it: its heartbeat's
host, run, progress and stage, its ETA and whether its heartbeat is stale.

The heartbeat of a listed running/ entry is read through running/'s descriptor
(spoolrender.spool.spooldir). A job can move on between the listing and that read (its run ends:
done/, retry/, failed/, split/); its heartbeat goes with it, so the read says so
(:func:`listed_running_info`) instead of showing the job as STALE without progress.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from spoolrender.ops.runner_view import eta_seconds
from spoolrender.spool.heartbeat import Heartbeat, heartbeat_stat, read_heartbeat
from spoolrender.spool.layout import RUNNING_NAME, SpoolLayout
from spoolrender.spool.spooldir import DirHandle, SpoolPathRefused


def running_info(name: str, job_dir: Path, *, now: float, fs_now: float, lease_seconds: float) -> dict[str, Any]:
    """One ``running`` item of the status document (heartbeat, progress, ETA, staleness) of
    running/``name``, read in ``job_dir`` (lookup.read_entry's open directory)."""
    token = _token_of(name)
    hb, hb_mtime = read_heartbeat(job_dir, token), _heartbeat_mtime(job_dir, token)
    return _running_item(name, hb, hb_mtime, now=now, fs_now=fs_now, lease_seconds=lease_seconds)


def listed_running_info(
    layout: SpoolLayout, name: str, *, now: float, fs_now: float, lease_seconds: float
) -> dict[str, Any] | None:
    """:func:`running_info` of running/``name`` as a listing found it, opened through
    running/'s descriptor (spoolrender.spool.spooldir); None if it has moved on since (its run
    ended, or it was given back): read after its move, its heartbeat gone with it, it would
    show as a STALE job without progress."""
    read = listed_heartbeat(layout, name)
    return None if read is None else _running_item(name, *read, now=now, fs_now=fs_now, lease_seconds=lease_seconds)


def _token_of(name: str) -> str | None:
    m = RUNNING_NAME.fullmatch(name)
    return m.group("token") if m else None


def _running_item(
    name: str, hb: Heartbeat | None, hb_mtime: float | None, *, now: float, fs_now: float, lease_seconds: float
) -> dict[str, Any]:
    m = RUNNING_NAME.fullmatch(name)
    age = None if hb_mtime is None else max(0.0, fs_now - hb_mtime)
    started = hb.started if hb is not None else None
    progress = hb.progress if hb is not None else None
    eta = None
    if started and hb is not None:
        eta = eta_seconds((hb.updated or now) - started, progress)
    return {
        "id": m.group("id") if m else name,
        "entry": name,
        "host": hb.host if hb else None,
        "pid": hb.pid if hb else None,
        "run": hb.run if hb else None,
        "progress": progress,
        "stage": hb.stage if hb else None,
        "eta_seconds": None if eta is None else round(eta, 1),
        "heartbeat_age_seconds": None if age is None else round(age, 1),
        "stale": age is None or age > lease_seconds,
    }


def listed_heartbeat(layout: SpoolLayout, name: str) -> tuple[Heartbeat | None, float | None] | None:
    """The heartbeat of running/``name`` as listed (its claim's: the token in its name) and
    its file's mtime, read through running/'s descriptor (a listed name is never re-resolved
    by path); (None, None) when it cannot be read; None when the entry is gone from running/
    (moved on since the listing)."""
    token = _token_of(name)
    try:
        with DirHandle.open(layout.running) as running:
            try:
                with running.sub(name) as entry:
                    hb, mtime = read_heartbeat(entry.through, token), _heartbeat_mtime(entry.through, token)
            except FileNotFoundError:
                return None
            # A run that ends drops its heartbeat as its job leaves running/ (lifecycle/transitions.py):
            # none read, and the name gone now, is a job that moved on during the read.
            if (hb is None or mtime is None) and not running.exists(name):
                return None
            return hb, mtime
    except (OSError, SpoolPathRefused):
        return None, None


def _heartbeat_mtime(job_dir: Path, token: str | None) -> float | None:
    """The mtime of the file :func:`read_heartbeat` reads (the claim's own, or an older
    version's ``heartbeat``); None without one."""
    st = heartbeat_stat(job_dir, token)
    return None if st is None else st.st_mtime
