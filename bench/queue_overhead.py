#!/usr/bin/env python3
"""P2 queue overhead: no-op jobs through the whole lifecycle, vs the floor of the same
filesystem work done by a minimal script, vs a peer (the `dirq` package), in one run.

- spoolrender: N job files in incoming/, a draining Runner (in-process) whose renderer
  writes a tiny output (so only the queue is measured): claim, lock, heartbeat, parse,
  id reservation, scratch, decide, publish, records, move to done/.
- floor: per job exactly the renames/writes/fsyncs of the protocol and nothing else (claim
  rename, run record via temp+link, output via temp+link, result via temp+rename, move).
- dirq: QueueSimple add / lock / get / remove per element (its own durability model).

Both modes: fsync on (the default) and `fsync: false`. Each repeat runs spoolrender and the
floor back to back (alternating which goes first); the ratio is the median of the repeats'.
Goal (issue 6): spoolrender >= 50% of the floor in both modes.

Reproduce:  .venv/bin/python bench/queue_overhead.py [--jobs 10000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import yaml
from goals import goal

from spoolrender.config.spool_config import load_config
from spoolrender.renderers.base import CancelToken, ProgressFn, Renderer, RenderRequest, RenderResult, WholeRendersOnly
from spoolrender.runner.loop import Runner
from spoolrender.spool.durable import set_fsync
from spoolrender.spool.layout import init_spool

JOB = b"renderer: command\ncommand: noop\n"


class NoopRenderer(WholeRendersOnly):
    """Writes a tiny output at once: what is left to measure is the queue."""

    def render(self, request: RenderRequest, progress: ProgressFn, cancel: CancelToken) -> RenderResult:
        request.output.write_bytes(b"x")
        return RenderResult()

    def verify(self, request: RenderRequest, result: RenderResult) -> None:
        pass

    def close(self) -> None:
        pass


def make_noop(name: str) -> Renderer:
    return NoopRenderer()


def fill(incoming: Path, jobs: int) -> None:
    for i in range(jobs):
        (incoming / f"j{i:06d}.yaml").write_bytes(JOB)


def run_spoolrender(base: Path, jobs: int, fsync: bool) -> float:
    layout = init_spool(base / "spool")
    config = {"settle_seconds": 0, "fsync": fsync, "commands": {"noop": ["true"]}}
    (layout.root / "spoolrender.yaml").write_text(yaml.safe_dump(config))
    fill(layout.incoming, jobs)
    runner = Runner(load_config(layout.root, environ={}), drain=True, make_renderer=make_noop)
    t0 = time.monotonic()
    summary = runner.run()
    took = time.monotonic() - t0
    assert summary.done == jobs, summary
    shutil.rmtree(base / "spool")
    return took


def _sync(fd: int, fsync: bool) -> None:
    if fsync:
        os.fsync(fd)


def _write(path: Path, data: bytes, fsync: bool) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    os.write(fd, data)
    _sync(fd, fsync)
    os.close(fd)


def _sync_dir(path: Path, fsync: bool) -> None:
    if fsync:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        os.fsync(fd)
        os.close(fd)


def run_floor(base: Path, jobs: int, fsync: bool) -> float:
    root = base / "floor"
    dirs = {d: root / d for d in ("incoming", "running", "done", "output")}
    for d in dirs.values():
        d.mkdir(parents=True)
    fill(dirs["incoming"], jobs)
    t0 = time.monotonic()
    for name in sorted(os.listdir(dirs["incoming"])):
        job = dirs["running"] / name[:-5]
        job.mkdir()
        os.rename(dirs["incoming"] / name, job / "job.yaml")  # claim
        _write(job / ".run.tmp", b'{"outcome": "publishing"}', fsync)  # decision
        os.link(job / ".run.tmp", job / "run-0001.json")
        os.unlink(job / ".run.tmp")
        _sync_dir(job, fsync)
        _write(job / ".out.tmp", b"x", fsync)  # output
        os.link(job / ".out.tmp", dirs["output"] / f"{name[:-5]}.mp4")
        os.unlink(job / ".out.tmp")
        _sync_dir(dirs["output"], fsync)
        _write(job / ".result.tmp", b'{"ok": true}', fsync)  # result
        os.rename(job / ".result.tmp", job / "result.json")
        _sync_dir(job, fsync)
        os.rename(job, dirs["done"] / job.name)  # move
        _sync_dir(dirs["done"], fsync)
        _sync_dir(dirs["running"], fsync)
    took = time.monotonic() - t0
    shutil.rmtree(root)
    return took


def run_dirq(base: Path, jobs: int) -> float | None:
    try:
        from dirq.QueueSimple import QueueSimple
    except ImportError:
        return None
    queue = QueueSimple(str(base / "dirq"))
    t0 = time.monotonic()
    for _ in range(jobs):
        queue.add(JOB)
    for name in queue:
        if queue.lock(name):
            queue.get(name)
            queue.remove(name)
    took = time.monotonic() - t0
    shutil.rmtree(base / "dirq")
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    logging.disable(logging.ERROR)  # one line per job would measure the terminal
    base = Path(tempfile.mkdtemp(prefix="spoolrender-bench-"))
    print(f"machine: {os.cpu_count()} cores; {args.jobs} no-op jobs; medians of {args.repeats}")
    try:
        for fsync in (True, False):
            ours: list[float] = []
            floors: list[float] = []
            for i in range(args.repeats):
                # Side by side: each repeat is one pair, run back to back, and the pairs'
                # order alternates, so that the machine's drift (load, a previous run's
                # freed inodes, which ext4 scans past when it makes new ones) falls on
                # both sides alike; the ratio reported is the median of the pairs' ratios.
                pair = (run_spoolrender, run_floor) if i % 2 == 0 else (run_floor, run_spoolrender)
                took = {run: run(base, args.jobs, fsync) for run in pair}
                set_fsync(True)
                ours.append(took[run_spoolrender])
                floors.append(took[run_floor])
            ratios = [f / o for f, o in zip(floors, ours, strict=True)]
            ratio = statistics.median(ratios)
            mode = "fsync on " if fsync else "fsync off"
            print(f"{mode}: spoolrender {args.jobs / statistics.median(ours):7.0f} jobs/s   "
                  f"floor {args.jobs / statistics.median(floors):7.0f} jobs/s   ratio {ratio:.2f} "
                  f"(pairs: {', '.join(f'{r:.2f}' for r in ratios)})")  # fmt: skip
            print(goal(f"{mode.strip()} >= 0.50 of the floor", f"{ratio:.2f}", ratio >= 0.5))
        peer = run_dirq(base, args.jobs)
        if peer is not None:
            print(f"peer: dirq QueueSimple add + lock/get/remove: {args.jobs / peer:7.0f} elements/s "
                  "(no fsync, no records, no outputs: a lower bound on bare queue cost)")  # fmt: skip
        print(f"reproduce: .venv/bin/python bench/queue_overhead.py --jobs {args.jobs} --repeats {args.repeats}")
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
