#!/usr/bin/env python3
"""Render throughput: 10 sample jobs through `spoolrender run --drain` vs a shell-style
loop of `remotion render` (the CLI, one process per job), in one run, on this machine.

Also measures the floor: each job type rendered alone by a warm worker (bundle cached,
browser open), i.e. the pure render time; the floor for the batch is the sum over jobs.
Goals (issue 3): spoolrender >= 1.6x faster than the CLI loop, and within 10% of the floor.

Reproduce:  .venv/bin/python bench/render_throughput.py [--jobs 10] [--skip-cli]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
REMOTION = ROOT / "remotion"
SAMPLES = sorted((REMOTION / "sample-jobs").glob("*.yaml"))


def spoolrender(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "spoolrender.cli", *args], capture_output=True, text=True,
                          check=check)  # fmt: skip


def make_spool(base: Path, name: str, cache: Path, slots: int | None) -> Path:
    spool = base / name
    spoolrender("init", str(spool))
    config: dict[str, Any] = {"remotion_project": str(REMOTION), "cache_dir": str(cache), "settle_seconds": 0}
    if slots:
        config["slots"] = slots
    (spool / "spoolrender.yaml").write_text(yaml.safe_dump(config))
    return spool


def jobs(n: int) -> list[dict[str, Any]]:
    out = []
    for i in range(n):
        job = yaml.safe_load(SAMPLES[i % len(SAMPLES)].read_text())
        job["id"] = f"{job['id']}-{i:02d}"
        job["output"] = f"bench/{job['id']}.mp4"
        job.pop("rerun", None)
        out.append(job)
    return out


def drain(spool: Path, batch: list[dict[str, Any]]) -> tuple[float, list[dict[str, Any]]]:
    for job in batch:
        (spool / "incoming" / f"{job['id']}.yaml").write_text(yaml.safe_dump(job))
    t0 = time.monotonic()
    spoolrender("run", "--drain", "--spool", str(spool))
    wall = time.monotonic() - t0
    results = [json.loads((d / "result.json").read_text()) for d in (spool / "done").iterdir() if d.is_dir()]
    if len(results) != len(batch):
        status = spoolrender("status", "--spool", str(spool)).stdout
        raise SystemExit(f"only {len(results)} of {len(batch)} jobs done:\n{status}")
    for d in (spool / "done").iterdir():
        shutil.rmtree(d)
    return wall, results


def cli_render(job: dict[str, Any], out: Path) -> float:
    t0 = time.monotonic()
    subprocess.run(
        [str(REMOTION / "node_modules/.bin/remotion"), "render", "src/index.ts", job["composition"], str(out),
         f"--props={json.dumps(job.get('props', {}))}", "--browser-executable=/usr/bin/chromium",
         "--log=error"],
        cwd=REMOTION, check=True, capture_output=True,
    )  # fmt: skip
    return time.monotonic() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=10)
    parser.add_argument("--skip-cli", action="store_true", help="do not run the (slow) CLI loop")
    args = parser.parse_args()
    batch = jobs(args.jobs)
    base = Path(tempfile.mkdtemp(prefix="spoolrender-bench-"))
    cache = base / "cache"
    try:
        # A cron-started drain's first job: cold bundle cache, then warm (same content).
        warm = make_spool(base, "warm", cache, 1)
        t0 = time.monotonic()
        drain(warm, [{"id": "warmup", "composition": "Tiny"}])
        bundle_s = time.monotonic() - t0
        t0 = time.monotonic()
        drain(warm, [{"id": "warmup2", "composition": "Tiny"}])
        warm_first_s = time.monotonic() - t0

        # Floor: each job type alone, warm bundle; renderMs as the worker measured it.
        floor_by_type: dict[str, float] = {}
        for sample in SAMPLES:
            job = yaml.safe_load(sample.read_text())
            job.pop("rerun", None)
            times = []
            for rep in range(3):
                _, (res,) = drain(warm, [{**job, "id": f"floor-{rep}", "output": f"floor/{rep}.mp4"}])
                times.append(res["details"]["render_ms"] / 1000)
                (Path(res["output"])).unlink()
                shutil.rmtree(warm / ".spoolrender" / "ids")
                (warm / ".spoolrender" / "ids").mkdir()
            floor_by_type[job["composition"] + ":" + job["id"]] = statistics.median(times)
        floor = sum(floor_by_type[f"{j['composition']}:{j['id'].rsplit('-', 1)[0]}"] for j in batch)

        spool = make_spool(base, "spool", cache, None)
        wall, results = drain(spool, batch)
        frames = sum(r["details"]["frames"] for r in results)

        print(f"machine: {os.cpu_count()} cores; jobs: {len(batch)} ({frames} frames, 1280x720 h264)")
        print(f"first job of a cron drain (Tiny, process start to done): cold bundle cache {bundle_s:.1f} s, "
              f"warm {warm_first_s:.1f} s")  # fmt: skip
        for k, v in floor_by_type.items():
            print(f"floor, one warm render of {k}: median {v:.2f} s")
        print(f"floor for the batch (sum of warm solo renders): {floor:.1f} s")
        print(f"spoolrender run --drain: {wall:.1f} s  ({frames / wall:.1f} frames/s)")
        print(f"spoolrender / floor: {wall / floor:.2f}  (goal <= 1.10)")
        if not args.skip_cli:
            out = base / "cli"
            out.mkdir()
            per_job = [cli_render(job, out / f"{job['id']}.mp4") for job in batch]
            cli_wall = sum(per_job)
            med = statistics.median(per_job)
            print(f"CLI loop (remotion render per job): {cli_wall:.1f} s; median per job {med:.1f} s")
            print(f"speed-up spoolrender vs CLI loop: {cli_wall / wall:.2f}x  (goal >= 1.6x)")
        print(f"reproduce: .venv/bin/python bench/render_throughput.py --jobs {args.jobs}")
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
