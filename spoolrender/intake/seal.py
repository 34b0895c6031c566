"""The job a run renders from is the job that was accepted, byte for byte.

Every run renders from the runner's private copy of its job file (spoolrender.intake.owncopy),
written at the claim from one read of the claimed file. Each run hashes the copy it
validates; once a run of the job has been decided, that hash is *sealed*: the run record,
written exclusively and durably by the decision anyway, carries it (``details.job_sha256``),
so the seal costs no extra file or fsync. Every later run compares its copy with the seal:
a job directory of an older version, whose ``job.yaml`` was the submitter's own file and is
copied at its retry claim, fails with kind ``job-changed`` and both hashes if that file was
edited meanwhile, and is never rendered from the edit.

What the submitter does to their own file after the claim (``submitted.yaml``: a rewrite,
a touch, a rename) cannot change a render, so it discards nothing. One thing still does,
before the first decision only: the file continuing the copied bytes (a remote writer that
was still appending when the job was claimed, see owncopy.continued_append). That run is
discarded: nothing published, no attempt used, a ``requeue`` record of kind
``upload-in-progress``, and its next claim copies the complete file. At most
``MAX_UPLOAD_DISCARDS`` times: then the job decides from its copy, with a note.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from spoolrender.core.vocabulary import FailureKind
from spoolrender.spool.records import REQUEUE, RunRecord

SEAL_KEY = "job_sha256"  # in a run record's details: the job file it validated
UPLOAD_IN_PROGRESS = FailureKind.UPLOAD_IN_PROGRESS
JOB_CHANGED = FailureKind.JOB_CHANGED
SUBMITTED_NOTE_KEY = "submitted_file"  # in a run record's details: why a change did not discard it


@dataclass(frozen=True)
class JobFileState:
    """What a run rendered from: its private copy's hash and size."""

    sha256: str
    size: int

    @classmethod
    def of(cls, data: bytes) -> JobFileState:
        return cls(hashlib.sha256(data).hexdigest(), len(data))

    def short(self) -> str:
        return f"{self.size} bytes, sha256 {self.sha256[:12]}"

    def continued_by(self, data: bytes) -> bool:
        """Whether ``data`` is these bytes with more appended (an upload that went on)."""
        return len(data) > self.size and hashlib.sha256(data[: self.size]).hexdigest() == self.sha256


def sealed_hash(runs: list[RunRecord]) -> str | None:
    """The SHA-256 recorded by the job's first decided run, if there was one.

    A ``requeue`` (a discarded run, or a shutdown before the decision) seals nothing.
    """
    for record in runs:
        value = record.details.get(SEAL_KEY) if isinstance(record.details, dict) else None
        if record.outcome != REQUEUE and isinstance(value, str):
            return value
    return None


def upload_discards(runs: list[RunRecord]) -> int:
    """How many runs of the job were discarded as ``upload-in-progress``."""
    return sum(1 for r in runs if r.outcome == REQUEUE and (r.error or {}).get("kind") == UPLOAD_IN_PROGRESS)


def refused_change(sealed: str, what: str) -> str:
    return (
        f"the job file {what} after it was accepted (sealed sha256 {sealed[:12]}); "
        "a queued job cannot be edited: submit a new job instead"
    )
