"""SIGKILL at each step of the render cache, then recover: nothing lost, published once,
and no cache entry ever half there."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
import yaml
from invariants import audit
from test_crash_points import drain, make_spool

from spoolrender.core.failpoints import CACHE_POINTS
from spoolrender.spool.layout import SpoolLayout

VIDEO = b"the cached video"


def drop(layout: SpoolLayout, job_id: str) -> None:
    job = {"renderer": "command", "command": "props", "props": {"content": VIDEO.decode()}}
    (layout.incoming / f"{job_id}.yaml").write_text(yaml.safe_dump(job))


def drain_until_done(layout: SpoolLayout, count: int) -> None:
    deadline = time.monotonic() + 60
    drain(layout)
    while len(os.listdir(layout.done)) < count and time.monotonic() < deadline:
        time.sleep(0.1)
        drain(layout)


def result(layout: SpoolLayout, job_id: str) -> dict[str, object]:
    (entry,) = [e for e in os.listdir(layout.done) if e.startswith(f"{job_id}.")]
    data: dict[str, object] = json.loads((layout.done / entry / "result.json").read_text())
    return data


@pytest.mark.parametrize("point", CACHE_POINTS)
def test_sigkill_at_each_cache_step_loses_nothing(tmp_path: Path, point: str) -> None:
    layout = make_spool(tmp_path, render_cache=True)
    jobs = {"first"}
    if point == "cache-after-hit":
        drop(layout, "first")  # renders and stores: the next identical job is a hit
        assert drain(layout) == 0
        jobs.add("second")
        drop(layout, "second")
    else:
        drop(layout, "first")
    assert drain(layout, {"SPOOLRENDER_CRASH_AT": point}) == -9  # SIGKILLed at the point
    drain_until_done(layout, len(jobs))
    found = audit(layout, jobs, output_ok={j: VIDEO for j in jobs})
    assert found.ok, found.problems()
    for job_id in jobs:
        record = result(layout, job_id)
        outcomes = [r["outcome"] for r in record["runs"]]  # type: ignore[attr-defined]
        assert outcomes.count("publishing") == 1, outcomes
    killed = result(layout, "second" if point == "cache-after-hit" else "first")
    # Killed after the hit: the retry reuses the first job's entry; killed holding the
    # claim: the retry takes it over and renders; killed after the store (which comes
    # after the publish decision): the recovery carries that decision out.
    assert killed["cache"] == ("hit" if point == "cache-after-hit" else "stored"), killed
    entries = os.listdir(layout.root / "output" / ".spoolrender-cache" / "entries")
    assert len(entries) == 1
    inflight = layout.root / "output" / ".spoolrender-cache" / "inflight"
    assert not inflight.exists() or os.listdir(inflight) == []  # the dead holder's claim was cleared
