#!/usr/bin/env python3
"""`spoolrender status` on a big spool: 100k done, 10k incoming, 1k failed (issue goal <= 1 s),
and how the time grows from 1k to 100k finished jobs (should be linear in directory entries).

Each finished job is a real job directory (job.yaml, run-0001.json, result.json or
failure.json); incoming jobs are real job files. Times are wall medians of `status` and
`status --json` as subprocesses (Python start-up included, measured alone as a baseline).

Reproduce:  .venv/bin/python bench/status_scale.py [--done 100000] [--incoming 10000] [--failed 1000]
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

from goals import goal

CMD = [sys.executable, "-m", "spoolrender.cli"]


def fill(spool: Path, state: str, start: int, count: int) -> None:
    record = json.dumps({"outcome": "publishing", "run": 1}).encode()
    for i in range(start, start + count):
        d = spool / state / f"job-{i:07d}.{i:012x}"
        d.mkdir()
        (d / "job.yaml").write_bytes(b"composition: TitleCard\nprops: {title: hi}\n")
        (d / "run-0001.json").write_bytes(record)
        name = "result.json" if state == "done" else "failure.json"
        (d / name).write_bytes(json.dumps({"id": f"job-{i:07d}", "reason": "example failure"}).encode())


def timed(args: list[str], repeats: int, *, check: bool = True) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.monotonic()
        subprocess.run(args, check=check, capture_output=True)
        times.append(time.monotonic() - t0)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--done", type=int, default=100_000)
    parser.add_argument("--incoming", type=int, default=10_000)
    parser.add_argument("--failed", type=int, default=1_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="spoolrender-bench-"))
    spool = base / "spool"
    try:
        subprocess.run([*CMD, "init", str(spool)], check=True, capture_output=True)
        fill(spool, "failed", 0, args.failed)
        for i in range(args.incoming):
            (spool / "incoming" / f"in-{i:06d}.yaml").write_bytes(b"composition: TitleCard\n")
        baseline = timed([sys.executable, "-c", "import spoolrender.cli"], args.repeats)
        print(f"machine: {os.cpu_count()} cores; python start-up + import: {baseline:.3f} s (median)")
        print(f"{'done':>8} {'incoming':>9} {'failed':>7} {'status':>9} {'--json':>9}")
        filled = 0
        times: dict[int, tuple[float, float]] = {}
        steps = sorted({s for s in (1_000, 10_000, 30_000, args.done) if s <= args.done})
        for target in steps:
            fill(spool, "done", filled, target - filled)
            filled = target
            human = timed([*CMD, "status", "--spool", str(spool)], args.repeats)
            machine = timed([*CMD, "status", "--json", "--spool", str(spool)], args.repeats)
            times[target] = (human, machine)
            print(f"{target:>8} {args.incoming:>9} {args.failed:>7} {human:>8.3f}s {machine:>8.3f}s")
        first, last = steps[0], steps[-1]
        entries = (last + args.incoming + args.failed) / (first + args.incoming + args.failed)
        growth = [times[last][i] / times[first][i] for i in (0, 1)]
        print(f"from {first} to {last} done: entries x{entries:.1f}; time x{growth[0]:.2f} (status), "
              f"x{growth[1]:.2f} (--json), start-up included")  # fmt: skip
        worst = max(times[last])
        print(goal(f"status and status --json <= 1 s at {last} done + {args.incoming} incoming + {args.failed} failed",
                   f"{worst:.3f} s", worst <= 1.0))  # fmt: skip
        print(f"reproduce: .venv/bin/python bench/status_scale.py --done {args.done} --incoming {args.incoming} "
              f"--failed {args.failed}")  # fmt: skip
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
