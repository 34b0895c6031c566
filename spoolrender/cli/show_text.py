"""`spoolrender show`'s text for people: the job document
(:func:`spoolrender.ops.lookup.describe`, one entry of ``show --json``) as lines.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from spoolrender.cli.text_parts import describe_chunks
from spoolrender.core.safe_text import printable
from spoolrender.spool.records import PUBLISHING, WARNINGS_KEY


def format_description(info: dict[str, Any]) -> str:
    """The human view of :func:`spoolrender.ops.lookup.describe`; every value from the spool is escaped."""
    p = printable
    lines = [f"{p(info['id'])}: {info['state']}  ({p(info['path'])})"]
    if "attempts" in info:
        counting = " (counting the one running)" if info["state"] == "running" else ""
        lines.append(f"attempts used: {info['attempts']}{counting}")
    if isinstance(info.get("due"), int | float) and info["state"] == "retry":
        left = info.get("due_in_seconds")
        when = "now" if not isinstance(left, int | float) or left <= 0 else f"in {_span(left)}"
        lines.append(f"next attempt due {_utc(info['due'])} ({when})")
    hb = info.get("heartbeat")
    if hb:
        prog = "-" if hb.get("progress") is None else f"{hb['progress'] * 100:.0f}%"
        eta = "" if info.get("eta_seconds") is None else f", about {_span(info['eta_seconds'])} left"
        lines.append(
            f"running on {p(hb['host'])} pid {hb['pid']}, run {hb['run']}, progress {prog}{eta} ({p(hb.get('stage'))})"
        )
    if info.get("cancel_requested"):
        lines.append("cancel requested: the owning runner stops it at its next heartbeat")
    split = info.get("split")
    if split:
        prog = f"{split['progress'] * 100:.0f}%"
        eta = "" if split.get("eta_seconds") is None else f", about {split['eta_seconds']:.0f} s left"
        lines.append(f"rendered in {split['chunks']['count']} chunks: {describe_chunks(split['chunks'])} ({prog}{eta})")
    runs = info.get("runs", [])
    for i, run in enumerate(runs):
        err = run.get("error") or {}
        why = f"  {p(err.get('kind'))}: {p(err.get('message'))}" if err else ""
        label = run_outcome_label(run, info["state"], i == len(runs) - 1)
        lines.append(f"  run {run['run']}: {label} on {p(run['host'])}{_run_times(run)}{why}")
        lines.extend(f"    warning: {p(w)}" for w in (run.get("details") or {}).get(WARNINGS_KEY) or ())
    if "result" in info:
        r = info["result"]
        lines.append(f"output: {p(r.get('output'))} ({p(r.get('bytes'))} bytes, {p(r.get('duration_seconds'))} s)")
        cache = describe_result(r)
        if cache is not None:
            lines.append(p(cache))
    if "failure" in info:
        lines.append(f"failed: {p(info['failure'].get('reason'))}")
    for problem in info.get("damaged", []):
        lines.append(f"damaged: {p(problem)}")
    for path in info.get("logs", []):
        lines.append(f"log: {p(path)}")
    return "\n".join(lines)


def _utc(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def _span(seconds: float) -> str:
    """``8 s``, ``4m 05s``, ``2h 10m``: a duration for people."""
    whole = max(0, round(seconds))
    if whole < 60:
        return f"{whole} s"
    if whole < 3600:
        return f"{whole // 60}m {whole % 60:02d}s"
    return f"{whole // 3600}h {whole % 3600 // 60:02d}m"


def _run_times(run: dict[str, Any]) -> str:
    """`` at 2026-12-01 12:00:03Z (took 8 s)``: when a run ended, and how long it took."""
    ended, started = run.get("ended"), run.get("started")
    if not isinstance(ended, int | float):
        return ""
    took = f" (took {_span(ended - started)})" if isinstance(started, int | float) else ""
    return f" at {_utc(ended)}{took}"


def run_outcome_label(run: dict[str, Any], state: str, is_last: bool) -> str:
    """A run's outcome in words: a published run is ``done``, not its record's ``publishing``.

    ``publishing`` is the protocol's decision record ("verified; publish, then move to
    done/"); by the time a person reads it the job is done, or a later run says why
    the publish failed, or (still in running/) the publish is in progress.
    """
    outcome = str(run.get("outcome"))
    if outcome != PUBLISHING:
        return outcome
    if not is_last:
        return "rendered"
    return "done" if state == "done" else "publishing"


def describe_result(result: dict[str, Any]) -> str | None:
    """One line for `show` about a done job's use of the render cache (None: it did not use it),
    from its result.json's ``cache`` fields (spoolrender.render_cache)."""
    outcome = result.get("cache")
    if outcome is None:
        return None
    if outcome == "hit":
        source = result.get("cache_source") or {}
        text = f"cache: hit, published from the render of job {source.get('id')} (uid {source.get('uid')})"
    elif outcome == "stored":
        text = "cache: miss, rendered and stored in the render cache"
    elif outcome == "refused":
        text = f"cache: not used: {result.get('cache_refused')}; rendered"
    else:
        text = "cache: miss, rendered (not stored)"
    waited = result.get("cache_waited_seconds")
    return text + (f" after waiting {waited:.1f} s for an identical job" if waited else "")
