"""`spoolrender list`: every job of a state, newest first, a page at a time (mailq, `rq info`).

The read model is the HTTP API's ``GET /jobs`` (:func:`spoolrender.serve.api.list_jobs`):
listings first, a page reads only its own items, so a deep done/ stays quick; `--json`
prints that document as it is. This module only turns it into lines for people.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from spoolrender.cli.text_parts import short_age, table_lines
from spoolrender.config.spool_config import SpoolConfig
from spoolrender.core.safe_text import printable, shorten

# What a row says in its WHEN column, from the item's time field of its state.
_WHEN = {
    "incoming": ("queued_at", "queued {} ago"),
    "running": ("started_at", "started {} ago"),
    "done": ("finished_at", "{} ago"),
    "failed": ("failed_at", "{} ago"),
}
DETAIL_WIDTH = 70


def list_document(config: SpoolConfig, args: argparse.Namespace) -> dict[str, Any]:
    """The page `list` shows: ``GET /jobs``'s document, every state newest first."""
    from spoolrender.serve.api import list_jobs
    from spoolrender.serve.browse import Filters
    from spoolrender.spool.clock import spool_time
    from spoolrender.spool.layout import SpoolLayout

    since = None
    if args.since is not None:
        layout = SpoolLayout(config.spool)
        layout.check()
        # Entry times are the spool filesystem's (file mtimes): "the last hour" is on its clock.
        since = spool_time(layout.private, "list") - args.since
    filters = Filters(kind=args.kind, queue=args.queue, since=since)
    return list_jobs(config, state=args.state, limit=args.limit, offset=args.offset, filters=filters,
                     newest_first=True)  # fmt: skip


def _detail(item: dict[str, Any]) -> str:
    state = item["state"]
    if state == "running":
        prog = "-" if item.get("progress") is None else f"{item['progress'] * 100:.0f}%"
        eta = "" if item.get("eta_seconds") is None else f", ETA {short_age(item['eta_seconds'])}"
        stale = ", STALE" if item.get("stale") else ""
        return f"{prog}{eta} on {item.get('host') or '?'}{stale}"
    if state == "done":
        return f"{item.get('output') or '-'} ({item.get('bytes') or 0} bytes)"
    if state == "failed":
        return f"{item.get('kind') or '?'}: {item.get('reason') or ''}"
    if state == "retry":
        return f"after {item.get('kind') or '?'}"
    if state == "split":
        chunks = item.get("chunks") or {}
        prog = "" if item.get("progress") is None else f" ({item['progress'] * 100:.0f}%)"
        return f"{chunks.get('done', '?')}/{chunks.get('count', '?')} chunks done{prog}"
    return str(item.get("entry", ""))


def _when(item: dict[str, Any], fs_now: float) -> str:
    if item["state"] == "retry":
        due = item.get("due_in_seconds")
        return "due now" if due is None or due <= 0 else f"due in {short_age(due)}"
    key, text = _WHEN.get(item["state"], ("", ""))
    when = item.get(key)
    return text.format(short_age(fs_now - when)) if isinstance(when, int | float) else "-"


def format_list(document: dict[str, Any]) -> str:
    """The rows of a page and a line that says which part of how many it is."""
    fs_now = float(document["generated_at"])
    rows = [
        [item["state"], printable(item["id"]), _when(item, fs_now), printable(item.get("queue") or "-"),
         printable(shorten(_detail(item), DETAIL_WIDTH))]
        for item in document["jobs"]
    ]  # fmt: skip
    lines = table_lines(["STATE", "ID", "WHEN", "QUEUE", "DETAIL"], rows, indent="") if rows else []
    total, offset, shown = document["total"], document["offset"], len(document["jobs"])
    what = f"{document['state']} " if document["state"] else ""
    if shown:
        footer = f"{what}jobs {offset + 1}-{offset + shown} of {total}, newest first"
    else:
        footer = f"no {what}jobs" + (f" past --offset {offset} (there are {total})" if total else " match")
    if offset + shown < total:
        footer += f"; next page: --offset {offset + shown}"
    return "\n".join([*lines, footer])


def print_list(config: SpoolConfig, args: argparse.Namespace) -> None:
    document = list_document(config, args)
    print(json.dumps(document, indent=2, default=str) if args.json else format_list(document))
