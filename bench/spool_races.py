#!/usr/bin/env python3
"""Spool core figures: exactly-once claims with several runners, and recovery after SIGKILL.

1. Races: N quick command jobs, R `spoolrender run --drain` processes started together on
   one spool. Counts renders and publishes per job (must be exactly one each) and prints
   the wall time and jobs/s, median over repeats.
2. Recovery: a runner rendering a long job is SIGKILLed; a second runner on the same host
   is started and the time until the job is back in retry/ is measured (same host: the
   released lock proves the owner dead, no lease wait). Median over repeats.

Reproduce:  .venv/bin/python bench/spool_races.py [--jobs 1000] [--runners 4] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import tempfile
import time
from collections import Counter
from pathlib import Path

from goals import goal
from spools import CMD, make_spool

from spoolrender.spool.heartbeat import read_heartbeat


def race(base: Path, jobs: int, runners: int) -> tuple[float, int, int, int]:
    spool = base / "race"
    marker = base / "renders.txt"
    quick = ["sh", "-c", 'echo "$2" >> "$3" && echo "$2" > "$1"', "sh", "{output}", "{job_id}", str(marker)]
    make_spool(spool, {"commands": {"quick": quick}, "slots": 2})
    for i in range(jobs):
        (spool / "incoming" / f"j{i:05d}.yaml").write_text("renderer: command\ncommand: quick\n")
    t0 = time.monotonic()
    procs = [subprocess.Popen([*CMD, "run", "--drain", "--spool", str(spool)], stderr=subprocess.DEVNULL,
                              stdout=subprocess.DEVNULL) for _ in range(runners)]  # fmt: skip
    for p in procs:
        p.wait()
    wall = time.monotonic() - t0
    renders = Counter(marker.read_text().split())
    done = len(list((spool / "done").iterdir()))
    published = len(list((spool / "output").glob("*.mp4")))
    twice = sum(1 for c in renders.values() if c > 1)
    shutil.rmtree(spool)
    marker.unlink()
    assert len(renders) == jobs, f"{len(renders)} of {jobs} rendered"
    return wall, done, published, twice


def recovery(base: Path) -> float:
    spool = base / "recovery"
    make_spool(spool, {"commands": {"sleep": ["sleep", "60"]}, "lease_seconds": 60, "rescan_seconds": 10})
    (spool / "incoming" / "long.yaml").write_text("renderer: command\ncommand: sleep\n")
    a = subprocess.Popen([*CMD, "run", "--spool", str(spool)], stderr=subprocess.DEVNULL)
    while not any(read_heartbeat(d) and (d / "job.yaml").exists() for d in (spool / "running").iterdir()):
        time.sleep(0.01)
    a.send_signal(signal.SIGKILL)
    a.wait()
    t0 = time.monotonic()
    b = subprocess.Popen([*CMD, "run", "--spool", str(spool)], stderr=subprocess.DEVNULL)
    while not list((spool / "retry").iterdir()):
        time.sleep(0.005)
    took = time.monotonic() - t0
    b.send_signal(signal.SIGTERM)
    b.wait()
    shutil.rmtree(spool)
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--runners", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="spoolrender-bench-"))
    try:
        walls, twice_total = [], 0
        print(f"machine: {os.cpu_count()} cores; {args.runners} drain runners x 2 slots, {args.jobs} jobs")
        for rep in range(args.repeats):
            wall, done, published, twice = race(base, args.jobs, args.runners)
            walls.append(wall)
            twice_total += twice + (args.jobs - published) + (args.jobs - done)
            print(f"  race {rep + 1}: {done} done, {published} published, {twice} rendered twice, {wall:.1f} s")
        med = statistics.median(walls)
        print(f"race: median {med:.1f} s = {args.jobs / med:.0f} jobs/s (each job a real `sh` subprocess)")
        print(goal("every job rendered and published exactly once", f"{twice_total} exceptions in {args.repeats} runs",
                   twice_total == 0))  # fmt: skip
        took = [recovery(base) for _ in range(args.repeats)]
        runs = ", ".join(f"{t:.2f}" for t in took)
        med = statistics.median(took)
        print(f"recovery after SIGKILL, second runner start -> job in retry/: median {med:.2f} s "
              f"(runs: {runs}; includes the runner's start-up)")  # fmt: skip
        print(f"reproduce: .venv/bin/python bench/spool_races.py --jobs {args.jobs} --runners {args.runners} "
              f"--repeats {args.repeats}")  # fmt: skip
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
