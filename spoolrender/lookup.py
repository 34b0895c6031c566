"""Finding a job by id in any state, and describing it (`spoolrender show`)."""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spoolrender import defaults
from spoolrender.config import SpoolConfig
from spoolrender.errors import JobInvalid
from spoolrender.heartbeat import read_heartbeat
from spoolrender.jobfile import id_from_filename, is_candidate_name, parse_job, read_job_bytes
from spoolrender.layout import FINAL_NAME, RETRY_NAME, RUNNING_NAME, SpoolLayout, list_names
from spoolrender.queues import list_incoming
from spoolrender.records import attempts_used, read_runs

PATTERNS = {"running": RUNNING_NAME, "retry": RETRY_NAME, "done": FINAL_NAME, "failed": FINAL_NAME}


@dataclass(frozen=True)
class Located:
    job_id: str
    state: str
    path: Path  # the incoming file, or the job directory

    @property
    def entry(self) -> str:
        return f"{self.state}/{self.path.name}"


# A job file is UTF-8 (jobfile.load_yaml_mapping), so the only way its `id:` can spell
# an id without the id's plain bytes is an escape in a double-quoted string.
_ESCAPE = b"\\"


def incoming_id(config: SpoolConfig, path: Path) -> str:
    """The id a waiting file will get: its ``id:`` field, else its file name's stem."""
    try:
        data = read_job_bytes(path, config.max_job_bytes)
    except (JobInvalid, OSError):
        return id_from_filename(path.name)
    return _id_of(config, data, path.name)


def _id_of(config: SpoolConfig, data: bytes, name: str) -> str:
    try:
        return parse_job(data, name, config).id
    except JobInvalid as exc:
        # An invalid job is filed under its readable `id:` (see claim.py): find it so.
        return exc.job_id or id_from_filename(name)


def incoming_has_id(config: SpoolConfig, path: Path, job_id: str) -> bool:
    """True if the waiting file ``path`` will get ``job_id``.

    Parsing every file of a 10k-file incoming/ takes seconds, so a file is parsed only if
    it can get that id: its name gives it, or its bytes hold the id's text or an escape
    that could spell it (ids are plain ASCII, see jobfile.ID_PATTERN).
    """
    named = id_from_filename(path.name) == job_id
    try:
        data = read_job_bytes(path, config.max_job_bytes)
    except (JobInvalid, OSError):
        return named  # unreadable: its id is its file name's
    if not named and job_id.encode() not in data and _ESCAPE not in data:
        return False
    return _id_of(config, data, path.name) == job_id


def find_job(config: SpoolConfig, job_id: str) -> list[Located]:
    """Every place a job with ``job_id`` is (several for re-runs and duplicates), oldest state first."""
    layout = SpoolLayout(config.spool)
    layout.check()
    found = []
    for name in sorted(list_incoming(layout.incoming)):  # queue directories too
        path = layout.incoming / name
        # Not by name alone: an explicit `id:` may differ from the file name.
        if is_candidate_name(path.name) and incoming_has_id(config, path, job_id):
            found.append(Located(job_id, "incoming", path))
    for state, pattern in PATTERNS.items():
        for name in sorted(list_names(layout.state_dir(state))):
            if state != "retry" and not name.startswith(job_id + "."):
                continue  # cheap: done/ may hold 100k entries
            m = pattern.fullmatch(name)
            if m and m.group("id") == job_id:
                found.append(Located(job_id, state, layout.state_dir(state) / name))
    return found


def describe(config: SpoolConfig, where: Located) -> dict[str, Any]:
    """Everything `show` prints about one job: state, attempts, runs, errors, logs, result."""
    info: dict[str, Any] = {"id": where.job_id, "state": where.state, "path": str(where.path)}
    if where.state == "incoming":
        return info
    job_dir = where.path
    runs = read_runs(job_dir)
    info["attempts"] = attempts_used(runs)
    info["runs"] = [r.__dict__ for r in runs]
    info["logs"] = sorted(str(p) for p in job_dir.glob("run-*.log"))
    for name, key in ((defaults.RESULT_FILENAME, "result"), (defaults.FAILURE_FILENAME, "failure")):
        with contextlib.suppress(OSError, ValueError):
            info[key] = json.loads((job_dir / name).read_text())
    if where.state == "running":
        hb = read_heartbeat(job_dir)
        info["heartbeat"] = None if hb is None else hb.__dict__
        info["cancel_requested"] = (job_dir / defaults.CANCEL_FILENAME).exists()
    return info


def format_description(info: dict[str, Any]) -> str:
    lines = [f"{info['id']}: {info['state']}  ({info['path']})"]
    if "attempts" in info:
        lines.append(f"attempts used: {info['attempts']}")
    hb = info.get("heartbeat")
    if hb:
        prog = "-" if hb.get("progress") is None else f"{hb['progress'] * 100:.0f}%"
        lines.append(f"running on {hb['host']} pid {hb['pid']}, run {hb['run']}, progress {prog} ({hb.get('stage')})")
    if info.get("cancel_requested"):
        lines.append("cancel requested: the owning runner stops it at its next heartbeat")
    for run in info.get("runs", []):
        err = run.get("error") or {}
        why = f"  {err.get('kind')}: {err.get('message')}" if err else ""
        lines.append(f"  run {run['run']}: {run['outcome']} on {run['host']}{why}")
    if "result" in info:
        r = info["result"]
        lines.append(f"output: {r['output']} ({r['bytes']} bytes, {r.get('duration_seconds')} s)")
    if "failure" in info:
        lines.append(f"failed: {info['failure'].get('reason')}")
    for path in info.get("logs", []):
        lines.append(f"log: {path}")
    return "\n".join(lines)
