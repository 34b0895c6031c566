"""`spoolrender status`: the whole spool at a glance, from listings and a few small reads.

Counts come from directory listings only. Heartbeats are read for running jobs, names
decode the retry queue, and only the most recent failures are opened. Ages are measured
against the spool filesystem's clock where possible (see :func:`spoolrender.spool.clock.spool_now`),
so a host with a skewed clock still shows true heartbeat ages.

The document is data (``status --json``, the dashboard, the metrics); its text for people
is :mod:`spoolrender.cli.status_text`'s.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from spoolrender import defaults
from spoolrender.config.queues import incoming_view, queue_report
from spoolrender.config.spool_config import SpoolConfig
from spoolrender.hosts.blocks import block_states
from spoolrender.jobfile import is_candidate_name
from spoolrender.ops.listed_routes import listed_groups
from spoolrender.ops.retention_lease import retention_report
from spoolrender.ops.running_items import listed_running_info
from spoolrender.ops.split_progress import joining_info, joining_key, split_info
from spoolrender.spool.beacons import blocked_dirs, listed_beacons, runner_is_dead
from spoolrender.spool.clock import spool_time
from spoolrender.spool.layout import (
    FINAL_NAME,
    RETRY_NAME,
    RUNNING_NAME,
    SpoolLayout,
    priority_from_key,
)
from spoolrender.spool.spooldir import DirHandle, SpoolPathRefused
from spoolrender.spool.state_listings import find_moved, list_job_states

RECENT_FAILURES = 10
# 2: counts.incoming counts the jobs in queue directories (1 counted each directory as
# one entry); "queues", "unserved" (config/queues.py) and "blocked_hosts" (hosts/health.py) added.
# 3: counts.split and "split" (jobs rendered in chunks, waiting for them) added.
# 4: "spool_io" (runners whose writes to the spool fail: full disk, read-only...) added.
# 5: "retention" (keep_done and the other limits, the last purge: ops/retention_lease.py) added.
# 6: runners[].warnings (what a runner's runs went ahead despite: mixed Remotion versions) added.
# 7: runners[].blocked_in (the directory of each blocked entry: incoming or retry) added.
SCHEMA_VERSION = 7


def _mtime(path: os.PathLike[str] | str) -> float | None:
    try:
        return os.stat(path).st_mtime
    except OSError:
        return None


@dataclass(frozen=True)
class SpoolSnapshot:
    """What listings (plus a stat per waiting job and runner beacon) say about a spool."""

    names: dict[str, list[str]]  # per state, job entries only
    counts: dict[str, int]
    oldest_incoming_age: float | None
    runners: list[dict[str, Any]]
    fs_now: float  # the spool filesystem's clock
    now: float  # this host's clock


def spool_clock(layout: SpoolLayout) -> tuple[float, float]:
    """This host's "now" and the spool filesystem's (this host's if it cannot be measured)."""
    return time.time(), spool_time(layout.private, "status")


def take_snapshot(layout: SpoolLayout, lease_seconds: float) -> SpoolSnapshot:
    layout.check()
    now, fs_now = spool_clock(layout)
    # Queue directories count by the jobs in them (schema 2; schema 1 counted the directory);
    # only honoured ones, stat'ed through the listing's descriptors (spoolrender.spool.spooldir).
    # Listed first: a claim moves a job from here into running/ (spool/state_listings.py).
    oldest = None
    names: dict[str, list[str]] = {}
    with incoming_view(layout.incoming) as view:
        names["incoming"] = [n for n in view.names if is_candidate_name(n.rpartition("/")[2])]
        for n in names["incoming"]:
            st = view.stat(n)
            if st is not None and (oldest is None or st.st_mtime < oldest):
                oldest = st.st_mtime
    # Each job once, however it moves meanwhile; chunk entries and dot-names are never jobs.
    names.update(list_job_states(layout))
    names = {state: names[state] for state in defaults.STATE_DIRS}
    counts = {state: len(entries) for state, entries in names.items()}
    runners = []
    for listed in listed_beacons(layout):  # read through runners/'s descriptor
        if listed.beacon is None:
            continue
        beacon, seen = listed.beacon, listed.mtime
        age = max(0.0, fs_now - seen)
        if runner_is_dead(beacon, age):
            continue  # SIGKILLed or long gone: left for a runner to expire, never listed
        for identity in ("boot", "started"):  # only for telling dead runners (schema v1 has none)
            beacon.pop(identity, None)
        beacon["seen_seconds_ago"] = round(age, 1)
        # The beacon's own time (its host's wall clock) against its mtime (the spool's).
        updated = beacon.get("updated")
        offset = float(updated) - seen if isinstance(updated, (int, float)) else None
        beacon["clock_offset_seconds"] = None if offset is None else round(offset, 1)
        beacon["online"] = age <= lease_seconds
        if isinstance(beacon.get("blocked"), dict):
            beacon["blocked_in"] = blocked_dirs(beacon)  # also for an older runner's beacon
        runners.append(beacon)
    return SpoolSnapshot(
        names=names,
        counts=counts,
        oldest_incoming_age=None if oldest is None else max(0.0, fs_now - oldest),
        runners=runners,
        fs_now=fs_now,
        now=now,
    )


def _failure_of(failed: DirHandle, name: str) -> tuple[str | None, str | None]:
    """:func:`read_failure` of failed/``name`` through the open failed/."""
    try:
        with failed.sub(name) as entry:
            return read_failure(entry.through)
    except (OSError, SpoolPathRefused):
        return None, None


def read_failure(job_dir: Path) -> tuple[str | None, str | None]:
    """``(kind, reason)`` of a failed job's failure.json; ``(None, None)`` if unreadable."""
    try:
        with open(job_dir / defaults.FAILURE_FILENAME, "rb") as fh:
            record = json.loads(fh.read())
        return record.get("kind"), record.get("reason")
    except (OSError, ValueError, AttributeError):
        return None, None


def job_counts(layout: SpoolLayout, snap: SpoolSnapshot) -> tuple[dict[str, int], dict[str, str]]:
    """Jobs per state as ``status``, the metrics and serve's history count them, and the
    retry/ entries that are split jobs woken for their join (entry -> job key, sorted):
    they wait for their chunks' join, not for a retry, so they count with split/."""
    joining = {name: key for name in sorted(snap.names["retry"]) if (key := joining_key(layout, name)) is not None}
    counts = dict(snap.counts)
    counts["retry"] -= len(joining)
    counts["split"] = counts.get("split", 0) + len(joining)
    return counts, joining


def collect_status(config: SpoolConfig) -> dict[str, Any]:
    """The ``status --json`` document, of a snapshot taken now."""
    return read_status(config)[1]


def read_status(config: SpoolConfig) -> tuple[SpoolSnapshot, dict[str, Any]]:
    """A snapshot of the spool and its ``status --json`` document.

    A running job whose run ends between the listing and the read of its heartbeat would
    show as STALE, without progress: it is looked for where it went
    (state_listings.find_moved) and counted there, not by listing every state again (done/
    at a million entries costs a second). One found running again (claimed anew) is read
    there; one found nowhere (moving on again, or purged) is left out: the next look shows
    where it went.
    """
    layout = SpoolLayout(config.spool)
    snap = take_snapshot(layout, config.lease_seconds)
    running, moved = [], []
    for name in sorted(snap.names["running"]):
        item = listed_running_info(layout, name, now=snap.now, fs_now=snap.fs_now, lease_seconds=config.lease_seconds)
        if item is None:
            moved.append(name)
        else:
            running.append(item)
    if moved:
        names = {**snap.names, "running": [n for n in snap.names["running"] if n not in moved]}
        for name in moved:
            m = RUNNING_NAME.fullmatch(name)
            found = find_moved(layout, f"{m.group('id')}.{m.group('uid')}") if m else None
            if found is None or found[1] in names[found[0]]:
                continue
            state, entry = found
            if state == "running":
                item = listed_running_info(layout, entry, now=snap.now, fs_now=snap.fs_now,
                                           lease_seconds=config.lease_seconds)  # fmt: skip
                if item is None:
                    continue
                running.append(item)
            names[state] = [*names[state], entry]
        running.sort(key=lambda item: item["entry"])
        snap = replace(snap, names=names, counts={state: len(entries) for state, entries in names.items()})
    return snap, _status_document(config, layout, snap, running)


def _status_document(
    config: SpoolConfig, layout: SpoolLayout, snap: SpoolSnapshot, running: list[dict[str, Any]]
) -> dict[str, Any]:
    names, now, fs_now = snap.names, snap.now, snap.fs_now

    # Due times are on the spool filesystem's clock (spoolrender.spool.clock): so is "due in".
    counts, joining_keys = job_counts(layout, snap)
    joining = [joining_info(layout, config.output_root, name, key, now=now) for name, key in joining_keys.items()]
    retry = [item for name in sorted(names["retry"]) if name not in joining_keys and (item := retry_info(name, fs_now))]

    failures = []
    # Through failed/'s descriptor (spoolrender.spool.spooldir): a listed name is never re-resolved.
    with DirHandle.open(layout.failed) as failed_dir:
        failed_with_time = [(t, n) for n in names["failed"] if (t := _mtime(failed_dir.anchored(n))) is not None]
        newest = sorted(failed_with_time, reverse=True)[:RECENT_FAILURES]
        recent = [(t, n, *_failure_of(failed_dir, n)) for t, n in newest]
    for mtime, name, kind, reason in recent:
        m = FINAL_NAME.fullmatch(name)
        failures.append(
            {
                "id": m.group("id") if m else name,
                "entry": name,
                "failed_at": mtime,
                "kind": kind,
                "reason": reason,
            }
        )

    split = [split_info(layout, config.output_root, name, now=now) for name in sorted(names["split"])] + joining

    listed = None
    if not any(r["online"] and isinstance(r.get("waiting"), list) for r in snap.runners):
        # No runner reports what waits: count the listing, so queues show before any runner starts.
        listed = listed_groups(layout.incoming, names["incoming"], defaults.STATUS_QUEUE_READS, config.max_job_bytes)
    queues, unserved = queue_report(snap.runners, fs_now, listed)
    return {
        "schema": SCHEMA_VERSION,
        "spool": str(config.spool),
        "generated_at": now,
        "spool_time": fs_now,
        "counts": counts,
        "oldest_incoming_age_seconds": None if snap.oldest_incoming_age is None else round(snap.oldest_incoming_age, 1),
        "running": running,
        "retry": retry,
        "split": split,
        "recent_failures": failures,
        "runners": snap.runners,
        "paused": pause_reason(layout),
        "queues": queues,
        "unserved": unserved,
        "blocked_hosts": [b.to_json() for b in block_states(layout, config, fs_now)],
        "spool_io": spool_io_conditions(snap.runners),
        "retention": retention_report(config, fs_now),
    }


def spool_io_conditions(runners: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The spool I/O trouble (spool/io_trouble.py) of every online runner that reports one."""
    return [
        {**r["spool_io"], "host": r.get("host"), "runner": r.get("runner")}
        for r in runners
        if r.get("online") and isinstance(r.get("spool_io"), dict)
    ]


def retry_info(name: str, fs_now: float) -> dict[str, Any] | None:
    """One ``retry`` item of the status document (None: not a retry entry name); ``due``
    and ``fs_now`` are on the spool filesystem's clock, whatever this host's says."""
    m = RETRY_NAME.fullmatch(name)
    if m is None:
        return None
    due = int(m.group("due")) / 1000
    return {
        "id": m.group("id"),
        "entry": name,
        "due": due,
        "due_in_seconds": round(due - fs_now, 1),
        "priority": priority_from_key(m.group("prio")),
    }


def pause_reason(layout: SpoolLayout) -> str | None:
    try:
        text = (layout.private / defaults.PAUSE_FILENAME).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    return text.strip() or "paused"
