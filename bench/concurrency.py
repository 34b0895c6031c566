#!/usr/bin/env python3
"""Concurrency choice (issue 6): render throughput at slots x threads_per_job (Remotion
`concurrency`) combinations around the default spoolrender computes for this host.

For each combination, 10 sample-like jobs (remotion/sample-jobs/*.yaml cycled, ids and
outputs made unique, `rerun` removed) go into a fresh spool, then `spoolrender run --drain`
renders them; wall time from the runner's start to its exit (worker start-up included, as
in a cron drain) and frames/s. The bundle cache is warmed once before (one Tiny job), all
combinations share it. The combinations are measured round-robin, median over repeats.
spoolrender caps threads so that slots x threads <= cores; a combination above that (e.g.
2 x 2 on 2 cores) is run as `slots` runner processes with one slot of `threads` each.
The default is `spoolrender.runner.capacity.plan_capacity` on a fresh spool's default config.

Reproduce:  .venv/bin/python bench/concurrency.py [--jobs 10] [--repeats 2] [--combos 1x1,2x1,1x2,2x2,3x1]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil
import yaml
from goals import goal
from spools import CMD, make_spool, remotion_config, sample_jobs

from spoolrender.config.spool_config import load_config
from spoolrender.runner.capacity import plan_capacity, usable_cores

LAYOUT = re.compile(r"(\d+) slot\(s\) x (\d+) thread\(s\)")


def cpu_idle_and_total() -> tuple[float, float]:
    times = psutil.cpu_times()
    return times.idle + getattr(times, "iowait", 0.0), sum(times)


def drain(
    spool: Path, batch: list[dict[str, Any]], slots: int, threads: int, cores: int
) -> tuple[float, int, str, float]:
    """Wall seconds, frames rendered, the layout the runner(s) reported, and the share of
    the host's CPU time that was busy during the drain (idle CPU is what a default
    with too few slots leaves on the table)."""
    for job in batch:
        (spool / "incoming" / f"{job['id']}.yaml").write_text(yaml.safe_dump(job))
    capped = max(1, min(threads, cores // slots)) != threads
    runners = [["--slots", "1"]] * slots if capped else [["--slots", str(slots)]]
    idle0, total0 = cpu_idle_and_total()
    t0 = time.monotonic()
    procs = [subprocess.Popen([*CMD, "run", "--drain", "--spool", str(spool), *extra, "--set",
                               f"threads_per_job={threads}"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              text=True) for extra in runners]  # fmt: skip
    logs = [p.communicate()[1] for p in procs]
    wall = time.monotonic() - t0
    idle1, total1 = cpu_idle_and_total()
    busy = 1 - (idle1 - idle0) / max(total1 - total0, 1e-9)
    layouts = [m.group(0) for log in logs if (m := LAYOUT.search(log))]
    results = [json.loads((d / "result.json").read_text()) for d in (spool / "done").iterdir()]
    if len(results) != len(batch) or any(p.returncode for p in procs):
        raise SystemExit(f"{len(results)} of {len(batch)} done at {slots}x{threads}:\n" + "\n".join(logs)[-3000:])
    frames = sum(int(r["details"]["frames"]) for r in results)
    return wall, frames, " + ".join(layouts), busy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--combos", default="1x1,2x1,1x2,2x2,3x1", help="slots x threads_per_job, comma-separated")
    args = parser.parse_args()
    combos = [(int(s), int(t)) for s, t in (c.split("x") for c in args.combos.split(","))]
    cores = usable_cores()
    base = Path(tempfile.mkdtemp(prefix="spoolrender-bench-"))
    remotion = remotion_config(base / "cache")  # one bundle cache for every spool
    try:
        default = plan_capacity(load_config(make_spool(base / "default", remotion), environ={}))
        if (default.slots, default.threads_per_job) not in combos:
            combos.append((default.slots, default.threads_per_job))
        warm = make_spool(base / "warm", remotion)
        (warm / "incoming" / "warm.yaml").write_text("composition: Tiny\n")
        t0 = time.monotonic()
        subprocess.run([*CMD, "run", "--drain", "--spool", str(warm)], check=True, capture_output=True)
        print(f"machine: {os.cpu_count()} cores ({cores} usable); {args.jobs} jobs per run; bundle cache warmed in "
              f"{time.monotonic() - t0:.0f} s; median of {args.repeats} round-robin repeats")  # fmt: skip
        walls: dict[tuple[int, int], list[float]] = {c: [] for c in combos}
        frames: dict[tuple[int, int], int] = {}
        layouts: dict[tuple[int, int], str] = {}
        busy: dict[tuple[int, int], list[float]] = {c: [] for c in combos}
        for rep in range(args.repeats):
            for slots, threads in combos:
                spool = make_spool(base / f"s{slots}t{threads}r{rep}", remotion)
                wall, n, layout, cpu = drain(
                    spool, sample_jobs(args.jobs, f"{slots}x{threads}r{rep}"), slots, threads, cores
                )
                walls[(slots, threads)].append(wall)
                busy[(slots, threads)].append(cpu)
                frames[(slots, threads)], layouts[(slots, threads)] = n, layout
                print(f"  repeat {rep + 1}: {slots} x {threads}: {wall:.1f} s, cpu busy {cpu:.0%}", flush=True)
                shutil.rmtree(spool)
        fps = {c: frames[c] / statistics.median(w) for c, w in walls.items()}
        best = max(fps, key=lambda c: fps[c])
        print(f"  {'slots x threads':<16} {'wall s':>7} {'frames':>6} {'frames/s':>8} {'vs best':>7} "
              f"{'cpu busy':>8}  runner(s)")  # fmt: skip
        for c in combos:
            mark = " <- default" if c == (default.slots, default.threads_per_job) else ""
            print(f"  {f'{c[0]} x {c[1]}':<16} {statistics.median(walls[c]):>7.1f} {frames[c]:>6} {fps[c]:>8.1f} "
                  f"{fps[c] / fps[best]:>7.2f} {statistics.median(busy[c]):>8.0%}  {layouts[c]}{mark}")  # fmt: skip
        d = (default.slots, default.threads_per_job)
        share = fps[d] / fps[best]
        print(f"best: {best[0]} x {best[1]} ({fps[best]:.1f} frames/s); default plan_capacity: {d[0]} x {d[1]} "
              f"({default.reason}), {share:.2f} of best")  # fmt: skip
        print(goal("default within 5% of the best", f"{share:.2f} of best", share >= 0.95))
        print(f"reproduce: .venv/bin/python bench/concurrency.py --jobs {args.jobs} --repeats {args.repeats} "
              f"--combos {args.combos}")  # fmt: skip
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
