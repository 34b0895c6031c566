#!/usr/bin/env python3
"""Render cache (P7): the same Remotion job again and again, published from the cache vs
rendered, side by side in one run; and the hit rate on a batch with repeats.

Side by side: one long-running runner (1 slot, its Remotion worker warmed by one Tiny job
first), fed one job at a time, alternating a job that opts out of the cache (``cache:
false``: a real render of the sample job intro-welcome, a 3 s 1280x720 TitleCard) and the
same job with ``cache: true`` (the first one renders and stores, the others are hits).
Per job: drop (rename into incoming/) to the job's entry in done/ (output published,
result.json written), and the run's own duration from its records (claim to the publish
decision). Medians over ``--repeats`` of each. Goal (issue 14): a hit >= 100x faster than a
render, drop to done.

Hit rate: ``--batch`` Tiny jobs drawn (seeded) from ``--distinct`` different props, all
dropped at once into a spool with the cache on and 2 slots; identical jobs that run at the
same time wait for each other. Goal: every distinct input rendered exactly once, i.e. the
hit rate is (batch - distinct) / batch.

Reproduce:  .venv/bin/python bench/render_cache.py [--repeats 20] [--batch 30] [--distinct 6]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml
from goals import goal
from spools import CMD, SAMPLES, make_spool, remotion_config

TINY = {"composition": "Tiny"}


def drop(spool: Path, job: dict[str, Any]) -> None:
    # Written aside, then renamed in: what `spoolrender submit` does.
    tmp = spool / "incoming" / f".{job['id']}.yaml"
    tmp.write_text(yaml.safe_dump(job))
    tmp.rename(tmp.with_name(f"{job['id']}.yaml"))


def done_entry(spool: Path, job_id: str) -> Path | None:
    for entry in os.scandir(spool / "done"):
        if entry.name.startswith(f"{job_id}."):
            return Path(entry.path)
    return None


def wait_done(spool: Path, job_id: str, proc: subprocess.Popen[bytes], log: Path) -> Path:
    # A 2 ms poll of done/: small next to a hit's tens of milliseconds, and the same for both sides.
    while (entry := done_entry(spool, job_id)) is None:
        if proc.poll() is not None or any(os.scandir(spool / "failed")):
            raise SystemExit(f"runner exited or a job failed:\n{log.read_text()[-3000:]}")
        time.sleep(0.002)
    # done/<entry> appears by one rename after result.json was written into it
    return entry


def start_runner(spool: Path, slots: int) -> tuple[subprocess.Popen[bytes], Path]:
    log = spool.parent / f"{spool.name}.log"
    with open(log, "wb") as log_fh:
        proc = subprocess.Popen([*CMD, "run", "--slots", str(slots), "--spool", str(spool)],
                                stdout=subprocess.DEVNULL, stderr=log_fh)  # fmt: skip
    return proc, log


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=120)


def side_by_side(work: Path, cache: Path, repeats: int) -> dict[str, list[float]]:
    spool = make_spool(work / "side", {**remotion_config(cache), "slots": 1})
    sample = yaml.safe_load(SAMPLES[0].read_text())
    sample.pop("rerun", None)
    proc, log = start_runner(spool, 1)
    times: dict[str, list[float]] = {"render": [], "hit": [], "render_run": [], "hit_run": [], "first": []}
    try:
        drop(spool, {**TINY, "id": "warm", "output": "warm.mp4", "cache": False})
        wait_done(spool, "warm", proc, log)
        for i in range(repeats + 1):  # +1: the first cached job is a miss that stores
            kinds = [("render", False), ("hit", True)] if i else [("first", True)]
            for kind, cached in kinds:
                job_id = f"{kind}-{i:02d}"
                job = {**sample, "id": job_id, "output": f"{kind}/{i:02d}.mp4", "cache": cached}
                t0 = time.monotonic()
                drop(spool, job)
                entry = wait_done(spool, job_id, proc, log)
                times[kind].append(time.monotonic() - t0)
                result = json.loads((entry / "result.json").read_text())
                want = {"render": None, "hit": "hit", "first": "stored"}[kind]
                if result.get("cache") != want:
                    raise SystemExit(f"{job_id}: cache {result.get('cache')!r}, expected {want!r}")
                if kind != "first":
                    times[f"{kind}_run"].append(float(result["duration_seconds"]))
    finally:
        stop(proc)
    return times


def hit_rate(work: Path, cache: Path, batch: int, distinct: int, seed: int) -> dict[str, Any]:
    spool = make_spool(work / "batch", {**remotion_config(cache), "slots": 2, "render_cache": True})
    rng = random.Random(seed)
    colours = [f"#{rng.randrange(0x1000000):06x}" for _ in range(distinct)]
    picks = [rng.randrange(distinct) for _ in range(batch)]
    proc, log = start_runner(spool, 2)
    try:
        drop(spool, {**TINY, "id": "warm", "output": "warm.mp4", "cache": False})
        wait_done(spool, "warm", proc, log)
        t0 = time.monotonic()
        for n, pick in enumerate(picks):
            drop(spool, {**TINY, "id": f"job-{n:03d}", "output": f"batch/{n:03d}.mp4",
                         "props": {"frames": 12, "color": colours[pick]}})  # fmt: skip
        for n in range(batch):
            wait_done(spool, f"job-{n:03d}", proc, log)
        wall = time.monotonic() - t0
    finally:
        stop(proc)
    results = [json.loads((e / "result.json").read_text()) for n in range(batch)
               if (e := done_entry(spool, f"job-{n:03d}")) is not None]  # fmt: skip
    counts = {kind: sum(1 for r in results if r.get("cache") == kind) for kind in ("hit", "stored", "miss")}
    waited = sum(1 for r in results if r.get("cache_waited_seconds"))
    return {"used": len(set(picks)), "wall": wall, "waited": waited, **counts}


def spread(seconds: list[float]) -> str:
    """``median ms (min-max)``."""
    return f"{statistics.median(seconds) * 1000:.1f} ms ({min(seconds) * 1000:.0f}-{max(seconds) * 1000:.0f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=20, help="renders and hits of the same job (default 20)")
    parser.add_argument("--batch", type=int, default=30, help="jobs in the hit-rate batch (default 30)")
    parser.add_argument("--distinct", type=int, default=6, help="different inputs among them (default 6)")
    parser.add_argument("--seed", type=int, default=14)
    args = parser.parse_args()
    print(f"machine: {os.cpu_count()} cores; sample job {SAMPLES[0].name} (TitleCard 3 s, 1280x720), warm worker")
    with tempfile.TemporaryDirectory(prefix="bench-render-cache-") as tmp:
        work = Path(tmp)
        bundles = work / "bundles"
        times = side_by_side(work, bundles, args.repeats)
        rate = hit_rate(work, bundles, args.batch, args.distinct, args.seed)
    render, hit = statistics.median(times["render"]), statistics.median(times["hit"])
    render_run, hit_run = statistics.median(times["render_run"]), statistics.median(times["hit_run"])
    print(f"the same job {args.repeats} times each way, alternating (medians; min-max):")
    print(f"  {'':22} {'drop to done/':>22} {'run (claim to decision)':>26}")
    for label, drop_list, run_list in (("rendered (cache off)", times["render"], times["render_run"]),
                                       ("published from cache", times["hit"], times["hit_run"])):  # fmt: skip
        print(f"  {label:22} {spread(drop_list):>22} {spread(run_list):>26}")
    print(f"  first cached job (miss, rendered and stored): {times['first'][0] * 1000:.0f} ms drop to done/")
    print(f"  a hit is {render / hit:.0f}x faster drop to done/, {render_run / hit_run:.0f}x faster per run")
    ideal = (args.batch - rate["used"]) / args.batch
    measured = rate["hit"] / args.batch
    print(f"hit rate: {args.batch} Tiny jobs over {rate['used']} different props (seed {args.seed}), 2 slots, "
          f"all dropped at once: {rate['hit']} hits, {rate['stored']} rendered and stored, {rate['miss']} "
          f"rendered not stored; {rate['waited']} waited for an identical job; {rate['wall']:.1f} s")  # fmt: skip
    print(goal("cache hit >= 100x faster than a render (drop to done, median)", f"{render / hit:.0f}x",
               render / hit >= 100))  # fmt: skip
    print(goal("batch with repeats, every distinct input rendered once", f"hit rate {measured:.2f} of ideal "
               f"{ideal:.2f} ({rate['stored'] + rate['miss']} renders for {rate['used']} inputs)",
               rate["stored"] == rate["used"] and rate["miss"] == 0))  # fmt: skip
    print("reproduce: .venv/bin/python bench/render_cache.py " + " ".join(
        f"--{k} {v}" for k, v in vars(args).items()))  # fmt: skip


if __name__ == "__main__":
    main()
