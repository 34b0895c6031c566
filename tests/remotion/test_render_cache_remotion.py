"""The render cache with the real stack: one tiny Remotion render, then the same job is a hit.

Marked `remotion` like tests/remotion/test_remotion_e2e.py (skipped with a reason only when the
stack is not installed; scripts/setup.sh installs it).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from support.checkout import REMOTION, REMOTION_MARKS
from support.spool_jobs import drop, entries, write_spool_config

from spoolrender.config.spool_config import load_config
from spoolrender.runner.loop import Runner
from spoolrender.spool.layout import SpoolLayout

pytestmark = REMOTION_MARKS


def _done(layout: SpoolLayout, job_id: str) -> Path:
    (entry,) = [e for e in entries(layout, "done") if e.startswith(f"{job_id}.")]
    return layout.done / entry


def _result(layout: SpoolLayout, job_id: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((_done(layout, job_id) / "result.json").read_text())
    return data


def test_the_same_remotion_job_again_is_a_hit(spool: SpoolLayout, tmp_path: Path, sample_bundles: Path) -> None:
    write_spool_config(spool, {"remotion_project": str(REMOTION), "cache_dir": str(sample_bundles),
                               "slots": 1, "lease_seconds": 30, "render_cache": True})  # fmt: skip
    job = {"composition": "Tiny", "props": {"frames": 6, "color": "#123456"}}
    drop(spool, "first.yaml", {**job, "output": "tiny/first.mp4"})
    summary = Runner(load_config(spool.root, environ={}), drain=True).run()
    assert summary.done == 1, entries(spool, "failed")
    first = _result(spool, "first")
    assert first["cache"] == "stored" and first["details"]["frames"] == 6
    drop(spool, "second.yaml", {**job, "output": "tiny/second.mp4"})
    runner = Runner(load_config(spool.root, environ={}), drain=True)
    assert runner.run().done == 1
    second = _result(spool, "second")
    assert second["cache"] == "hit" and second["cache_source"]["id"] == "first"
    # The hit's details are the source render's, and it was not rendered (the log says so).
    assert second["details"]["frames"] == 6 and second["details"]["codec"] == first["details"]["codec"]
    a, b = spool.root / "output/tiny/first.mp4", spool.root / "output/tiny/second.mp4"
    assert a.read_bytes() == b.read_bytes() and os.stat(a).st_ino == os.stat(b).st_ino
    log = (_done(spool, "second") / "run-0001.log").read_text()
    assert "render cache hit" in log and "end of second run log" not in log
