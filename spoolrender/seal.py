"""The job file a run renders from is the file that was accepted, byte for byte.

Every run notes the job file's identity and SHA-256 right after its claim, from the very
bytes it validates. Before the run's decision it looks again:

- If a local process still holds the file open for writing, or its bytes or identity
  changed, and no earlier run was decided, the upload was not finished when the job was
  claimed (a remote writer's long pause, a writer the local checks could not see). The
  run is discarded: nothing published, no attempt used, a ``requeue`` run record with
  kind ``upload-in-progress``, and the job waits in retry/ (the runner does not claim it
  while a local writer holds it) to run again from the complete file.
- Once a run of the job has been decided, its hash is *sealed*: the run record, written
  exclusively and durably by the decision anyway, carries it (``details.job_sha256``), so
  the seal costs no extra file or fsync. A job file that differs from the seal later (a
  group member editing a job queued in retry/) is refused: the job fails with kind
  ``job-changed`` and both hashes, and is never rendered from the edited file.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from spoolrender.errors import JobInvalid
from spoolrender.jobfile import read_job_bytes
from spoolrender.netcache import Attributes, fresh_attributes
from spoolrender.records import REQUEUE, RunRecord
from spoolrender.writers import Writer, lease_probe

SEAL_KEY = "job_sha256"  # in a run record's details: the job file it validated
UPLOAD_IN_PROGRESS = "upload-in-progress"
JOB_CHANGED = "job-changed"


@dataclass(frozen=True)
class JobFileState:
    """What a run saw of its job file: enough to tell any later change."""

    sha256: str
    size: int
    inode: int
    mtime_ns: int

    def short(self) -> str:
        return f"{self.size} bytes, sha256 {self.sha256[:12]}"


def observe(path: Path, data: bytes, *, uncached: bool = False) -> JobFileState:
    """The state of ``path`` whose content ``data`` was just read (``uncached``: as the
    server of a network filesystem has it, see spoolrender.netcache)."""
    st = fresh_attributes(path) if uncached else Attributes.of(os.stat(path, follow_symlinks=False))
    return JobFileState(hashlib.sha256(data).hexdigest(), len(data), st.inode, st.mtime_ns)


def still_writing(path: Path) -> bool:
    # The lease alone (~0.1 ms): a /proc scan per run would cost up to 0.2 s here, and
    # where the lease cannot answer, the hash comparison still catches every change.
    return lease_probe(path) is Writer.HELD


def change_since(path: Path, seen: JobFileState, max_bytes: int, *, uncached: bool = False) -> str | None:
    """Why the job file is no longer what ``seen`` says, or None if it is unchanged.

    ``uncached`` (a network filesystem): compared with the server's bytes, never with a
    prefix this client cached, so a run rendered from a prefix is never decided.
    """
    if still_writing(path):
        return "is still open for writing by a local process"
    try:
        data = read_job_bytes(path, max_bytes, uncached=uncached)
        now = observe(path, data, uncached=uncached)
    except (JobInvalid, OSError) as exc:
        return f"changed during the run and cannot be read back ({exc})"
    if now.sha256 != seen.sha256:
        return f"changed during the run (was {seen.short()}, now {now.short()})"
    if (now.inode, now.mtime_ns) != (seen.inode, seen.mtime_ns):
        return "was rewritten during the run (same bytes, new inode or mtime)"
    return None


def sealed_hash(runs: list[RunRecord]) -> str | None:
    """The SHA-256 recorded by the job's first decided run, if there was one.

    A ``requeue`` (a discarded run, or a shutdown before the decision) seals nothing.
    """
    for record in runs:
        value = record.details.get(SEAL_KEY) if isinstance(record.details, dict) else None
        if record.outcome != REQUEUE and isinstance(value, str):
            return value
    return None


def refused_change(sealed: str, what: str) -> str:
    return (
        f"the job file {what} after it was accepted (sealed sha256 {sealed[:12]}); "
        "a queued job cannot be edited: submit a new job instead"
    )
