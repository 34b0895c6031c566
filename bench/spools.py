"""What the benchmarks share: the CLI command, fresh spools, and batches of sample jobs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
REMOTION = ROOT / "remotion"
SAMPLES = sorted((REMOTION / "sample-jobs").glob("*.yaml"))
CMD = [sys.executable, "-m", "spoolrender.cli"]


def make_spool(path: Path, config: dict[str, Any]) -> Path:
    """`spoolrender init` at ``path``, with ``config`` over settle_seconds 0 (the benchmarks
    drop complete files; waiting for them to settle would only add a constant)."""
    subprocess.run([*CMD, "init", str(path)], check=True, capture_output=True)
    (path / "spoolrender.yaml").write_text(yaml.safe_dump({"settle_seconds": 0, **config}))
    return path


def remotion_config(cache: Path) -> dict[str, Any]:
    """This checkout's Remotion project, with a bundle cache shared by the benchmark's spools."""
    return {"remotion_project": str(REMOTION), "cache_dir": str(cache)}


def sample_jobs(n: int, tag: str) -> list[dict[str, Any]]:
    """``n`` jobs cycling through remotion/sample-jobs/, ids and outputs made unique with
    ``tag``, `rerun` removed (each id is published once)."""
    out = []
    for i in range(n):
        job = yaml.safe_load(SAMPLES[i % len(SAMPLES)].read_text())
        job["id"] = f"{job['id']}-{tag}-{i:02d}"
        job["output"] = f"bench/{job['id']}.mp4"
        job.pop("rerun", None)
        out.append(job)
    return out
