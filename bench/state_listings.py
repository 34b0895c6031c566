#!/usr/bin/env python3
"""state_listings.list_job_states (each job once, however it moves: `status`, the metrics,
the event stream and ``GET /jobs`` list the states through it) against the listing alone,
on a deep spool: 100k done, 1k failed, 1k waiting in retry/, 16 running, 10 split.

The floor is what `status` paid before jobs were told apart by id and uid: every state
directory listed once, dot-names and chunk entries dropped. list_job_states lists retry/
twice and keys the jobs that can still move; it must cost little more than the floor
(the first version parsed and remembered every done/ name: 3.5x the floor's CPU and 4.7x
its memory at 100k done, +0.16 s of `status`). CPU time (process_time) medians of
alternating rounds in one process, and the peak traced memory of one call of each.
Entries are empty directories (a listing reads names only), on ``--base`` (a tmpfs such
as /dev/shm makes 1M cheap).

Reproduce:  .venv/bin/python bench/state_listings.py [--done 100000] [--rounds 9] [--base /dev/shm]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

from goals import goal

from spoolrender import defaults
from spoolrender.spool.chunk_names import is_chunk_name
from spoolrender.spool.layout import SpoolLayout, init_spool, list_names
from spoolrender.spool.state_listings import list_job_states

RATIO_GOAL = 1.25  # retry/ is listed twice; every other name once, as the floor does


def fill(layout: SpoolLayout, *, done: int, failed: int, retry: int, running: int, split: int) -> None:
    hexes = (f"{i:012x}" for i in range(10**9))
    for state, count in (("done", done), ("failed", failed), ("split", split)):
        for i in range(count):
            (layout.state_dir(state) / f"job-{i:07d}.{next(hexes)}").mkdir()
    for i in range(retry):
        (layout.retry / f"{1_800_000_000_000 + i:013d}-1000-wait-{i:05d}.{next(hexes)}").mkdir()
    for i in range(running):
        (layout.running / f"run-{i:03d}.{next(hexes)}.{next(hexes)}").mkdir()


def floor(layout: SpoolLayout) -> dict[str, list[str]]:
    """Each state directory listed once, as `status` listed them before list_job_states."""
    return {
        state: [n for n in list_names(layout.state_dir(state)) if not n.startswith(".") and not is_chunk_name(n)]
        for state in defaults.STATE_DIRS
        if state != "incoming"
    }


def peak_mb(read: Callable[[], object]) -> float:
    tracemalloc.start()
    try:
        read()
        return tracemalloc.get_traced_memory()[1] / 1e6
    finally:
        tracemalloc.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--done", type=int, default=100_000)
    parser.add_argument("--failed", type=int, default=1_000)
    parser.add_argument("--retry", type=int, default=1_000)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--base", type=Path, help="build the spool under this directory (default: the temp dir)")
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="spoolrender-bench-", dir=args.base))
    try:
        layout = init_spool(base / "spool")
        t0 = time.monotonic()
        fill(layout, done=args.done, failed=args.failed, retry=args.retry, running=16, split=10)
        print(f"spool: {args.done} done, {args.failed} failed, {args.retry} retry, 16 running, 10 split "
              f"(made in {time.monotonic() - t0:.0f} s)")  # fmt: skip
        reads = {"floor": lambda: floor(layout), "list_job_states": lambda: list_job_states(layout)}
        assert {s: sorted(n) for s, n in reads["floor"]().items()} == {
            s: sorted(n) for s, n in list_job_states(layout).items()
        }, "a still spool lists the same either way"
        cpu: dict[str, list[float]] = {name: [] for name in reads}
        for round_ in range(args.rounds):
            for name in reads if round_ % 2 == 0 else reversed(reads):
                t = time.process_time()
                reads[name]()
                cpu[name].append(time.process_time() - t)
        medians = {name: statistics.median(times) for name, times in cpu.items()}
        peaks = {name: peak_mb(read) for name, read in reads.items()}
        for name in reads:
            print(f"{name:>16}: cpu median {medians[name] * 1000:7.1f} ms, peak traced {peaks[name]:6.1f} MB")
        ratio = medians["list_job_states"] / medians["floor"]
        print(f"ratio: cpu x{ratio:.2f}, memory x{peaks['list_job_states'] / peaks['floor']:.2f}")
        print(goal(f"list_job_states CPU <= {RATIO_GOAL}x the listing alone at {args.done} done", f"x{ratio:.2f}",
                   ratio <= RATIO_GOAL))  # fmt: skip
        print(f"reproduce: .venv/bin/python bench/state_listings.py --done {args.done} --rounds {args.rounds}"
              + (f" --base {args.base}" if args.base else ""))  # fmt: skip
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
