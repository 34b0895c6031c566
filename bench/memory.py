#!/usr/bin/env python3
"""Memory (issue 6, P5): the runner's RSS while draining many jobs, and its render children's.

1. No-op drain: N command jobs (`sh -c 'echo x > "$1"'`, 10k by default) are written into
   incoming/ of a fresh spool, then `spoolrender run --drain` (slots from the host, 2 on 2
   cores) drains them. The runner's RSS (the Python process alone) is sampled with psutil
   every 0.5 s, from its first log line (start-up done) to its exit.
2. Remotion drain: 20 `Tiny` jobs (30 frames each) with the repo's remotion/ project and a
   temp cache_dir (bundle built by one warm-up job first, not sampled). Besides the runner,
   its children are sampled (psutil, recursive) and summed per process name: the Node
   workers (one per slot), Chromium (all its processes), the compositor, ffprobe... RSS
   counts shared pages in every process; PSS (from /proc/PID/smaps_rollup) splits them.
Side by side: the RSS of a bare Python that only imports spoolrender's runner and CLI
modules (the floor any runner pays). Flat means the median of the last quarter of the
samples is within 10% of the first quarter's; for the render children the first quarter of
the samples (worker start, bundle load, browser launch) is left out of that comparison.
Goal: Python runner <= 80 MB.

Reproduce:  .venv/bin/python bench/memory.py [--jobs 10000] [--remotion-jobs 20]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import psutil
import yaml
from goals import goal
from spools import CMD, make_spool, remotion_config

MB = 1024 * 1024
INTERVAL = 0.5
WARMUP = 0.25  # children: the first quarter of the samples holds worker start, bundle load, browser launch


def pss(proc: psutil.Process) -> int:
    try:
        with open(f"/proc/{proc.pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


class Sampler:
    """RSS of one process every INTERVAL s; optionally its children summed per name."""

    def __init__(self, children: bool) -> None:
        self.children = children
        self.runner: list[float] = []  # MB
        self.by_name: dict[str, list[tuple[float, float, int]]] = defaultdict(list)  # per sample: rss, pss, count

    def sample(self, proc: psutil.Process) -> None:
        try:
            self.runner.append(proc.memory_info().rss / MB)
            kids = proc.children(recursive=True) if self.children else []
        except psutil.NoSuchProcess:
            return
        sums: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0])
        for kid in kids:
            try:
                name = kid.name()
                rss = kid.memory_info().rss
            except psutil.NoSuchProcess:
                continue
            s = sums[name]
            s[0] += rss / MB
            s[1] += pss(kid) / MB
            s[2] += 1
        for name, (rss_mb, pss_mb, count) in sums.items():
            self.by_name[name].append((rss_mb, pss_mb, int(count)))

    def run(self, argv: list[str], log: Path) -> float:
        t0 = time.monotonic()
        with log.open("w") as err:
            popen = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=err)
        proc = psutil.Process(popen.pid)
        while popen.poll() is None and log.stat().st_size == 0:  # sample from the runner's first log line on
            time.sleep(0.01)
        while popen.poll() is None:
            self.sample(proc)
            time.sleep(INTERVAL)
        wall = time.monotonic() - t0
        if popen.returncode != 0:
            raise SystemExit(f"{' '.join(argv)} exited {popen.returncode}; see {log}:\n{log.read_text()[-2000:]}")
        return wall


def growth(values: list[float], warmup: float = 0.0) -> float:
    """Median of the last quarter of the samples over the first, after the ``warmup`` share."""
    steady = values[int(len(values) * warmup) :]
    q = max(1, len(steady) // 4)
    return statistics.median(steady[-q:]) / statistics.median(steady[:q])


def summary(values: list[float], warmup: float = 0.0) -> str:
    """start/median/max/end, and last vs first quarter of the samples after the ``warmup`` share."""
    ratio = growth(values, warmup)
    flat = "flat" if ratio <= 1.10 else "GROWING"
    after = " after warm-up" if warmup else ""
    return (f"start {values[0]:.1f}  median {statistics.median(values):.1f}  max {max(values):.1f}  "
            f"end {values[-1]:.1f}; last/first quarter median{after} {ratio:.2f} ({flat})")  # fmt: skip


def report_runner(rss: list[float], floor: float, what: str) -> None:
    print(f"  runner max / import floor: {max(rss) / floor:.2f}x")
    print(goal(f"runner RSS <= 80 MB ({what})", f"max {max(rss):.1f} MB", max(rss) <= 80))
    print(goal(f"runner RSS flat ({what}): last/first quarter <= 1.10", f"{growth(rss):.2f}", growth(rss) <= 1.10))


def import_floor() -> float:
    code = "import spoolrender.cli, spoolrender.runner.loop, spoolrender.renderers.registry, sys; sys.stdin.read()"
    popen = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE)
    time.sleep(3)
    rss = psutil.Process(popen.pid).memory_info().rss / MB
    popen.communicate(b"")
    return rss


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=10000, help="no-op command jobs")
    parser.add_argument("--remotion-jobs", type=int, default=20, help="Tiny Remotion jobs (0: skip)")
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="spoolrender-bench-"))
    try:
        floor = import_floor()
        print(f"machine: {os.cpu_count()} cores, {psutil.virtual_memory().total / MB / 1024:.1f} GiB; "
              f"samples every {INTERVAL} s; MB = MiB")  # fmt: skip
        print(f"floor: a Python that only imports spoolrender's runner modules: RSS {floor:.1f} MB")

        noop = make_spool(base / "noop", {"commands": {"noop": ["sh", "-c", 'echo x > "$1"', "sh", "{output}"]}})
        for i in range(args.jobs):
            (noop / "incoming" / f"n{i:05d}.yaml").write_text("renderer: command\ncommand: noop\n")
        sampler = Sampler(children=False)
        wall = sampler.run([*CMD, "run", "--drain", "--spool", str(noop)], base / "noop.log")
        done = len(os.listdir(noop / "done"))
        print(f"no-op drain: {done} of {args.jobs} jobs done in {wall:.0f} s ({done / wall:.0f} jobs/s), "
              f"{len(sampler.runner)} samples")  # fmt: skip
        print(f"  runner RSS MB: {summary(sampler.runner)}")
        report_runner(sampler.runner, floor, "no-op drain")
        shutil.rmtree(noop)

        if args.remotion_jobs:
            config = remotion_config(base / "cache")
            warm = make_spool(base / "warm", config)
            (warm / "incoming" / "warm.yaml").write_text("composition: Tiny\n")
            subprocess.run([*CMD, "run", "--drain", "--spool", str(warm)], check=True, capture_output=True)
            spool = make_spool(base / "remotion", config)
            for i in range(args.remotion_jobs):
                job = {"composition": "Tiny", "props": {"frames": 30}}
                (spool / "incoming" / f"tiny-{i:03d}.yaml").write_text(yaml.safe_dump(job))
            sampler = Sampler(children=True)
            wall = sampler.run([*CMD, "run", "--drain", "--spool", str(spool)], base / "remotion.log")
            done = len(os.listdir(spool / "done"))
            print(f"remotion drain: {done} of {args.remotion_jobs} Tiny jobs (30 frames) done in {wall:.1f} s "
                  f"(bundle warm), {len(sampler.runner)} samples")  # fmt: skip
            print(f"  runner RSS MB: {summary(sampler.runner)}")
            report_runner(sampler.runner, floor, "Remotion drain")
            workers = max((c for _, _, c in sampler.by_name.get("node", [])), default=1)
            print("  children, summed per process name (over the samples in which they ran):")
            print(f"    {'name':<18} {'procs':>5} {'RSS med':>8} {'RSS max':>8} {'PSS max':>8} {'RSS/slot max':>12}")
            for name, rows in sorted(sampler.by_name.items(), key=lambda kv: -max(r[0] for r in kv[1])):
                rss = [r[0] for r in rows]
                print(f"    {name:<18} {max(r[2] for r in rows):>5} {statistics.median(rss):>8.1f} {max(rss):>8.1f} "
                      f"{max(r[1] for r in rows):>8.1f} {max(rss) / workers:>12.1f}")  # fmt: skip
            if "node" in sampler.by_name:
                node = [r[0] for r in sampler.by_name["node"]]
                print(f"  node workers ({workers}) RSS MB: {summary(node, WARMUP)}")
            chromium = [r[0] for r in sampler.by_name.get("chromium", [])]
            if len(chromium) >= 4:
                print(f"  chromium (all processes) RSS MB: {summary(chromium, WARMUP)}")
        print(f"reproduce: .venv/bin/python bench/memory.py --jobs {args.jobs} --remotion-jobs {args.remotion_jobs}")
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
