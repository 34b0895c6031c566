#!/usr/bin/env python3
"""Render throughput (P3): 10 sample jobs through `spoolrender run --drain` vs a shell-style
loop of `remotion render` (the CLI, one process per job) and vs the pure render floor, in
one run, on this machine.

The floor is the same batch rendered on the host's cores with nothing around the renders:
as many Remotion workers as the runner has slots (spoolrender's own worker code, called
in-process), fed straight from a list in the runner's claim order (priority, then
arrival), each render's output left where the worker wrote it (no job files, records,
heartbeat, ffprobe verification or publish). Two floors, each compared with the runner
that starts the same way:
  - cold floor (the clock starts before the workers: Node start, Chromium launch) vs a
    cron drain, `spoolrender run --drain` on the batch, process start to exit;
  - warm floor (each worker has rendered one Tiny job before the clock starts) vs a
    long-running runner warmed the same way, then the batch renamed into incoming/: first
    drop to the last job in done/.
Goals (issue 6): the drain >= 1.6x faster than the CLI loop; within 10% of the floor.
Also the first job's latency in a cron-started drain with a cold and a warm bundle cache
("cold": spoolrender's cache_dir empty, so the bundle is built; webpack's own cache in
remotion/node_modules/.cache stays as it is).

Reproduce:  .venv/bin/python bench/render_throughput.py [--jobs 10] [--repeats 1] [--skip-cli]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import queue
import shutil
import signal
import statistics
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import yaml
from goals import goal
from spools import CMD, REMOTION, make_spool, remotion_config, sample_jobs

from spoolrender.config.spool_config import SpoolConfig, load_config
from spoolrender.jobfile import parse_job
from spoolrender.renderers.base import CancelToken, RenderRequest
from spoolrender.renderers.remotion.renderer import RemotionRenderer
from spoolrender.runner.capacity import plan_capacity

TINY = {"composition": "Tiny"}


def drop(spool: Path, batch: list[dict[str, Any]]) -> None:
    for job in batch:
        # Written aside, then renamed in: what `spoolrender submit` does.
        tmp = spool / "incoming" / f".{job['id']}.yaml"
        tmp.write_text(yaml.safe_dump(job))
        tmp.rename(tmp.with_name(f"{job['id']}.yaml"))


def done_results(spool: Path) -> list[dict[str, Any]]:
    return [json.loads((d / "result.json").read_text()) for d in (spool / "done").iterdir()]


def cron_drain(spool: Path, batch: list[dict[str, Any]]) -> tuple[float, list[dict[str, Any]]]:
    """`run --drain` on a spool holding the batch: process start to exit."""
    drop(spool, batch)
    t0 = time.monotonic()
    proc = subprocess.run([*CMD, "run", "--drain", "--spool", str(spool)], capture_output=True, text=True)
    wall = time.monotonic() - t0
    results = done_results(spool)
    if proc.returncode or len(results) != len(batch):
        raise SystemExit(f"drain: {len(results)} of {len(batch)} done, exit {proc.returncode}:\n{proc.stderr[-3000:]}")
    return wall, results


def warm_runner(spool: Path, batch: list[dict[str, Any]], slots: int) -> float:
    """A long-running runner with warm workers: first drop to the batch's last job in done/."""
    log = spool.parent / f"{spool.name}.log"
    with open(log, "wb") as log_fh:
        proc = subprocess.Popen([*CMD, "run", "--spool", str(spool)], stdout=subprocess.DEVNULL, stderr=log_fh)
    try:
        drop(spool, [{**TINY, "id": f"warm-{i}", "output": f"warm/{i}.mp4"} for i in range(slots)])
        wait_done(spool, slots, proc, log)
        t0 = time.monotonic()
        drop(spool, batch)
        wait_done(spool, slots + len(batch), proc, log)
        return time.monotonic() - t0
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)


def wait_done(spool: Path, count: int, proc: subprocess.Popen[bytes], log: Path) -> None:
    done, failed = spool / "done", spool / "failed"
    # A 10 ms poll of one directory's entry count: small next to renders of seconds.
    while sum(1 for _ in os.scandir(done)) < count:
        if proc.poll() is not None or any(os.scandir(failed)):
            raise SystemExit(f"runner exited or a job failed:\n{log.read_text()[-3000:]}")
        time.sleep(0.01)


def render_floor(
    config: SpoolConfig, batch: list[dict[str, Any]], slots: int, threads: int, work: Path, *, warm: bool
) -> float:
    """The batch on ``slots`` workers fed from a list: pure render time on this host (with
    the workers' start-up unless ``warm``)."""
    renderers = [RemotionRenderer(config) for _ in range(slots)]
    counter = itertools.count()

    def request(job: dict[str, Any]) -> RenderRequest:
        spec = parse_job(yaml.safe_dump(job).encode(), f"{job['id']}.yaml", config)
        props, settings, _ = spec.settings_for_attempt(1)
        scratch = work / str(next(counter))
        scratch.mkdir(parents=True)
        return RenderRequest(spec=spec, job_file=scratch / "job.yaml", output=scratch / "out.mp4",
                             work_dir=scratch, log=scratch / "log", threads=threads, attempt=1, props=props,
                             settings=settings)  # fmt: skip

    errors: list[BaseException] = []

    def serve(renderer: RemotionRenderer, todo: queue.Queue[dict[str, Any]]) -> None:
        while not errors:
            try:
                job = todo.get_nowait()
            except queue.Empty:
                return
            try:
                renderer.render(request(job), lambda fraction, stage=None: None, CancelToken())
            except Exception as exc:  # reported by run_all, after every thread stopped
                errors.append(exc)

    def run_all(todo_jobs: list[dict[str, Any]]) -> float:
        todo: queue.Queue[dict[str, Any]] = queue.Queue()
        for job in todo_jobs:
            todo.put(job)
        pool = [threading.Thread(target=serve, args=(r, todo)) for r in renderers]
        t0 = time.monotonic()
        for t in pool:
            t.start()
        for t in pool:
            t.join()
        if errors:
            raise SystemExit(f"floor: a render failed: {errors[0]!r}")
        return time.monotonic() - t0

    try:
        if warm:  # one job per worker: started, browser open
            run_all([{**TINY, "id": f"floor-warm-{i}"} for i in range(slots)])
        # The runner's claim order: priority first, then arrival (the list order).
        ordered = sorted(batch, key=lambda j: -int(j.get("priority", 0)))
        return run_all(ordered)
    finally:
        for r in renderers:
            r.close()


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
    parser.add_argument("--repeats", type=int, default=1, help="round-robin repeats of floor, drain and warm runner")
    parser.add_argument("--skip-cli", action="store_true", help="do not run the (slow) CLI loop")
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="spoolrender-bench-"))
    remotion = remotion_config(base / "cache")  # one bundle cache for every spool
    try:
        # A cron-started drain's first job: empty bundle cache (built in the drain), then warm.
        t0 = time.monotonic()
        cron_drain(make_spool(base / "cold", remotion), [{**TINY, "id": "cold"}])
        cold_s = time.monotonic() - t0
        t0 = time.monotonic()
        cron_drain(make_spool(base / "warm", remotion), [{**TINY, "id": "warm"}])
        warm_s = time.monotonic() - t0

        config = load_config(make_spool(base / "floor", remotion), environ={})
        capacity = plan_capacity(config)
        slots, threads = capacity.slots, capacity.threads_per_job
        cold_floors, warm_floors, drains, warms = [], [], [], []
        frames = 0
        for rep in range(args.repeats):
            cold_floors.append(render_floor(config, sample_jobs(args.jobs, f"c{rep}"), slots, threads,
                                            base / f"cold-floor{rep}", warm=False))  # fmt: skip
            warm_floors.append(render_floor(config, sample_jobs(args.jobs, f"f{rep}"), slots, threads,
                                            base / f"warm-floor{rep}", warm=True))  # fmt: skip
            wall, results = cron_drain(make_spool(base / f"drain{rep}", remotion), sample_jobs(args.jobs, f"d{rep}"))
            drains.append(wall)
            frames = sum(int(r["details"]["frames"]) for r in results)
            warms.append(
                warm_runner(make_spool(base / f"warm{rep}", remotion), sample_jobs(args.jobs, f"w{rep}"), slots)
            )
            print(f"  repeat {rep + 1}: cold floor {cold_floors[-1]:.1f} s, drain {drains[-1]:.1f} s, "
                  f"warm floor {warm_floors[-1]:.1f} s, long-running runner {warms[-1]:.1f} s", flush=True)  # fmt: skip
        cold_floor, warm_floor, drain, warm = (statistics.median(x) for x in (cold_floors, warm_floors, drains, warms))

        print(f"machine: {os.cpu_count()} cores; {args.jobs} jobs ({frames} frames, 1280x720 h264); "
              f"{slots} slot(s) x {threads} thread(s) ({capacity.reason}); medians of {args.repeats}")  # fmt: skip
        print(f"first job of a cron drain (Tiny, process start to exit): cold bundle cache {cold_s:.1f} s, "
              f"warm {warm_s:.1f} s")  # fmt: skip
        print(f"cold floor (the batch on {slots} new worker(s), nothing around the renders): {cold_floor:.1f} s")
        print(f"spoolrender run --drain (cron, start-up included): {drain:.1f} s ({frames / drain:.1f} frames/s), "
              f"{drain / cold_floor:.2f} of the cold floor")  # fmt: skip
        print(f"warm floor (the batch on {slots} warm worker(s)): {warm_floor:.1f} s")
        print(
            f"spoolrender long-running runner (warm workers): {warm:.1f} s, {warm / warm_floor:.2f} of the warm floor"
        )
        print(goal("drain within 10% of the cold floor", f"{drain / cold_floor:.2f}", drain / cold_floor <= 1.10))
        print(goal("long-running runner within 10% of the warm floor", f"{warm / warm_floor:.2f}",
                   warm / warm_floor <= 1.10))  # fmt: skip
        if not args.skip_cli:
            out = base / "cli"
            out.mkdir()
            per_job = [cli_render(job, out / f"{job['id']}.mp4") for job in sample_jobs(args.jobs, "c")]
            cli_wall = sum(per_job)
            med = statistics.median(per_job)
            print(f"CLI loop (remotion render per job): {cli_wall:.1f} s; median per job {med:.1f} s")
            print(goal("drain >= 1.6x faster than the CLI loop", f"{cli_wall / drain:.2f}x", cli_wall / drain >= 1.6))
        print(
            f"reproduce: .venv/bin/python bench/render_throughput.py --jobs {args.jobs} --repeats {args.repeats}"
            + (" --skip-cli" if args.skip_cli else "")
        )
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
