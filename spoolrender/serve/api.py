"""What `spoolrender serve`'s JSON API answers, without any HTTP.

Every answer is built by the code `status` and `show` use (:func:`status.collect_status`,
:func:`lookup.find_job` and :func:`lookup.describe`), so the API and the command line never
disagree about a spool. The write actions are `submit`, `retry` and `cancel` of
:mod:`spoolrender.ops.control`, with their validation.

The middle layer of :mod:`spoolrender.serve`, below the HTTP handler, above the read
model (:mod:`.readmodel`, which checks ids and finds entries). No path is ever taken from
a request: a log is found by listing the job's own directory.
"""

from __future__ import annotations

import dataclasses
import os
import re
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePath
from typing import Any, TypeVar

from spoolrender import defaults
from spoolrender.config.queues import incoming_view
from spoolrender.config.spool_config import SpoolConfig
from spoolrender.errors import JobInvalid, JobMoving, SpoolrenderError
from spoolrender.jobfile import ID_PATTERN, parse_job, read_job_bytes
from spoolrender.ops.control import cancel, pause, resume, retry
from spoolrender.ops.id_hints import close_ids, ids_hint
from spoolrender.ops.lookup import (
    JOB_SCHEMA_VERSION,
    LIVE_STATES,
    Located,
    by_relevance,
    describe,
    entry_mtime,
    find_job,
    incoming_id,
    job_dir_of,
    read_entry,
    read_job_file,
)
from spoolrender.ops.metrics import spool_metrics_text
from spoolrender.ops.running_items import listed_running_info, running_info
from spoolrender.ops.split_progress import chunk_table, split_info
from spoolrender.ops.status import (
    SCHEMA_VERSION,
    collect_status,
    pause_reason,
    read_failure,
    retry_info,
    spool_clock,
)
from spoolrender.ops.submission import submit
from spoolrender.serve.browse import Filters, JobIndex, state_listings
from spoolrender.serve.outputs import output_urls
from spoolrender.serve.posters import find_ffmpeg
from spoolrender.serve.readmodel import (
    ApiError,
    check_job_id,
    final_id,
    find_entries,
    private_mode,
    refuse_private,
    result_summary,
)
from spoolrender.spool.layout import RETRY_NAME, SpoolLayout, final_name, list_names, new_token
from spoolrender.spool.spooldir import DirHandle, SpoolPathRefused

T = TypeVar("T")

DEFAULT_LIMIT = 100
MAX_LIMIT = 1000
DEFAULT_LOG_BYTES = 64 * 1024
MAX_LOG_BYTES = 1024 * 1024
MAX_LOG_LINES = 10_000
MAX_REASON = 200  # a pause reason: one line for `status`
LOG_FILE = re.compile(r"run-(\d{4,})\.log")


# --- reading ------------------------------------------------------------------------------


def status_document(config: SpoolConfig) -> dict[str, Any]:
    """Exactly what ``status --json`` prints (status.schema.json)."""
    return collect_status(config)


def metrics_text(config: SpoolConfig) -> str:
    """The spool gauges in the Prometheus text format (as ``status --prometheus``)."""
    return spool_metrics_text(config)


def list_jobs(
    config: SpoolConfig,
    *,
    state: str | None,
    limit: int,
    offset: int,
    filters: Filters | None = None,
    index: JobIndex | None = None,
    newest_first: bool = False,
) -> dict[str, Any]:
    """``GET /jobs``: one page of jobs (of one state or all), with the spool's counts.

    ``newest_first``: every state newest first (retry: next due first), as `spoolrender
    list` pages (:meth:`JobIndex.select`); else each state in its browsing order.

    Items share their fields with the ``status --json`` objects: running items are its
    ``running`` objects, retry items its ``retry`` objects, failed items its
    ``recent_failures`` objects; each also says its ``state``. Done items carry
    ``finished_at`` and the result (``output``, ``bytes``, ...), incoming ones ``queued_at``,
    running ones ``started_at``, retry ones the ``kind`` of their last error. Every item
    has its ``queue`` and ``requires`` tags (null where the job file does not parse).
    ``total`` counts what ``filters`` let through (:mod:`.browse`).
    """
    filters = filters or Filters()
    index = index or JobIndex(config)
    posters = find_ffmpeg(config) is not None
    layout = SpoolLayout(config.spool)
    layout.check()
    # A running job whose run ends between the listing and its read would be listed STALE,
    # without progress: the page is then listed again (status.read_status does the same).
    for _ in range(defaults.MOVED_READ_ATTEMPTS):
        now, fs_now = spool_clock(layout)
        listing = state_listings(layout)
        chosen, total = _page_names(index, listing, (state,) if state else defaults.STATE_DIRS, filters,
                                    limit=limit, offset=offset, newest_first=newest_first)  # fmt: skip
        items = [_job_item(config, index, layout, s, name, now, fs_now, posters) for s, name in chosen]
        if None not in items:
            break
    jobs = [item for item in items if item is not None]
    return {
        "schema": SCHEMA_VERSION,
        "spool": str(config.spool),
        "generated_at": now,
        "counts": {s: len(names) for s, names in listing.items()},
        # Of the incoming ones (a page of them only: it reads their files): waiting for their
        # not_before ("complete": every file was read).
        "scheduled": None
        if state != "incoming"
        else dict(zip(("count", "complete"), index.scheduled(listing["incoming"], fs_now), strict=True)),
        "paused": pause_reason(layout),
        "state": state,
        "total": total,
        "offset": offset,
        "limit": limit,
        "jobs": jobs,
    }


def _page_names(
    index: JobIndex, listing: dict[str, list[str]], states: tuple[str, ...], filters: Filters, *,
    limit: int, offset: int, newest_first: bool,
) -> tuple[list[tuple[str, str]], int]:  # fmt: skip
    """The (state, name) of each entry on the page, and how many entries ``filters`` let through."""
    chosen: list[tuple[str, str]] = []
    total = 0
    skip = offset
    for s in states:
        names = index.select(s, listing[s], filters, newest_first=newest_first)
        total += len(names)
        if skip >= len(names):
            skip -= len(names)
            continue
        chosen += [(s, name) for name in names[skip : skip + max(0, limit - len(chosen))]]
        skip = 0
    return chosen, total


def _job_item(
    config: SpoolConfig, index: JobIndex, layout: SpoolLayout, s: str, name: str, now: float, fs_now: float,
    posters: bool,
) -> dict[str, Any] | None:  # fmt: skip
    """One item of ``GET /jobs``; None for a running entry that moved on since it was listed."""
    # Read through descriptors (lookup.entry_holder): never re-resolved by this path.
    where = Located("", s, layout.state_dir(s) / name, name)  # spooldir: message only
    item: dict[str, Any] | None
    if s == "running":
        item = listed_running_info(layout, name, now=now, fs_now=fs_now, lease_seconds=config.lease_seconds)
        if item is None:
            return None
        item["started_at"] = index.time(s, name)
    elif s == "retry":
        item = retry_info(name, fs_now) or {"id": name, "entry": name}
        item["kind"] = index.kind(s, name)
    elif s == "split":
        item = split_info(layout, config.output_root, name, now=now)
    elif s == "failed":
        item = _failed_item(where)
    elif s == "done":
        item = {"id": final_id(name), "entry": name, "finished_at": index.time(s, name)}
        summary = _in_job_dir(where, result_summary)
        item.update(summary or {})
        item.update(output_urls(item["id"], item.get("output"), posters=posters))
    else:
        item = {"id": incoming_id(config, where), "entry": name, "queued_at": entry_mtime(where)}
    routed = index.route(s, name)
    if s == "incoming":  # a scheduled job waits here until its not_before (fs clock)
        item["scheduled_for"] = routed.not_before if (routed.not_before or 0) > fs_now else None
    item["queue"], item["requires"] = routed.queue, None if routed.requires is None else list(routed.requires)
    return {"state": s, **item}


def _in_job_dir(where: Located, read: Callable[[Path], T]) -> T | None:
    """``read`` of the claimed entry's job directory, opened through its state directory's
    descriptor (lookup.job_dir_of); None when it moved on or is not a directory."""
    try:
        with job_dir_of(where) as job_dir:
            return read(job_dir.through)
    except (OSError, SpoolPathRefused):
        return None


def _failed_item(where: Located) -> dict[str, Any]:
    kind, reason = _in_job_dir(where, read_failure) or (None, None)
    failed_at = entry_mtime(where)
    return {"id": final_id(where.name), "entry": where.name, "failed_at": failed_at, "kind": kind, "reason": reason}


def _job_spec(config: SpoolConfig, where: Located, through: Path) -> tuple[dict[str, Any] | None, list[str]]:
    path = through if where.state == "incoming" else through / defaults.JOB_FILENAME
    try:
        spec = parse_job(read_job_bytes(path, config.max_job_bytes), f"{where.job_id}.yaml", config)
    except JobInvalid as exc:
        return None, exc.problems
    fields = {f.name: getattr(spec, f.name) for f in dataclasses.fields(spec)}
    return {k: str(v) if isinstance(v, PurePath) else v for k, v in fields.items()}, []


def _private_spec(where: Located, through: Path) -> bool:
    """readmodel.is_private of the job file ``_job_spec`` read (through read_entry's snapshot)."""
    try:
        return private_mode(os.lstat(through if where.state == "incoming" else through / defaults.JOB_FILENAME))
    except OSError:
        return False  # nothing was read from it either


def job_detail(config: SpoolConfig, job_id: str, *, see_private: bool = False) -> dict[str, Any]:
    """``GET /jobs/{id}``: the ``show --json`` object of the job's current entry, and more
    (job.schema.json's ``$defs/served``; without ``others``).

    Added: ``schema`` (:data:`~spoolrender.ops.lookup.JOB_SCHEMA_VERSION`, as in ``show --json``),
    ``entry``, ``queue`` and ``requires`` (as in ``GET /jobs``),
    ``progress``/``stage``/``eta_seconds``/``stale`` (as in status),
    ``errors`` (each run's error), ``job`` (the validated job file, or ``job_problems``),
    ``log_url``, and ``entries`` (every entry of the id, for re-runs).

    ``private``: the job file is readable by its owner only (readmodel.is_private); unless
    ``see_private`` (a request with the token), ``job`` is then null and ``job_problems`` left out.
    """
    try:
        snapshot = read_entry(
            job_id,
            lambda: by_relevance(find_job(config, check_job_id(job_id))),
            lambda found, through: _detail(config, job_id, found, through, see_private),
            layout=SpoolLayout(config.spool),
        )
    except JobMoving as exc:
        raise ApiError(503, str(exc)) from exc
    if snapshot is None:
        close = close_ids(config.spool, job_id)
        raise ApiError(404, f"no job with id {job_id!r}{ids_hint(close)}", suggestions=close)
    return snapshot[1]


def _detail(config: SpoolConfig, job_id: str, found: list[Located], through: Path, see_private: bool) -> dict[str, Any]:
    """The detail of entries ``found``, the current one read through ``through`` (read_entry)."""
    current = found[0]
    info = {"schema": JOB_SCHEMA_VERSION, **describe(config, current, through)}
    info["entry"] = current.entry
    info["progress"], info["stage"], info["eta_seconds"], info["stale"] = None, None, None, None
    if current.state == "running":
        layout = SpoolLayout(config.spool)
        now, fs_now = spool_clock(layout)
        live = running_info(current.path.name, through, now=now, fs_now=fs_now, lease_seconds=config.lease_seconds)
        for key in ("progress", "stage", "eta_seconds", "stale", "heartbeat_age_seconds"):
            info[key] = live[key]
    elif current.state == "done":
        info["progress"] = 1.0
    info["errors"] = [
        {"run": run["run"], "kind": (run.get("error") or {}).get("kind"), "message": run["error"].get("message")}
        for run in info.get("runs", [])
        if run.get("error")
    ]
    info["job"], problems = _job_spec(config, current, through)
    info["scheduled_for"] = _scheduled_for(config, current, info["job"])
    info["private"] = _private_spec(current, through)
    if info["private"] and not see_private:
        info["job"], problems = None, []  # its props and fields are the owner's (and the token's)
    if problems:
        info["job_problems"] = problems
    if info.get("split"):
        key = current.path.name if current.state == "split" else final_name(job_id, current.uid or "")
        info["chunk_table"] = chunk_table(SpoolLayout(config.spool), config.output_root, key, now=time.time())
    info["log_url"] = f"/jobs/{job_id}/log" if info.get("logs") else None
    info["file_url"] = f"/jobs/{job_id}/file"
    output = (info.get("result") or {}).get("output") if current.state == "done" else None
    info.update(output_urls(job_id, output, posters=find_ffmpeg(config) is not None))
    info["page_url"] = f"/job?id={job_id}"
    info["entries"] = [{"state": w.state, "entry": w.entry} for w in found]
    layout = SpoolLayout(config.spool)
    where = JobIndex(config).route(current.state, str(current.path.relative_to(layout.state_dir(current.state))))
    info["queue"], info["requires"] = where.queue, None if where.requires is None else list(where.requires)
    info.update(_queue_place(config, current))
    return info


def _scheduled_for(config: SpoolConfig, where: Located, spec: dict[str, Any] | None) -> float | None:
    """A waiting job's ``not_before`` while it is still ahead (on the spool's clock), else None:
    a scheduled job waits in incoming/ (or retry/) but no runner takes it before then."""
    not_before = (spec or {}).get("not_before")
    if where.state not in ("incoming", "retry") or not isinstance(not_before, int | float):
        return None
    return float(not_before) if not_before > spool_clock(SpoolLayout(config.spool))[1] else None


def _queue_place(config: SpoolConfig, where: Located) -> dict[str, Any]:
    """Where a waiting job stands: ``due`` and ``retry_position`` in retry/ (names sort by
    due time), ``queued_at`` and ``arrived_before`` (waiting files older than it) in incoming/.

    Runners claim incoming files by priority, then age: ``arrived_before`` is who came
    first, not a promise of the claim order.
    """
    layout = SpoolLayout(config.spool)
    if where.state == "retry":
        m = RETRY_NAME.fullmatch(where.path.name)
        names = sorted(list_names(layout.retry))
        position = names.index(where.path.name) + 1 if where.path.name in names else None
        return {"due": int(m.group("due")) / 1000 if m else None, "retry_position": position, "retry_total": len(names)}
    if where.state == "incoming":
        with incoming_view(layout.incoming) as view:  # queue directories too
            times = {name: st.st_mtime for name in view.names if (st := view.stat(name)) is not None}
        queued = times.get(where.name)
        ahead = sum(1 for t in times.values() if queued is not None and t < queued)
        return {"queued_at": queued, "arrived_before": ahead}
    return {}


def job_file(config: SpoolConfig, job_id: str, *, see_private: bool = False) -> tuple[str, bytes]:
    """``GET /jobs/{id}/file``: the job file as submitted (its bytes, never followed links);
    a private one (readmodel.is_private) only if ``see_private``, else a 403."""
    for where in find_entries(config, job_id):
        if not see_private:
            refuse_private(where, "job file")
        try:
            # Through descriptors (lookup.read_job_file): a queue directory swapped for a
            # symlink since the listing is refused, never followed to another file.
            return where.entry, read_job_file(where, config.max_job_bytes)
        except JobInvalid:
            continue  # moved on meanwhile, or not a readable regular file
    raise ApiError(404, f"job {job_id!r} has no readable job file")


def _open_log(where: Located, run: int | None) -> tuple[int, str]:
    """The latest (or ``run``'s) log of a job entry, opened through its job directory's
    descriptor (never following a link), and its name; ``(-1, "")`` if it has none."""
    with job_dir_of(where) as job_dir:
        runs = _log_runs(job_dir)
        if not runs or (run is not None and run not in runs):
            return -1, ""
        name = runs[run if run is not None else max(runs)]
        return job_dir.open_file(name), name


@dataclass(frozen=True)
class LogTail:
    """The end of one render log."""

    entry: str  # state/name of the job entry it belongs to
    name: str  # run-NNNN.log
    size: int  # the whole file
    offset: int  # where ``data`` starts in it
    data: bytes


def _log_runs(job_dir: DirHandle) -> dict[int, str]:
    try:
        names = job_dir.names()
    except OSError:
        return {}
    return {int(m.group(1)): n for n in names if (m := LOG_FILE.fullmatch(n))}


def log_tail(
    config: SpoolConfig,
    job_id: str,
    *,
    run: int | None,
    tail_bytes: int,
    lines: int | None,
    start_at: int | None = None,
    see_private: bool = False,
) -> LogTail:
    """``GET /jobs/{id}/log``: the end of the latest (or ``run``'s) render log of a job.

    With ``start_at``: what the log holds from that byte on (at most ``MAX_LOG_BYTES``,
    the newest), so a client can follow a growing log. The file is found by listing the
    job's directory (never from a request) and opened without following links; only a
    regular file is read. A private job's logs (readmodel.is_private) only if ``see_private``,
    else a 403: a render's output often echoes its props.
    """
    for where in find_entries(config, job_id):
        if where.state == "incoming":
            continue
        if not see_private:
            refuse_private(where, "render logs")
        try:
            fd, name = _open_log(where, run)
        except (OSError, SpoolPathRefused):
            continue  # moved on meanwhile, or not a plain file
        if fd < 0:
            continue
        want = MAX_LOG_BYTES if lines is not None else tail_bytes
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                continue
            start = max(0, st.st_size - want)
            if start_at is not None:
                start = min(st.st_size, max(start_at, st.st_size - MAX_LOG_BYTES))
            data = os.pread(fd, st.st_size - start, start)
        finally:
            os.close(fd)
        if lines is not None:
            kept = data.splitlines(keepends=True)[-lines:] if lines else []
            data = b"".join(kept)
            start = st.st_size - len(data)
        return LogTail(entry=where.entry, name=name, size=st.st_size, offset=max(0, start), data=data)
    which = f"run {run}" if run is not None else "any run"
    raise ApiError(404, f"job {job_id!r} has no render log for {which} yet")


# --- writing ------------------------------------------------------------------------------


def submit_job(config: SpoolConfig, data: bytes, name: str | None) -> dict[str, Any]:
    """``POST /jobs``: validate and drop a job into incoming/ (as ``spoolrender submit``)."""
    if name is None:
        name = f"api-{time.strftime('%Y%m%dT%H%M%S')}-{new_token()[:6]}.yaml"
    if not ID_PATTERN.fullmatch(name):
        raise ApiError(400, "invalid job file name: letters, digits, '.', '_' or '-', starting with a letter or digit")
    final = name if name.endswith(defaults.JOB_SUFFIXES) else name + ".yaml"
    layout = SpoolLayout(config.spool)
    try:
        path = submit(config, data, name)
    except JobInvalid as exc:
        raise ApiError(422, "job is invalid", problems=exc.problems) from exc
    except SpoolrenderError as exc:
        if os.path.lexists(layout.incoming / final):
            raise ApiError(409, f"incoming/{final} already exists; choose another name (?name=)") from exc
        raise ApiError(400, str(exc)) from exc
    job_id = parse_job(data, path.name, config).id
    return {"id": job_id, "state": "incoming", "entry": f"incoming/{path.name}", "url": f"/jobs/{job_id}"}


def retry_job(config: SpoolConfig, job_id: str) -> dict[str, Any]:
    """``POST /jobs/{id}/retry``: as ``spoolrender retry`` (control.retry): a failed job back to
    retry/ with fresh attempts, a retry-waiting one due now; never before its not_before."""
    find_entries(config, job_id)  # 404 for an unknown id
    try:
        changes = retry(config, job_id)
    except SpoolrenderError as exc:  # not failed nor waiting, or another retry won the race
        raise ApiError(409, str(exc)) from exc
    moved = sum(c.entry.startswith("failed/") for c in changes)  # the rest were waiting in retry/ already
    return {"id": job_id, "state": "retry", "moved": moved, "due": min(c.due for c in changes),
            "changes": [c.text for c in changes]}  # fmt: skip


def cancel_job(config: SpoolConfig, job_id: str, who: str) -> dict[str, Any]:
    """``POST /jobs/{id}/cancel``: as ``spoolrender cancel`` (queued: failed now; running: its runner stops it)."""
    found = find_entries(config, job_id)
    if not any(w.state in LIVE_STATES for w in found):
        raise ApiError(409, f"job {job_id!r} is already {found[0].state}: nothing to cancel")
    try:
        done = cancel(config, job_id, who)
    except SpoolrenderError as exc:  # it finished meanwhile
        raise ApiError(409, str(exc)) from exc
    return {"id": job_id, "cancelled": done}


def pause_spool(config: SpoolConfig, reason: str) -> dict[str, Any]:
    """``POST /pause``: as ``spoolrender pause`` (no runner on any host claims; running jobs go on)."""
    if not reason or len(reason) > MAX_REASON or not reason.isprintable():
        raise ApiError(400, f"reason: 1..{MAX_REASON} printable characters")
    pause(config, reason)
    return {"paused": reason}


def resume_spool(config: SpoolConfig) -> dict[str, Any]:
    """``POST /resume``: as ``spoolrender resume``."""
    return {"paused": None, "was_paused": resume(config)}
