"""The read model of `spoolrender serve`: how a job id from a request becomes spool entries.

The bottom spool layer of :mod:`spoolrender.serve`, shared by the API (:mod:`.api`) and
the event stream (:mod:`.events`). A job id from a request is checked against the job-id
pattern before anything touches the filesystem, and no path is ever taken from a request:
a job is found by listing the state directories.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

from spoolrender import defaults
from spoolrender.config.spool_config import SpoolConfig
from spoolrender.errors import SpoolrenderError
from spoolrender.jobfile import ID_PATTERN
from spoolrender.ops.lookup import Located, by_relevance, entry_holder, find_job
from spoolrender.spool.layout import FINAL_NAME
from spoolrender.spool.spooldir import SpoolPathRefused

# A job whose job file no one but its owner may read (spoolrender.intake.owncopy: the runner's copy
# keeps only the submitted file's group/other read bits) is private to the token's holders.
OTHERS_READ_BITS = stat.S_IRGRP | stat.S_IROTH
PRIVATE_REASON = (
    "its job file is readable by its owner only (mode without group or other read bits): "
    "its job file, props and render logs are shown only with Authorization: Bearer <serve_token>"
)
# Which entry of a job (several for re-runs) a client means: a live one first.
RESULT_KEYS = ("output", "bytes", "attempts", "duration_seconds", "finished")


class ApiError(SpoolrenderError):
    """A request the API refuses: an HTTP status, a message and optional extra fields."""

    def __init__(self, status: int, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.extra = extra

    def body(self) -> dict[str, Any]:
        return {"error": self.message, **self.extra}


def check_job_id(text: str) -> str:
    """``text`` if it is a valid job id; else a 400 (before any file is looked at)."""
    if not ID_PATTERN.fullmatch(text):
        shown = text if len(text) <= 60 else text[:57] + "..."
        raise ApiError(
            400,
            f"invalid job id {shown!r}: expected letters, digits, '.', '_' or '-', "
            f"starting with a letter or digit, at most {defaults.MAX_ID_LENGTH} characters",
        )
    return text


def result_summary(job_dir: Path) -> dict[str, Any] | None:
    """The useful part of a done job's result.json (where the video is), or None."""
    try:
        with open(job_dir / defaults.RESULT_FILENAME, "rb") as fh:
            result = json.loads(fh.read())
        return {key: result.get(key) for key in RESULT_KEYS}
    except (OSError, ValueError, AttributeError):
        return None


def final_id(name: str) -> str:
    m = FINAL_NAME.fullmatch(name)
    return m.group("id") if m else name


def find_entries(config: SpoolConfig, job_id: str) -> list[Located]:
    """Every entry of the id a request names, current first (``by_relevance``); a 400 for
    an invalid id before any listing, a 404 for one in no state. Which entries are the
    id's is ``ops.lookup.find_job``'s (and spool/job_entries.py's): incoming/ included."""
    found = find_job(config, check_job_id(job_id))
    if not found:
        raise ApiError(404, f"no job with id {job_id!r}")
    return by_relevance(found)


def is_private(where: Located) -> bool:
    """Whether the entry's job file (a waiting file itself, else its job directory's copy,
    job.yaml) has no group or other read bit. One that cannot be looked at (moved on, no
    copy yet, a swapped directory) is not read either: False, and its read says why."""
    try:
        with entry_holder(where) as (holder, name):
            if where.state == "incoming":
                return private_mode(holder.stat(name))
            with holder.sub(name) as job_dir:
                return private_mode(job_dir.stat(defaults.JOB_FILENAME))
    except (OSError, SpoolPathRefused):
        return False


def private_mode(st: os.stat_result) -> bool:
    """Whether a job file of ``st`` (not followed) is its owner's only: no group or other read bit."""
    return not stat.S_IMODE(st.st_mode) & OTHERS_READ_BITS


def refuse_private(where: Located, what: str) -> None:
    """A 403 for ``what`` of a private job (:func:`is_private`), asked for without the token."""
    if is_private(where):
        raise ApiError(403, f"job {where.job_id!r} is private: {PRIVATE_REASON}; not its {what}", private=True)
