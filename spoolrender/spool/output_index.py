"""Which job id published an output name last: one small file per name, in the spool.

``rerun: true`` may replace only an output its own id published last (spoolrender.lifecycle.rerun).
The file at the name cannot say who put it there: a render-cache hit publishes a hard
link to the inode another id's done record names, and a freed inode number is handed to
the next new file. So whoever carries out a publish decision (the run's owner, or the
recoverer that finishes a dead owner's decision: both hold the decided record, see
spoolrender.spool.records) records the publisher under ``.spoolrender/outputs/<sha256 of the
output path>``, after the file is in place and before the job reaches done/. A crash in
between is finished by recovery, which carries the same decision out again
(transitions.complete_publish), so the entry is never missing for a done job.

Cost: one small write-and-rename per publish, not fsynced (:func:`record_publish`;
bench/output_index.py).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from spoolrender.spool.durable import write_json_atomic
from spoolrender.spool.layout import SpoolLayout
from spoolrender.spool.publish import RenderedFile

OUTPUTS_DIR = "outputs"


@dataclass(frozen=True)
class LastPublish:
    """The newest publish to one output name: by which job, and the file it put there."""

    job_id: str
    uid: str
    file: RenderedFile

    def __post_init__(self) -> None:
        if not self.job_id or not self.uid:
            raise ValueError("a publish needs a job id and uid")


def entry_path(layout: SpoolLayout, rel: PurePosixPath) -> Path:
    """The index file of output ``rel`` (hashed: an output path may be long and nested)."""
    return layout.private / OUTPUTS_DIR / hashlib.sha256(str(rel).encode()).hexdigest()


def record_publish(layout: SpoolLayout, rel: PurePosixPath, job_id: str, uid: str, file: RenderedFile) -> None:
    """Record that job ``job_id`` (``uid``) has just published ``file`` at ``rel``."""
    path = entry_path(layout, rel)
    entry = {"output": str(rel), "id": job_id, "uid": uid, "inode": file.inode, "bytes": file.bytes,
             "mtime_ns": file.mtime_ns}  # fmt: skip
    # Atomic (a temporary file renamed over the entry) but not fsynced: an entry lost or
    # cut short by a power cut only refuses reruns (fail-safe), and one that reverts to
    # the name's previous publisher names a file that is no longer there (the identity
    # check refuses it, unless it is the same inode through a render-cache hit: the one
    # case a power cut reopens). Two fsyncs would cost 4-5 ms per publish, ten times the
    # entry itself (bench/output_index.py).
    try:
        write_json_atomic(path, entry, durable=False)
    except FileNotFoundError:
        # A spool made before the index existed: make its directory (mode of ids/).
        with contextlib.suppress(FileExistsError):
            os.mkdir(path.parent, 0o2755)
        write_json_atomic(path, entry, durable=False)


def last_publish(layout: SpoolLayout, rel: PurePosixPath) -> LastPublish | None:
    """The newest recorded publish to ``rel``; None if none was recorded (or it is unreadable)."""
    try:
        entry = json.loads(entry_path(layout, rel).read_bytes())
        file = RenderedFile.recorded(entry)
        if entry.get("output") != str(rel) or file is None:
            return None  # a hash collision or a damaged entry: proves nothing
        return LastPublish(str(entry["id"]), str(entry["uid"]), file)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
