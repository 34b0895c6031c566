#!/usr/bin/env python3
"""The Python API's costs: `Spool.submit` and `Job.status` on a spool with a backlog, and how
late `Job.wait` returns after its job reached done/ (inotify wake-up vs polling alone).

Phase 1, no runner: a spool with --incoming waiting job files and --done finished job
directories; medians (and p95) of `Spool.submit` and `Job.status` in-process, and of
`spoolrender submit` as a subprocess (Python start-up included). Submit's id check and a
handle's look-ups use listings only, so they must not grow with the incoming backlog.

Phase 2, one `spoolrender run` on a fresh spool, a command renderer (`cp`): --jobs jobs
submitted and waited for one after another; "wait lag" is the time from the job's move
into done/ (the entry's ctime) to wait() returning, with watch: auto (inotify) and with
watch: polling (wait() then only polls: 0.2 s backing off to 1 s).

Reproduce:  .venv/bin/python bench/api_latency.py [--incoming 10000] [--done 1000] [--jobs 20]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from spoolrender import Spool
from spoolrender.spool.layout import init_spool

CMD = [sys.executable, "-m", "spoolrender.cli"]
CONFIG = "commands:\n  copy: [cp, '{props_file}', '{output}']\n"
JOB = {"renderer": "command", "command": "copy", "props": {"title": "bench"}}


def ms(values: list[float]) -> str:
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))]
    return f"median {statistics.median(ordered) * 1000:7.1f} ms, p95 {p95 * 1000:7.1f} ms (n={len(ordered)})"


def backlog_phase(root: Path, incoming: int, done: int, repeats: int) -> None:
    layout = init_spool(root / "spool")
    (layout.root / "spoolrender.yaml").write_text(CONFIG)
    for i in range(incoming):
        (layout.incoming / f"waiting-{i:06d}.yaml").write_text(f"renderer: command\ncommand: copy\nprops: {{n: {i}}}\n")
    for i in range(done):
        entry = layout.done / f"old-{i:06d}.{i:012x}"
        entry.mkdir()
        (entry / "job.yaml").write_text("renderer: command\ncommand: copy\n")
    spool = Spool(layout.root)
    submits, looks = [], []
    for i in range(repeats):
        start = time.perf_counter()
        job = spool.submit(JOB, name=f"api-{i}")
        submits.append(time.perf_counter() - start)
        start = time.perf_counter()
        job.status()
        looks.append(time.perf_counter() - start)
    cli = []
    for i in range(max(3, repeats // 4)):
        start = time.perf_counter()
        subprocess.run(
            [*CMD, "submit", "--spool", str(layout.root), "-", "--name", f"cli-{i}"],
            input=b"renderer: command\ncommand: copy\n", check=True, capture_output=True,
        )  # fmt: skip
        cli.append(time.perf_counter() - start)
    print(f"backlog: {incoming} waiting in incoming/, {done} in done/")
    print(f"  Spool.submit          {ms(submits)}")
    print(f"  Job.status            {ms(looks)}")
    print(f"  spoolrender submit -  {ms(cli)}  (a new Python process each)")


def wait_phase(root: Path, jobs: int, watch: str) -> None:
    layout = init_spool(root / f"spool-{watch}")
    (layout.root / "spoolrender.yaml").write_text(CONFIG + f"watch: {watch}\nsettle_seconds: 0.5\n")
    runner = subprocess.Popen([*CMD, "run", "--spool", str(layout.root)], stderr=subprocess.DEVNULL)
    try:
        spool = Spool(layout.root)
        spool.submit(JOB, name="warm-up").wait(timeout=120)
        lags, totals = [], []
        for i in range(jobs):
            start = time.perf_counter()
            job = spool.submit(JOB, name=f"job-{i}")
            job.wait(timeout=120)
            returned = time.time()
            totals.append(time.perf_counter() - start)
            (entry,) = [e for e in os.listdir(layout.done) if e.startswith(f"job-{i}.")]
            lags.append(max(0.0, returned - os.stat(layout.done / entry).st_ctime))
    finally:
        runner.terminate()
        runner.wait(timeout=60)
    print(f"submit -> wait() -> done, one runner, watch: {watch}")
    print(f"  end to end            {ms(totals)}")
    print(f"  wait lag after done/  {ms(lags)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--incoming", type=int, default=10000)
    parser.add_argument("--done", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=40)
    parser.add_argument("--jobs", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="spoolrender-api-bench-") as tmp:
        backlog_phase(Path(tmp), args.incoming, args.done, args.repeats)
        for watch in ("auto", "polling"):
            wait_phase(Path(tmp), args.jobs, watch)
    print(
        "reproduce: .venv/bin/python bench/api_latency.py "
        f"--incoming {args.incoming} --done {args.done} --repeats {args.repeats} --jobs {args.jobs}"
    )


if __name__ == "__main__":
    main()
