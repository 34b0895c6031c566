"""A real spool in a temp dir, as the tests set it up: fast protocol timings, jobs for
the test render command, dropped the way a well-behaved submitter drops them."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from spoolrender.spool.layout import SpoolLayout
from support.checkout import RENDER_PROPS

# Fast timings for tests: the protocol is the same, only the clocks run quicker.
FAST: dict[str, Any] = {
    "settle_seconds": 0.3,
    "heartbeat_seconds": 0.2,
    "lease_seconds": 2.0,
    "rescan_seconds": 0.5,
    "poll_seconds": 0.2,
    "backoff_base_seconds": 0.05,
    "backoff_cap_seconds": 0.2,
    "grace_seconds": 5,
    "slots": 2,
    "commands": {
        "props": [sys.executable, str(RENDER_PROPS), "{output}", "{props_file}"],
    },
}


def write_spool_config(layout: SpoolLayout, extra: dict[str, Any]) -> None:
    (layout.root / "spoolrender.yaml").write_text(yaml.safe_dump({**FAST, **extra}), encoding="utf-8")


def command_job(**props: Any) -> dict[str, Any]:
    return {"renderer": "command", "command": "props", "props": props}


def drop(layout: SpoolLayout, name: str, job: dict[str, Any] | str | bytes) -> Path:
    """Drop a job into incoming/ the way a well-behaved submitter does (write, then rename)."""
    if isinstance(job, dict):
        data = yaml.safe_dump(job).encode()
    elif isinstance(job, str):
        data = job.encode()
    else:
        data = job
    tmp = layout.incoming / f".{name}.part"
    tmp.write_bytes(data)
    target = layout.incoming / name
    os.rename(tmp, target)
    # Age it past the settle time by the file's own clock, as a job dropped a while ago.
    old = time.time() - 60
    os.utime(target, (old, old))
    return target


def allow_steps(steps_file: Path, count: int) -> None:
    """Let a render_props job with ``steps_file`` go on to PROGRESS step ``count`` of 10 (10
    ends it): a test decides how far a render is, never a clock. Renamed into place, so the
    render never reads a half-written number."""
    part = steps_file.with_name(steps_file.name + ".part")
    part.write_text(str(count))
    os.rename(part, steps_file)


def entries(layout: SpoolLayout, state: str) -> list[str]:
    return sorted(os.listdir(layout.state_dir(state)))
