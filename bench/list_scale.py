#!/usr/bin/env python3
"""`spoolrender list` on a deep spool: 100k done, 10k incoming, 1k failed (issue 23: "fast on a
deep spool"), beside `status` and `show` (an id that exists, and unknown ids, which get a
did-you-mean hint) on the same spool.

The spool is bench/status_scale.py's (real job directories with job.yaml, a run record
and result.json or failure.json; real job files in incoming/). A page of `list` comes from
the listings plus one stat per entry of the states it orders by time, and reads only its
own items: no job file is parsed. Times are wall medians of subprocesses (Python start-up
included, measured alone as a baseline). `--queue` reads each entry's run records, so it is
the slow filter by design, and is measured on failed/ (1k), where an operator uses it.

Reproduce:  .venv/bin/python bench/list_scale.py [--done 100000] [--incoming 10000] [--failed 1000]
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path

from goals import goal
from status_scale import CMD, fill, make_spool, print_baseline, timed

LIST_GOAL_S = 1.0  # status's goal (P4): listing a page must be no slower than the summary


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
        make_spool(spool, failed=args.failed, incoming=args.incoming)
        fill(spool, "done", 0, args.done)
        print_baseline(args.repeats)
        print(f"spool: {args.done} done, {args.incoming} incoming, {args.failed} failed")
        cases = {
            "status": ["status"],
            "list (every state, first page)": ["list"],
            "list done": ["list", "done"],
            "list done --offset 50000": ["list", "done", "--offset", "50000"],
            "list done --since 1h --json": ["list", "done", "--since", "1h", "--json"],
            "list incoming": ["list", "incoming"],
            "list failed --kind x": ["list", "failed", "--kind", "example"],
            "list failed --queue default": ["list", "failed", "--queue", "default"],
        }
        worst = 0.0
        for label, extra in cases.items():
            seconds = timed([*CMD, *extra, "--spool", str(spool)], args.repeats)
            if label.startswith("list") and "--queue" not in extra:
                worst = max(worst, seconds)
            print(f"{label:<34} {seconds:>7.3f} s")
        # An id no job has gets a did-you-mean hint (spoolrender.core.suggest): 13-16 s at 100k
        # done before difflib's pool was bounded; an id that exists never computes one.
        for label, job_id in (("show job-0000042 (exists)", "job-0000042"), ("show job-00000x42 (a typo)",
                              "job-00000x42"), ("show zzz (nothing close)", "zzz")):  # fmt: skip
            seconds = timed([*CMD, "show", job_id, "--spool", str(spool)], args.repeats, check=False)
            print(f"{label:<34} {seconds:>7.3f} s")
        print(goal(f"every list page but --queue <= {LIST_GOAL_S:g} s at {args.done} done + {args.incoming} "
                   f"incoming + {args.failed} failed", f"{worst:.3f} s", worst <= LIST_GOAL_S))  # fmt: skip
        print(f"reproduce: .venv/bin/python bench/list_scale.py --done {args.done} --incoming {args.incoming} "
              f"--failed {args.failed}")  # fmt: skip
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
