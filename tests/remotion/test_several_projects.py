"""Several Remotion projects in one spool: `projects:` in spoolrender.yaml, `project:` in
a job, warm workers per slot and project (bounded, least recently used stopped first).

Real renders: the default project is remotion/ and the second one is written into a temp
dir (its node_modules a symlink to remotion/'s, as a monorepo would have it); one runner
renders both, and each worker's own counters (in result.json) show which worker served
which job.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from support.checkout import REMOTION, REMOTION_MARKS
from support.processes import spoolrender_cmd
from support.remotion_projects import first_frame, make_project, near, pixel, remotion_deps
from support.spool_jobs import drop, entries, write_spool_config

from spoolrender.spool.layout import SpoolLayout

pytestmark = REMOTION_MARKS

PROMO: dict[str, str | bytes] = {
    "src/index.ts": "import {registerRoot} from 'remotion';\nimport {Root} from './Root';\nregisterRoot(Root);\n",
    "src/Root.tsx": """
import {AbsoluteFill, Composition} from 'remotion';
const Solid = () => <AbsoluteFill style={{background: '#0000ff'}} />;
export const Root = () => (
  <Composition id="Solid" component={Solid} width={64} height={48} fps={30} durationInFrames={6} />
);
""",
}


def details(layout: SpoolLayout, job_id: str) -> dict[str, object]:
    (entry,) = [e for e in entries(layout, "done") if e.startswith(job_id + ".")]
    data: dict[str, object] = json.loads((layout.state_dir("done") / entry / "result.json").read_text())["details"]
    return data


def test_one_runner_renders_jobs_of_two_projects_with_bounded_warm_workers(
    tmp_path: Path, spool: SpoolLayout, sample_bundles: Path
) -> None:
    promo = make_project(tmp_path / "promo", PROMO, REMOTION / "node_modules", remotion_deps("4.0.529"))
    write_spool_config(
        spool,
        {"remotion_project": str(REMOTION), "projects": {"promo": str(promo)}, "cache_dir": str(sample_bundles),
         "slots": 1, "warm_projects": 1},
    )  # fmt: skip
    tiny = {"composition": "Tiny", "props": {"frames": 4}}
    # Claimed in priority order: default, promo, default, default.
    drop(spool, "t1.yaml", {**tiny, "output": "t1.mp4", "priority": 4})
    drop(spool, "s1.yaml", {"composition": "Solid", "project": "promo", "output": "s1.mp4", "priority": 3})
    drop(spool, "t2.yaml", {**tiny, "output": "t2.mp4", "priority": 2})
    drop(spool, "t3.yaml", {**tiny, "output": "t3.mp4", "priority": 1})
    proc = subprocess.run(
        spoolrender_cmd("run", "--drain", "-v", "--spool", str(spool.root)),
        capture_output=True, text=True, timeout=1500, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert sorted(entries(spool, "done")) and not entries(spool, "failed")
    out = spool.root / "output"
    solid = details(spool, "s1")
    assert (solid["width"], solid["height"], solid["frames"]) == (64, 48, 6)
    assert near(pixel(first_frame(out / "s1.mp4", 64, 48), 64, 32, 24), (0, 0, 255))
    assert details(spool, "t1")["width"] == 160
    # warm_projects: 1. The promo job stopped the default project's worker (its first
    # job is t1); t2 needed a fresh one, which stayed warm for t3.
    assert details(spool, "t1")["worker"] == {
        "browserLaunches": 1,
        "bundleLoads": 1,
        "jobsRendered": 1,
        "jobsFailed": 0,
    }
    assert details(spool, "s1")["worker"] == {
        "browserLaunches": 1,
        "bundleLoads": 1,
        "jobsRendered": 1,
        "jobsFailed": 0,
    }
    assert details(spool, "t2")["worker"] == {
        "browserLaunches": 1,
        "bundleLoads": 1,
        "jobsRendered": 1,
        "jobsFailed": 0,
    }
    assert details(spool, "t3")["worker"] == {
        "browserLaunches": 1,
        "bundleLoads": 1,
        "jobsRendered": 2,
        "jobsFailed": 0,
    }
    assert proc.stderr.count("(least recently used)") == 2, proc.stderr
    # The second project was rendered as it is: nothing added to it.
    assert sorted(p.name for p in promo.iterdir()) == ["node_modules", "package.json", "src"]
