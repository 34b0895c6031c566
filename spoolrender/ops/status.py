"""`spoolrender status`: the whole spool at a glance, from listings and a few small reads.

Counts come from directory listings only. Heartbeats are read for running jobs, names
decode the retry queue, and only the most recent failures are opened. Ages are measured
against the spool filesystem's clock where possible (see :func:`spoolrender.spool.clock.spool_now`),
so a host with a skewed clock still shows true heartbeat ages.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from spoolrender import defaults
from spoolrender.config.queues import incoming_view, queue_report
from spoolrender.config.spool_config import SpoolConfig
from spoolrender.core.safe_text import printable, shorten
from spoolrender.hosts.blocks import block_states
from spoolrender.jobfile import is_candidate_name
from spoolrender.ops.listed_routes import listed_groups
from spoolrender.ops.retention_lease import retention_report
from spoolrender.ops.running_items import listed_running_info
from spoolrender.ops.split_progress import describe_chunks, joining_info, joining_key, split_info
from spoolrender.render_cache.entries import WAITING_STAGE
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
REASON_WIDTH = 120  # status cuts longer reasons at a word; `show ID` has them whole
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


def describe_spool_io(condition: dict[str, Any]) -> str:
    """``spool I/O: No space left on device since 10:02 on host vm (claiming paused,
    retrying every 30 s)``: one runner's trouble, for people (status, dashboard)."""
    since = time.strftime("%H:%M", time.localtime(float(condition.get("since") or 0)))
    return (
        f"spool I/O: {condition.get('error')} since {since} on host {condition.get('host')} "
        f"(claiming paused, retrying every {float(condition.get('retry_seconds') or 0):g} s)"
    )


def describe_retention(retention: dict[str, Any], fs_now: float) -> str:
    """``retention: done/ 30d, failed/ 90d; last purge 4m ago on render-01 (120 done, 3 failed removed)``."""
    if not retention["on"]:
        return "retention: off (done/ and failed/ kept until `spoolrender purge`; see keep_done)"
    text = f"retention: {printable(retention['policy'])}"
    last = retention.get("last_purge")
    if isinstance(last, dict) and isinstance(last.get("ended"), int | float):
        removed = last.get("removed") or {}
        text += (f"; last purge {_age(fs_now - last['ended'])} ago on {printable(last.get('host'))} "
                 f"({removed.get('done', 0)} done, {removed.get('failed', 0)} failed removed)")  # fmt: skip
    else:
        text += "; no purge yet (a runner purges within minutes of starting)"
    if retention.get("purging"):
        text += f"; purging now on {printable(retention['purging']['host'])}"
    return text


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


def _table(header: list[str], rows: list[list[str]], indent: str = "  ") -> list[str]:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    fmt = indent + "  ".join(f"{{:<{w}}}" for w in widths)
    return [fmt.format(*header).rstrip(), *(fmt.format(*r).rstrip() for r in rows)]


def format_status(status: dict[str, Any], *, colour: bool = False) -> str:
    """The human view: a summary line, the notices (paused, blocked hosts, no runner...),
    then one table per section that has rows.

    Every value that comes from the spool (ids, host names, reasons, the pause reason)
    is escaped: a file name or an error message must not drive the terminal or add a line.
    """

    def paint(text: str, code: str) -> str:
        return f"\x1b[{code}m{text}\x1b[0m" if colour else text

    lines = [f"spool {printable(status['spool'])}", _summary_line(status), *_notices(status, paint)]
    for section in (_queues_section, _running_section, _retry_section, _split_section, _failures_section,
                    _runners_section, _cannot_claim_section):  # fmt: skip
        lines += section(status, paint)
    return "\n".join(lines)


Paint = Callable[[str, str], str]  # text, SGR code -> the text, coloured if asked


def _summary_line(status: dict[str, Any]) -> str:
    c = status["counts"]
    # split/ (jobs rendered in chunks) only when it holds any: most spools never split.
    summary = "  ".join(
        f"{state} {c.get(state, 0)}"
        for state in defaults.STATE_DIRS
        if state not in defaults.OPTIONAL_STATE_DIRS or c.get(state)
    )
    if status["oldest_incoming_age_seconds"] is not None:
        summary += f"   oldest waiting {_age(status['oldest_incoming_age_seconds'])}"
    return summary


def _notices(status: dict[str, Any], paint: Paint) -> list[str]:
    """One line for each thing an operator should know before the tables."""
    p = printable
    lines = []
    if status.get("paused"):
        lines.append(paint(f"PAUSED: {p(status['paused'])} (`spoolrender resume` to claim again)", "33"))
    for b in status.get("blocked_hosts", []):
        # Blocks are on the spool's clock (older status documents lack it: this host's).
        left = _age(float(b.get("until") or 0) - status.get("spool_time", status["generated_at"]))
        host = p(b.get("host"))
        if b.get("applied", True):
            lines.append(paint(f"BLOCKED host {host}: {p(b.get('reason'))}; it claims one job at a time as a probe "
                               f"(for {left} more, or `spoolrender unblock {host}`)", "31"))  # fmt: skip
        else:
            lines.append(paint(f"NOT BLOCKED host {host}: {p(b.get('held_back'))}, although {p(b.get('reason'))} "
                               f"(for {left} more, or `spoolrender unblock {host}`)", "33"))  # fmt: skip
    for condition in status.get("spool_io", []):
        lines.append(paint(p(describe_spool_io(condition)), "31"))
    if "retention" in status:
        lines.append(describe_retention(status["retention"], status.get("spool_time", status["generated_at"])))
    skews = {
        r["host"]: r["clock_offset_seconds"]
        for r in status["runners"]
        if r.get("online") and abs(r.get("clock_offset_seconds") or 0) >= defaults.CLOCK_SKEW_SHOWN_S
    }
    for host, offset in sorted(skews.items()):
        side = "ahead of" if offset > 0 else "behind"
        lines.append(paint(f"CLOCK host {p(host)}: its wall clock is {_age(offset)} {side} the spool's "
                           "(due times and blocks use the spool's clock)", "33"))  # fmt: skip
    online = [r for r in status["runners"] if r["online"]]
    for r in online:  # what the runs went ahead despite (mixed Remotion versions...)
        for w in r.get("warnings") or []:
            lines.append(paint(f"WARNING host {p(r.get('host'))}: {p(w.get('message'))} (job {p(w.get('job'))})", "33"))
    if not online:
        waiting = sum(status["counts"].get(state, 0) for state in ("incoming", "retry", "split"))
        lines.append(paint(f"NO RUNNER ONLINE: {waiting} job(s) waiting; nothing runs until `spoolrender run` "
                           "starts on a host of this spool", "31"))  # fmt: skip
    for u in status.get("unserved", []) if online else []:  # without runners, the line above says it
        needs = f" requiring {', '.join(u['requires'])}" if u["requires"] else ""
        lines.append(paint(f"UNSERVED: {u['count']} job(s) in queue {p(u['queue'])}{p(needs)}: {p(u['reason'])}", "31"))
    return lines


def _queues_section(status: dict[str, Any], paint: Paint) -> list[str]:
    queues = status.get("queues", {})
    if not (len(queues) > 1 or any(q != "default" for q in queues)):
        return []  # one default queue: nothing to tell apart
    rows = [
        [printable(name), str(q["waiting"]), _age(q["oldest_age_seconds"]), str(q["runners"]), str(q["unserved"] or "")]
        for name, q in queues.items()
    ]
    return ["", paint("QUEUES", "1"), *_table(["QUEUE", "WAITING", "OLDEST", "RUNNERS", "UNSERVED"], rows)]


def _running_section(status: dict[str, Any], paint: Paint) -> list[str]:
    if not status["running"]:
        return []
    p = printable
    rows = []
    for r in status["running"]:
        prog = "-" if r["progress"] is None else f"{r['progress'] * 100:.0f}%"
        if r.get("stage") == WAITING_STAGE:
            prog = "waiting"  # for an identical job's render (the render cache)
        hb = f"{_age(r['heartbeat_age_seconds'])} ago" + (" STALE" if r["stale"] else "")
        rows.append([p(r["id"]), p(r["host"] or "?"), p(r["pid"] or "?"), prog, _age(r["eta_seconds"]), hb])
    table = _table(["ID", "HOST", "PID", "PROGRESS", "ETA", "HEARTBEAT"], rows)
    return ["", paint("RUNNING", "1"), *(paint(t, "31") if t.endswith("STALE") else t for t in table)]


def _retry_section(status: dict[str, Any], paint: Paint) -> list[str]:
    if not status["retry"]:
        return []
    rows = [
        [
            printable(r["id"]),
            "now" if r["due_in_seconds"] <= 0 else f"in {_age(r['due_in_seconds'])}",
            str(r["priority"]),
        ]
        for r in status["retry"][:20]
    ]
    lines = ["", paint("RETRY", "1"), *_table(["ID", "DUE", "PRIORITY"], rows)]
    if len(status["retry"]) > 20:
        lines.append(f"  ... and {len(status['retry']) - 20} more")
    return lines


def _split_section(status: dict[str, Any], paint: Paint) -> list[str]:
    if not status.get("split"):
        return []
    rows = [
        [printable(s["id"]), describe_chunks(s["chunks"]) if s["chunks"] else "?",
         "-" if s["progress"] is None else f"{s['progress'] * 100:.0f}%",
         "join next" if s.get("joining") else _age(s["eta_seconds"])]
        for s in status["split"]
    ]  # fmt: skip
    return ["", paint("SPLIT (rendering in chunks)", "1"), *_table(["ID", "CHUNKS", "PROGRESS", "ETA"], rows)]


def _failures_section(status: dict[str, Any], paint: Paint) -> list[str]:
    if not status["recent_failures"]:
        return []
    p = printable
    rows = [
        [p(f["id"]), p(f["kind"] or "?"), p(shorten(str(f["reason"] or "?"), REASON_WIDTH))]
        for f in status["recent_failures"]
    ]
    return ["", paint("RECENT FAILURES", "1"), *(paint(t, "31") for t in _table(["ID", "KIND", "REASON"], rows))]


def _runners_section(status: dict[str, Any], paint: Paint) -> list[str]:
    if not status["runners"]:
        return ["", paint("RUNNERS", "1"), "  none: start one with `spoolrender run` (or `run --drain` from cron)"]
    p = printable
    rows = [
        [p(r.get("host")), p(r.get("pid")), p(f"{r.get('busy')}/{r.get('slots')}"),
         p(",".join(r.get("queues") or ["*"]) + (f" [{','.join(r['tags'])}]" if r.get("tags") else "")),
         f"{_age(r['seen_seconds_ago'])} ago" + ("" if r["online"] else " OFFLINE")]
        for r in status["runners"]
    ]  # fmt: skip
    return ["", paint("RUNNERS", "1"), *_table(["HOST", "PID", "BUSY", "QUEUES [TAGS]", "LAST SEEN"], rows)]


def _cannot_claim_section(status: dict[str, Any], paint: Paint) -> list[str]:
    # Entries a runner cannot claim (a directory of mode 555, ...): tried again with a
    # growing delay, listed here so that someone can fix or remove them.
    online = [r for r in status["runners"] if r["online"]]
    # Named in their directory: a retry/ entry whose claim failed waits blocked too.
    blocked = sorted({(f"{d}/{name}", r["blocked"][name]) for r in online for name, d in blocked_dirs(r).items()})
    if not blocked:
        return []
    rows = [[printable(entry), printable(why)] for entry, why in blocked]
    return ["", paint("CANNOT CLAIM", "1"), *(paint(t, "33") for t in _table(["ENTRY", "REASON"], rows))]
