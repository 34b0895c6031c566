"""What a scan of the spool offers to claim: candidates in queue order, and the scan's result.

Shared by the scans of incoming/ (:mod:`spoolrender.scan`) and retry/
(:mod:`spoolrender.retry_scan`) and by the claim itself (:mod:`spoolrender.claim`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

from spoolrender.config import SpoolConfig
from spoolrender.errors import JobInvalid
from spoolrender.jobfile import JobSpec, parse_job, read_job_bytes

log = logging.getLogger(__name__)


@dataclass(frozen=True, order=True)
class Candidate:
    # (rank of its queue in this runner's order, -priority, arrival or due time, name)
    sort_key: tuple[int, int, float, str]
    name: str = field(compare=False)  # relative to incoming/ (``urgent/a.yaml``) or retry/
    source: str = field(compare=False)  # "incoming" or "retry"
    job_id: str = field(compare=False)
    uid: str | None = field(compare=False, default=None)
    queue_dir: str | None = field(compare=False, default=None)  # dropped into incoming/<queue>/


@dataclass(frozen=True)
class ScanResult:
    candidates: list[Candidate]
    waiting_uploads: int  # files present but not yet settled
    next_wake: float | None  # monotonic time something may become claimable
    # Every claimable-now job by route (this runner's or not), for the beacon: see queues.py.
    waiting: list[dict[str, object]] = field(default_factory=list)


def parse_for_scan(config: SpoolConfig, path: Path, name: str) -> tuple[JobSpec | None, bool, str | None]:
    """``(spec, invalid, invalid_id)`` of a job file; never raises (a scan must go on)."""
    try:
        return parse_job(read_job_bytes(path, config.max_job_bytes), name, config), False, None
    except JobInvalid as exc:
        return None, True, exc.job_id
    except OSError:
        return None, True, None
    except Exception:
        # Whatever a file contains must not stop the scan: the run validates it again
        # and fails it with a reason.
        log.exception("unexpected error parsing %s", name)
        return None, True, None
