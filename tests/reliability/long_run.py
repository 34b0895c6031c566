#!/usr/bin/env python3
"""The long versions of the reliability suite, with one summary table at the end.

    .venv/bin/python tests/reliability/long_run.py [--jobs 1000] [--runners 4] [--kills 80] [--rounds 3]

- chaos: --rounds rounds of --jobs command jobs, --runners runners, --kills random SIGKILLs;
- crash points: a SIGKILL at every named protocol step, --rounds times each;
- hostile corpus: the 60 bad job files of test_hostile.py against a real runner;
- --split-jobs N: N more jobs per chaos round rendered in 2-5 chunks each (issue 14);
- --gluster-freezes N: N runs of a client host frozen whole (SIGSTOP) mid-render on the
  GlusterFS lab (root, glusterfs-server): how often its job came back after the lease and
  was done elsewhere, and how often it was held until the thaw (issue 26: docs/reliability.md,
  "A frozen host's locks");
- --gluster-freezes-mid-write N: the same, each freeze retried (thawed within the lease)
  until a statedump shows the frozen client holding an entry lock in the job's directory:
  frozen in the middle of a heartbeat's replace, the 1-in-9 case made certain;
- --gluster-bricks N: N runs of a brick killed mid-run, restarted and healed on that lab,
  each ending with the healed brick holding what the others hold (the suite's brick test
  stops before the heal: a heal that does not converge is GlusterFS's, not the spool's).
Everything is judged from the disk afterwards (invariants.audit). The bounded versions
run in CI through pytest (tests/reliability/).
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parent.parent))  # tests/: chunk_jobs (split jobs)

from chaos import run_chaos
from gluster_lab import GlusterLab
from gluster_lab import missing as gluster_missing
from test_crash_points import test_sigkill_at_each_crash_point_loses_nothing as crash_case
from test_gluster_hosts import brick_heal_case, frozen_host_case
from test_hostile import CASES, SPECIAL
from test_hostile import test_hostile_corpus_ends_where_it_belongs as hostile_case

from spoolrender.core.failpoints import CRASH_POINTS


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--runners", type=int, default=4)
    parser.add_argument("--kills", type=int, default=80)
    parser.add_argument("--freezes", type=int, default=0, help="SIGSTOPs past the lease per chaos round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--split-jobs", type=int, default=0, help="more jobs per round, rendered in 2-5 chunks each")
    parser.add_argument("--gluster-freezes", type=int, default=0, help="frozen-host runs on the GlusterFS lab")
    parser.add_argument("--gluster-freezes-mid-write", type=int, default=0,
                        help="frozen-host runs, each frozen holding an entry lock in its job's directory")  # fmt: skip
    parser.add_argument("--gluster-bricks", type=int, default=0, help="brick kill, restart and heal runs on it")
    args = parser.parse_args()
    rows: list[dict[str, object]] = []
    with tempfile.TemporaryDirectory(prefix="spoolrender-long-") as tmp:
        base = Path(tmp)
        for r in range(args.rounds):
            report = run_chaos(
                base / f"chaos{r}", jobs=args.jobs, runners=args.runners, kills=args.kills, seed=r,
                freezes=args.freezes, split_jobs=args.split_jobs,
            )  # fmt: skip
            rows.append({"part": f"chaos round {r + 1}", **report.row()})
        crash_failures = 0
        for r in range(args.rounds):
            for point in CRASH_POINTS:
                try:
                    crash_case(base / f"crash-{point}-{r}", point)
                except AssertionError as exc:
                    crash_failures += 1
                    print(f"crash point {point}: {exc}", file=sys.stderr)
        n = args.rounds * len(CRASH_POINTS)
        rows.append({"part": "crash points", "jobs": n, "kills": n, "lost": crash_failures})
        t0 = time.monotonic()
        try:
            hostile_case(base / "hostile")
            handled = len(CASES) + len(SPECIAL)
            outside = 0
        except AssertionError as exc:
            print(f"hostile corpus: {exc}", file=sys.stderr)
            handled, outside = -1, -1
        rows.append({"part": "hostile corpus", "hostile handled": f"{handled}/{len(CASES) + len(SPECIAL)}",
                     "writes outside root": outside, "seconds": round(time.monotonic() - t0, 1)})  # fmt: skip
        if args.gluster_freezes:
            rows.append(gluster_freezes(base / "gluster", args.gluster_freezes))
        if args.gluster_freezes_mid_write:
            rows.append(gluster_freezes(base / "gluster-mid-write", args.gluster_freezes_mid_write, mid_write=True))
        if args.gluster_bricks:
            rows.append(gluster_bricks(base / "gluster-bricks", args.gluster_bricks))
    columns = ["part", "jobs", "kills", "freezes", "lost", "duplicated", "partial files", "bad outputs", "orphans",
               "recovered runs", "renders", "errors logged", "leftovers", "hostile handled", "writes outside root",
               "frozen recovered", "frozen held", "bricks healed", "recovery s (median)", "seconds"]  # fmt: skip
    widths = {c: max(len(c), *(len(str(r.get(c, ""))) for r in rows)) for c in columns}
    print(f"machine: {os.cpu_count()} cores")
    print("  ".join(c.ljust(widths[c]) for c in columns))
    for row in rows:
        print("  ".join(str(row.get(c, "")).ljust(widths[c]) for c in columns))
    print(f"reproduce: .venv/bin/python tests/reliability/long_run.py --jobs {args.jobs} --runners {args.runners} "
          f"--kills {args.kills} --freezes {args.freezes} --rounds {args.rounds}"
          + (f" --split-jobs {args.split_jobs}" if args.split_jobs else "")
          + (f" --gluster-freezes {args.gluster_freezes}" if args.gluster_freezes else "")
          + (f" --gluster-freezes-mid-write {args.gluster_freezes_mid_write}" if args.gluster_freezes_mid_write else "")
          + (f" --gluster-bricks {args.gluster_bricks}" if args.gluster_bricks else ""))  # fmt: skip


def gluster_freezes(work: Path, runs: int, *, mid_write: bool = False) -> dict[str, object]:
    """``runs`` frozen-host cases on one GlusterFS lab: recovered after the lease, or held
    (not recovered within the case's deadline: the frozen client's lock, until the thaw).
    ``mid_write``: each frozen holding an entry lock in its job's directory."""
    part = "gluster freezes mid-write" if mid_write else "gluster freezes"
    done = _lab_cases(work, runs, functools.partial(frozen_host_case, mid_write=mid_write), part)
    if done is None:
        return {"part": part, "frozen recovered": "skipped"}
    recovered, failed, seconds = done
    median = round(statistics.median(recovered), 1) if recovered else ""
    return {"part": part, "frozen recovered": f"{len(recovered)}/{runs}", "frozen held": failed,
            "recovery s (median)": median, "seconds": seconds}  # fmt: skip


def gluster_bricks(work: Path, runs: int) -> dict[str, object]:
    """``runs`` brick kill, restart and heal cases on one GlusterFS lab: how many ended with
    every job published once and the healed brick holding what the others hold."""
    done = _lab_cases(work, runs, brick_heal_case, "gluster brick")
    if done is None:
        return {"part": "gluster bricks", "bricks healed": "skipped"}
    healed, _, seconds = done
    median = round(statistics.median(healed), 1) if healed else ""
    return {"part": "gluster bricks", "bricks healed": f"{len(healed)}/{runs}", "recovery s (median)": median,
            "seconds": seconds}  # fmt: skip


def _lab_cases(
    work: Path, runs: int, case: Callable[[GlusterLab, Path], float], label: str
) -> tuple[list[float], int, float] | None:
    """``runs`` runs of ``case`` on one GlusterFS lab: the seconds each passed one gave, how
    many failed (each failure printed), the seconds it all took; None without the lab."""
    why = gluster_missing()
    if why is not None:
        print(f"{label} runs skipped: {why}", file=sys.stderr)
        return None
    (work / "lab").mkdir(parents=True)
    t0 = time.monotonic()
    passed: list[float] = []
    failed = 0
    lab = GlusterLab(work / "lab")
    try:
        for r in range(runs):
            directory = work / f"case{r}"
            directory.mkdir()
            try:
                passed.append(case(lab, directory))
            except AssertionError as exc:
                failed += 1
                print(f"{label} {r + 1}: {exc}", file=sys.stderr)
    finally:
        lab.close()
    return passed, failed, round(time.monotonic() - t0, 1)


if __name__ == "__main__":
    main()
