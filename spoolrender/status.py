"""`spoolrender status`: the whole spool at a glance, from listings and a few small reads.

Counts come from directory listings only. Heartbeats are read for running jobs, names
decode the retry queue, and only the most recent failures are opened. Ages are measured
against the spool filesystem's clock where possible (see :func:`spoolrender.clock.spool_now`),
so a host with a skewed clock still shows true heartbeat ages.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from typing import Any

from spoolrender import defaults
from spoolrender.clock import spool_now
from spoolrender.config import SpoolConfig
from spoolrender.heartbeat import read_heartbeat
from spoolrender.jobfile import is_candidate_name
from spoolrender.layout import (
    FINAL_NAME,
    RETRY_NAME,
    RUNNING_NAME,
    SpoolLayout,
    list_names,
    priority_from_key,
)

RECENT_FAILURES = 10
SCHEMA_VERSION = 1


def _mtime(path: os.PathLike[str] | str) -> float | None:
    try:
        return os.stat(path).st_mtime
    except OSError:
        return None


def collect_status(config: SpoolConfig) -> dict[str, Any]:
    layout = SpoolLayout(config.spool)
    layout.check()
    now = time.time()
    probe = layout.private / f"clock-status-{os.getpid()}"
    measured = spool_now(probe)
    with contextlib.suppress(OSError):
        probe.unlink()
    fs_now = measured if measured is not None else now

    # Dot-names are never jobs: uploads in progress, .gitkeep, temporary files.
    names = {
        state: [n for n in list_names(layout.state_dir(state)) if not n.startswith(".")]
        for state in defaults.STATE_DIRS
    }
    incoming = [n for n in names["incoming"] if is_candidate_name(n)]
    counts = {state: len(entries) for state, entries in names.items()}
    counts["incoming"] = len(incoming)

    oldest = None
    for n in incoming:
        t = _mtime(layout.incoming / n)
        if t is not None and (oldest is None or t < oldest):
            oldest = t

    running = []
    for name in sorted(names["running"]):
        m = RUNNING_NAME.fullmatch(name)
        job_dir = layout.running / name
        hb = read_heartbeat(job_dir)
        hb_mtime = _mtime(job_dir / defaults.HEARTBEAT_FILENAME)
        age = None if hb_mtime is None else max(0.0, fs_now - hb_mtime)
        started = hb.started if hb is not None else None
        progress = hb.progress if hb is not None else None
        eta = None
        if progress and started and 0 < progress < 1:
            elapsed = (hb.updated or now) - started if hb is not None else 0
            eta = elapsed * (1 - progress) / progress
        running.append(
            {
                "id": m.group("id") if m else name,
                "entry": name,
                "host": hb.host if hb else None,
                "pid": hb.pid if hb else None,
                "run": hb.run if hb else None,
                "progress": progress,
                "stage": hb.stage if hb else None,
                "eta_seconds": None if eta is None else round(eta, 1),
                "heartbeat_age_seconds": None if age is None else round(age, 1),
                "stale": age is None or age > config.lease_seconds,
            }
        )

    retry = []
    for name in sorted(names["retry"]):
        m = RETRY_NAME.fullmatch(name)
        if m is None:
            continue
        due = int(m.group("due")) / 1000
        retry.append(
            {
                "id": m.group("id"),
                "entry": name,
                "due": due,
                "due_in_seconds": round(due - now, 1),
                "priority": priority_from_key(m.group("prio")),
            }
        )

    failures = []
    failed_with_time = [(t, n) for n in names["failed"] if (t := _mtime(layout.failed / n)) is not None]
    for mtime, name in sorted(failed_with_time, reverse=True)[:RECENT_FAILURES]:
        reason, kind = None, None
        try:
            with open(layout.failed / name / defaults.FAILURE_FILENAME, "rb") as fh:
                record = json.loads(fh.read())
            reason, kind = record.get("reason"), record.get("kind")
        except (OSError, ValueError):
            pass
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

    runners = []
    for name in sorted(list_names(layout.runners)):
        if not name.endswith(".json"):
            continue
        try:
            with open(layout.runners / name, "rb") as fh:
                beacon = json.loads(fh.read())
        except (OSError, ValueError):
            continue
        seen = _mtime(layout.runners / name)
        age = None if seen is None else max(0.0, fs_now - seen)
        beacon["seen_seconds_ago"] = None if age is None else round(age, 1)
        beacon["online"] = age is not None and age <= config.lease_seconds
        runners.append(beacon)

    return {
        "schema": SCHEMA_VERSION,
        "spool": str(config.spool),
        "generated_at": now,
        "counts": counts,
        "oldest_incoming_age_seconds": None if oldest is None else round(max(0.0, fs_now - oldest), 1),
        "running": running,
        "retry": retry,
        "recent_failures": failures,
        "runners": runners,
    }


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    seconds = abs(seconds)
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    if seconds < 172800:
        return f"{seconds / 3600:.1f}h"
    return f"{seconds / 86400:.1f}d"


def format_status(status: dict[str, Any]) -> str:
    c = status["counts"]
    lines = [
        f"spool {status['spool']}",
        "  ".join(f"{state} {c[state]}" for state in defaults.STATE_DIRS)
        + (
            f"   oldest waiting {_age(status['oldest_incoming_age_seconds'])}"
            if status["oldest_incoming_age_seconds"] is not None
            else ""
        ),
    ]
    if status["running"]:
        lines.append("")
        lines.append("RUNNING  id / host pid / progress / eta / heartbeat")
        for r in status["running"]:
            prog = "-" if r["progress"] is None else f"{r['progress'] * 100:.0f}%"
            stale = "  STALE" if r["stale"] else ""
            lines.append(
                f"  {r['id']}  {r['host'] or '?'} {r['pid'] or '?'}  {prog}  eta {_age(r['eta_seconds'])}"
                f"  hb {_age(r['heartbeat_age_seconds'])} ago{stale}"
            )
    if status["retry"]:
        lines.append("")
        lines.append("RETRY  id / due")
        for r in status["retry"][:20]:
            when = "now" if r["due_in_seconds"] <= 0 else f"in {_age(r['due_in_seconds'])}"
            lines.append(f"  {r['id']}  {when}")
        if len(status["retry"]) > 20:
            lines.append(f"  ... and {len(status['retry']) - 20} more")
    if status["recent_failures"]:
        lines.append("")
        lines.append("RECENT FAILURES  id / reason")
        for f in status["recent_failures"]:
            reason = (f["reason"] or "?").splitlines()[0] if f["reason"] else "?"
            lines.append(f"  {f['id']}  {reason[:150]}")
    if status["runners"]:
        lines.append("")
        lines.append("RUNNERS  host / pid / slots busy / last seen")
        for r in status["runners"]:
            mark = "" if r["online"] else "  OFFLINE"
            lines.append(
                f"  {r.get('host')}  {r.get('pid')}  {r.get('busy')}/{r.get('slots')}"
                f"  {_age(r['seen_seconds_ago'])} ago{mark}"
            )
    return "\n".join(lines)
