"""Whether a claimed job may run at all: its file read, unchanged since it was sealed, valid,
the job it was claimed as, in one queue, with attempts left. A refusal is the RunError the
run is failed with (the executor decides it); the steps after it (the id, the output name,
the render) are the executor's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from spoolrender import defaults
from spoolrender.chunks.ledger import chunk_info
from spoolrender.config.queues import dropped_in, job_queue
from spoolrender.config.spool_config import SpoolConfig
from spoolrender.core.run_error import RunError
from spoolrender.core.vocabulary import FailureKind
from spoolrender.errors import JobInvalid
from spoolrender.intake import seal
from spoolrender.intake.claim import Claim
from spoolrender.jobfile import JobSpec, parse_job, read_job_bytes
from spoolrender.spool.records import RunRecord


@dataclass(frozen=True)
class Admitted:
    """A job that may run: its spec, and its chunk.json if the claim is a chunk entry."""

    spec: JobSpec
    chunk: dict[str, Any] | None


def admit(
    claim: Claim, base: dict[str, Any], runs: list[RunRecord], attempt: int, config: SpoolConfig
) -> Admitted | RunError:
    """The claimed job, or why it fails. Sets what the claim learns on the way (its job
    file's identity, the seal, whether it is a chunk entry, the details of its records)
    and ``base["details"]``, which every record of this run carries from here on."""
    if claim.refusal is not None:  # the claimed file is no job file (a FIFO, too big...)
        return RunError(FailureKind.INVALID_JOB, claim.refusal, False)
    spec = _read_job(claim, runs, config)
    if isinstance(spec, RunError):
        return spec
    # Read once: a chunk entry is made with its chunk.json, which never changes after
    # (spoolrender.chunks.moves); a job's own entry never has one, nor a fresh claim.
    chunk = None if claim.fresh else chunk_info(claim.job_dir)
    claim.chunk_entry = chunk is not None
    if chunk is None and spec.id != claim.job_id:
        # Claimed as another job (its file replaced between a scan and a claim): nothing
        # of that job's id may be used for this one, nor this one published under it.
        message = (
            f"the job file says id {spec.id!r}, but it was claimed as job {claim.job_id!r} "
            "(replaced after it was queued); submit it again"
        )
        return RunError(FailureKind.INVALID_JOB, message, False)
    assert claim.job_file is not None  # set by _read_job
    # The claim holds the same dict: a spool error before the run is decided keeps them.
    base["details"] = claim.details = {
        "priority": spec.priority,
        "output": str(spec.output),
        "renderer": spec.renderer,
        seal.SEAL_KEY: claim.job_file.sha256,  # the seal, once this run is decided
    }
    queue, conflict = job_queue(claim.queue_dir if claim.fresh else dropped_in(claim.job_dir), spec.queue)
    if conflict is not None:
        return RunError(FailureKind.INVALID_JOB, conflict, False)
    base["details"]["queue"] = queue
    if spec.requires:
        base["details"]["requires"] = list(spec.requires)
    if attempt > spec.max_attempts:
        used = f"no attempts left ({attempt - 1} of {spec.max_attempts} used)"
        return RunError(FailureKind.ATTEMPTS_EXHAUSTED, used, False)
    return Admitted(spec, chunk)


def _read_job(claim: Claim, runs: list[RunRecord], config: SpoolConfig) -> JobSpec | RunError:
    """The job file's bytes, checked against the seal of earlier runs, parsed."""
    try:
        # The private copy (intake/owncopy.py): runner-owned and read-only, so these bytes are
        # the ones every later step reads too ({job_file}, chunks, hooks, show).
        data = claim.copied
        if data is None:  # not copied by this claim (a retry's copy is older)
            data = read_job_bytes(claim.job_dir / defaults.JOB_FILENAME, config.max_job_bytes)
    except JobInvalid as exc:
        return RunError(FailureKind.INVALID_JOB, "; ".join(exc.problems), False)
    claim.job_file = seal.JobFileState.of(data)
    sealed = seal.sealed_hash(runs)
    claim.sealed = sealed is not None
    if sealed is not None and sealed != claim.job_file.sha256:
        return RunError(seal.JOB_CHANGED, seal.refused_change(sealed, f"is now {claim.job_file.short()}"), False)
    try:
        return parse_job(data, claim.source_name, config)
    except JobInvalid as exc:
        return RunError(FailureKind.INVALID_JOB, "; ".join(exc.problems), False)
