"""What a scan of the spool offers to claim: candidates in queue order, and the scan's result.

Shared by the scans of incoming/ (:mod:`spoolrender.intake.scan`) and retry/
(:mod:`spoolrender.intake.retry_scan`) and by the claim itself (:mod:`spoolrender.intake.claim`).
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass, field
from pathlib import Path

from spoolrender.config.spool_config import SpoolConfig
from spoolrender.errors import JobInvalid
from spoolrender.jobfile import JobSpec, parse_job
from spoolrender.jobfile.reading import read_job_at

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
    # What the scan decided on (an incoming regular file): the inode it read and the sha256
    # of the bytes it parsed. The claim takes only that very file (spoolrender.intake.claim).
    inode: int | None = field(compare=False, default=None)
    sha256: str | None = field(compare=False, default=None)


@dataclass(frozen=True)
class ScanResult:
    candidates: list[Candidate]
    waiting_uploads: int  # files present but not yet settled
    next_wake: float | None  # monotonic time something may become claimable
    # Every claimable-now job by route (this runner's or not), for the beacon: see config/queues.py.
    waiting: list[dict[str, object]] = field(default_factory=list)


@dataclass(frozen=True)
class Parsed:
    """A scan's reading of one job file: its spec (None: invalid), and what was read."""

    spec: JobSpec | None
    invalid: bool
    invalid_id: str | None  # the id an invalid file is filed under (its readable `id:`)
    inode: int | None = None  # of the file the bytes came from (None: unreadable)
    sha256: str | None = None


def parse_for_scan(config: SpoolConfig, path: Path, name: str) -> Parsed:
    """A job file parsed for a scan; never raises (a scan must go on)."""
    try:
        data, attrs = read_job_at(None, path, config.max_job_bytes)
    except JobInvalid as exc:
        return Parsed(None, True, exc.job_id)
    except OSError:
        return Parsed(None, True, None)
    digest = hashlib.sha256(data).hexdigest()
    try:
        return Parsed(parse_job(data, name, config), False, None, attrs.inode, digest)
    except JobInvalid as exc:
        return Parsed(None, True, exc.job_id, attrs.inode, digest)
    except Exception:
        # Whatever a file contains must not stop the scan: the run validates it again
        # and fails it with a reason.
        log.exception("unexpected error parsing %s", name)
        return Parsed(None, True, None, attrs.inode, digest)
