"""`spoolrender status`'s text for people: the status document
(:func:`spoolrender.ops.status.collect_status`, the ``status --json`` document) as a summary
line, the notices and one table per section.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from spoolrender import defaults
from spoolrender.cli.text_parts import describe_chunks, short_age, table_lines
from spoolrender.core.safe_text import printable, shorten
from spoolrender.render_cache.entries import WAITING_STAGE, RenderCache
from spoolrender.spool.beacons import blocked_dirs
from spoolrender.spool.trusted_dirs import UntrustedDir

REASON_WIDTH = 120  # status cuts longer reasons at a word; `show ID` has them whole


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
        summary += f"   oldest waiting {short_age(status['oldest_incoming_age_seconds'])}"
    return summary


def _notices(status: dict[str, Any], paint: Paint) -> list[str]:
    """One line for each thing an operator should know before the tables."""
    p = printable
    lines = []
    if status.get("paused"):
        lines.append(paint(f"PAUSED: {p(status['paused'])} (`spoolrender resume` to claim again)", "33"))
    for b in status.get("blocked_hosts", []):
        # Blocks are on the spool's clock (older status documents lack it: this host's).
        left = short_age(float(b.get("until") or 0) - status.get("spool_time", status["generated_at"]))
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
        lines.append(paint(f"CLOCK host {p(host)}: its wall clock is {short_age(offset)} {side} the spool's "
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
        [
            printable(name),
            str(q["waiting"]),
            short_age(q["oldest_age_seconds"]),
            str(q["runners"]),
            str(q["unserved"] or ""),
        ]
        for name, q in queues.items()
    ]
    return ["", paint("QUEUES", "1"), *table_lines(["QUEUE", "WAITING", "OLDEST", "RUNNERS", "UNSERVED"], rows)]


def _running_section(status: dict[str, Any], paint: Paint) -> list[str]:
    if not status["running"]:
        return []
    p = printable
    rows = []
    for r in status["running"]:
        prog = "-" if r["progress"] is None else f"{r['progress'] * 100:.0f}%"
        if r.get("stage") == WAITING_STAGE:
            prog = "waiting"  # for an identical job's render (the render cache)
        hb = f"{short_age(r['heartbeat_age_seconds'])} ago" + (" STALE" if r["stale"] else "")
        rows.append([p(r["id"]), p(r["host"] or "?"), p(r["pid"] or "?"), prog, short_age(r["eta_seconds"]), hb])
    table = table_lines(["ID", "HOST", "PID", "PROGRESS", "ETA", "HEARTBEAT"], rows)
    return ["", paint("RUNNING", "1"), *(paint(t, "31") if t.endswith("STALE") else t for t in table)]


def _retry_section(status: dict[str, Any], paint: Paint) -> list[str]:
    if not status["retry"]:
        return []
    rows = [
        [
            printable(r["id"]),
            "now" if r["due_in_seconds"] <= 0 else f"in {short_age(r['due_in_seconds'])}",
            str(r["priority"]),
        ]
        for r in status["retry"][:20]
    ]
    lines = ["", paint("RETRY", "1"), *table_lines(["ID", "DUE", "PRIORITY"], rows)]
    if len(status["retry"]) > 20:
        lines.append(f"  ... and {len(status['retry']) - 20} more")
    return lines


def _split_section(status: dict[str, Any], paint: Paint) -> list[str]:
    if not status.get("split"):
        return []
    rows = [
        [printable(s["id"]), describe_chunks(s["chunks"]) if s["chunks"] else "?",
         "-" if s["progress"] is None else f"{s['progress'] * 100:.0f}%",
         "join next" if s.get("joining") else short_age(s["eta_seconds"])]
        for s in status["split"]
    ]  # fmt: skip
    return ["", paint("SPLIT (rendering in chunks)", "1"), *table_lines(["ID", "CHUNKS", "PROGRESS", "ETA"], rows)]


def _failures_section(status: dict[str, Any], paint: Paint) -> list[str]:
    if not status["recent_failures"]:
        return []
    p = printable
    rows = [
        [p(f["id"]), p(f["kind"] or "?"), p(shorten(str(f["reason"] or "?"), REASON_WIDTH))]
        for f in status["recent_failures"]
    ]
    return ["", paint("RECENT FAILURES", "1"), *(paint(t, "31") for t in table_lines(["ID", "KIND", "REASON"], rows))]


def _runners_section(status: dict[str, Any], paint: Paint) -> list[str]:
    if not status["runners"]:
        return ["", paint("RUNNERS", "1"), "  none: start one with `spoolrender run` (or `run --drain` from cron)"]
    p = printable
    rows = [
        [p(r.get("host")), p(r.get("pid")), p(f"{r.get('busy')}/{r.get('slots')}"),
         p(",".join(r.get("queues") or ["*"]) + (f" [{','.join(r['tags'])}]" if r.get("tags") else "")),
         f"{short_age(r['seen_seconds_ago'])} ago" + ("" if r["online"] else " OFFLINE")]
        for r in status["runners"]
    ]  # fmt: skip
    return ["", paint("RUNNERS", "1"), *table_lines(["HOST", "PID", "BUSY", "QUEUES [TAGS]", "LAST SEEN"], rows)]


def _cannot_claim_section(status: dict[str, Any], paint: Paint) -> list[str]:
    # Entries a runner cannot claim (a directory of mode 555, ...): tried again with a
    # growing delay, listed here so that someone can fix or remove them.
    online = [r for r in status["runners"] if r["online"]]
    # Named in their directory: a retry/ entry whose claim failed waits blocked too.
    blocked = sorted({(f"{d}/{name}", r["blocked"][name]) for r in online for name, d in blocked_dirs(r).items()})
    if not blocked:
        return []
    rows = [[printable(entry), printable(why)] for entry, why in blocked]
    return ["", paint("CANNOT CLAIM", "1"), *(paint(t, "33") for t in table_lines(["ENTRY", "REASON"], rows))]


def describe_spool_io(condition: dict[str, Any]) -> str:
    """``spool I/O: No space left on device since 10:02 on host vm (claiming paused,
    retrying every 30 s)``: one runner's trouble, for people (the dashboard says the same in
    serve/web/app.js)."""
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
        text += (f"; last purge {short_age(fs_now - last['ended'])} ago on {printable(last.get('host'))} "
                 f"({removed.get('done', 0)} done, {removed.get('failed', 0)} failed removed)")  # fmt: skip
    else:
        text += "; no purge yet (a runner purges within minutes of starting)"
    if retention.get("purging"):
        text += f"; purging now on {printable(retention['purging']['host'])}"
    return text


def describe_usage(output_root: Path, max_bytes: int) -> str | None:
    """One line for `status` about the render cache's size (None when there is no cache)."""
    cache = RenderCache(output_root, max_bytes)
    try:
        if not cache.entries_dir.is_dir():
            return None
        count, size = cache.usage()
    except OSError as exc:  # status must show the spool whatever the output root's state
        return f"render cache: cannot read {cache.root}: {exc.strerror or exc}"
    except UntrustedDir as exc:
        return f"render cache: not used: {exc}"
    return f"render cache: {count} entries, {size / 1024**2:.1f} MiB of {max_bytes / 1024**2:.0f} MiB"
