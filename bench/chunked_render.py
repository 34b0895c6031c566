#!/usr/bin/env python3
"""Chunked rendering (P6): one long composition rendered whole vs split into chunks across
this host's default slots and joined, side by side in one run.

Both go through the renderer API the way a runner's slots use it, with warm workers (each
renderer has rendered a Tiny job before the clock starts; bundle cached):
  - whole: one RemotionRenderer renders the job at each Remotion concurrency in
    --concurrencies (the best one is what a single render can do on this host);
  - split: `frame_span` on one slot, then one chunk per slot (spoolrender.runner.capacity's
    default slot count: one RemotionRenderer each, in parallel threads), each chunk
    rendered and verified, then `join` (Remotion's combineChunks) and `verify_join`
    (ffprobe) on one slot. The clock runs from frame_span to the end of verify_join: what
    a split job costs beyond its spool bookkeeping (the spool side is measured elsewhere).
Rounds alternate whole and split renders; figures are medians over the rounds. The join
time is also given alone (the docs' section on chunked rendering quotes it).
Goal (issue 14): split >= 1.7x faster than the best whole render, join included.

Reproduce:  .venv/bin/python bench/chunked_render.py [--seconds 20] [--rounds 3] [--concurrencies 1,2]
"""

from __future__ import annotations

import argparse
import itertools
import math
import os
import shutil
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import yaml
from goals import goal
from spools import make_spool, remotion_config

from spoolrender.config.spool_config import SpoolConfig, load_config
from spoolrender.jobfile import parse_job
from spoolrender.renderers.base import CancelToken, ChunkPart, FrameSpan, JoinRequest, RenderRequest
from spoolrender.renderers.remotion.renderer import RemotionRenderer
from spoolrender.runner.capacity import plan_capacity


def ignore(fraction: float | None, stage: str | None = None) -> None:
    pass


class Requests:
    """Render requests for one job, each in its own scratch directory under ``work``."""

    def __init__(self, config: SpoolConfig, job: dict[str, Any], work: Path) -> None:
        self.config = config
        self.spec = parse_job(yaml.safe_dump(job).encode(), "bench.yaml", config)
        self.props, self.settings, _ = self.spec.settings_for_attempt(1)
        self.work = work
        self._n = itertools.count()

    def scratch(self) -> Path:
        path = self.work / str(next(self._n))
        path.mkdir(parents=True)
        return path

    def render(self, threads: int, chunk: ChunkPart | None = None) -> RenderRequest:
        scratch = self.scratch()
        output = scratch / "chunk" if chunk is not None else scratch / "out.mp4"
        if chunk is not None:
            output.mkdir()
        return RenderRequest(spec=self.spec, job_file=scratch / "job.yaml", output=output, work_dir=scratch,
                             log=scratch / "log", threads=threads, attempt=1, props=self.props,
                             settings=self.settings, chunk=chunk)  # fmt: skip

    def join(self, parts: list[tuple[ChunkPart, Path]], span: FrameSpan) -> JoinRequest:
        scratch = self.scratch()
        return JoinRequest(spec=self.spec, parts=tuple(parts), span=span, output=scratch / "out.mp4",
                           work_dir=scratch, log=scratch / "log", threads=1, props=self.props,
                           settings=self.settings)  # fmt: skip


def plan(span: FrameSpan, count: int) -> list[ChunkPart]:
    """``count`` chunks as Remotion can join them: equal lengths, the last one shorter."""
    per_chunk = math.ceil(span.frames / count)
    firsts = range(span.first, span.last + 1, per_chunk)
    return [ChunkPart(i, len(firsts), a, min(a + per_chunk - 1, span.last)) for i, a in enumerate(firsts)]


def whole(renderer: RemotionRenderer, requests: Requests, concurrency: int) -> float:
    request = requests.render(concurrency)
    t0 = time.monotonic()
    result = renderer.render(request, ignore, CancelToken())
    renderer.verify(request, result)
    return time.monotonic() - t0


def split(slots: list[RemotionRenderer], requests: Requests, threads: int) -> dict[str, float]:
    """The split job on every slot: its phases' wall times in seconds."""
    t0 = time.monotonic()
    span = slots[0].frame_span(requests.render(threads), CancelToken())
    t_span = time.monotonic()
    chunks = plan(span, len(slots))
    parts: list[tuple[ChunkPart, Path] | None] = [None] * len(chunks)
    errors: list[BaseException] = []

    def serve(renderer: RemotionRenderer, todo: list[ChunkPart]) -> None:
        for chunk in todo:
            try:
                request = requests.render(threads, chunk)
                renderer.verify(request, renderer.render(request, ignore, CancelToken()))
                parts[chunk.index] = (chunk, request.output)
            except Exception as exc:  # reported after every thread stopped
                errors.append(exc)

    pool = [threading.Thread(target=serve, args=(r, chunks[i :: len(slots)])) for i, r in enumerate(slots)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    if errors:
        raise SystemExit(f"a chunk failed: {errors[0]!r}")
    t_chunks = time.monotonic()
    join = requests.join([p for p in parts if p is not None], span)
    result = slots[0].join(join, ignore, CancelToken())
    t_join = time.monotonic()
    slots[0].verify_join(join, result)
    t_end = time.monotonic()
    return {
        "total": t_end - t0,
        "span": t_span - t0,
        "chunks": t_chunks - t_span,
        "join": t_join - t_chunks,
        "verify_join": t_end - t_join,
        "frames": span.frames,
        "count": len(chunks),
        "per_chunk": chunks[0].frames,
        "output_mb": join.output.stat().st_size / 1e6,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=20.0, help="length of the TitleCard video (30 fps)")
    parser.add_argument("--rounds", type=int, default=3, help="whole and split renders alternate this many times")
    parser.add_argument("--concurrencies", default="1,2", help="Remotion concurrencies tried for the whole render")
    args = parser.parse_args()
    concurrencies = [int(c) for c in args.concurrencies.split(",")]
    base = Path(tempfile.mkdtemp(prefix="spoolrender-bench-chunks-"))
    renderers: list[RemotionRenderer] = []
    try:
        config = load_config(make_spool(base / "spool", remotion_config(base / "cache")), environ={})
        capacity = plan_capacity(config)
        slots_n, threads = capacity.slots, capacity.threads_per_job
        job = {"id": "p6", "composition": "TitleCard", "props": {"title": "Chunked render", "seconds": args.seconds}}
        requests = Requests(config, job, base / "work")
        renderers = [RemotionRenderer(config) for _ in range(slots_n)]
        # Warm every slot (bundle built once, worker started, browser open) before the clock.
        warm = Requests(config, {"id": "warm", "composition": "Tiny"}, base / "warm")
        for renderer in renderers:
            renderer.render(warm.render(1), ignore, CancelToken())

        wholes: dict[int, list[float]] = {c: [] for c in concurrencies}
        splits: list[dict[str, float]] = []
        for rnd in range(args.rounds):
            for c in concurrencies:
                wholes[c].append(whole(renderers[0], requests, c))
            splits.append(split(renderers, requests, threads))
            shown = ", ".join(f"whole at concurrency {c} {wholes[c][-1]:.1f} s" for c in concurrencies)
            print(f"  round {rnd + 1}: {shown}; split {splits[-1]['total']:.1f} s "
                  f"(join {splits[-1]['join']:.2f} s)", flush=True)  # fmt: skip
            shutil.rmtree(requests.work, ignore_errors=True)  # outputs of 1280x720 renders add up

        medians = {c: statistics.median(w) for c, w in wholes.items()}
        best = min(medians, key=lambda c: medians[c])
        phase = {k: statistics.median(s[k] for s in splits) for k in splits[0]}
        frames, count, per_chunk = int(phase["frames"]), int(phase["count"]), int(phase["per_chunk"])
        print(f"machine: {os.cpu_count()} cores; TitleCard {frames} frames ({frames / 30:.1f} s) 1280x720 h264; "
              f"{slots_n} slot(s) x {threads} thread(s) ({capacity.reason}); "
              f"medians of {args.rounds} rounds")  # fmt: skip
        print("whole render: " + ", ".join(f"concurrency {c} {medians[c]:.1f} s" for c in concurrencies)
              + f"; best: concurrency {best}")  # fmt: skip
        print(f"split into {count} chunks of {per_chunk} frames on {slots_n} slots: {phase['total']:.1f} s "
              f"(frame_span {phase['span']:.2f} s, chunks rendered and verified {phase['chunks']:.1f} s, "
              f"join {phase['join']:.2f} s, verify_join {phase['verify_join']:.2f} s)")  # fmt: skip
        checked = phase["join"] + phase["verify_join"]
        print(f"join alone (combineChunks, {frames} frames, {phase['output_mb']:.1f} MB): {phase['join']:.2f} s; "
              f"with verify_join (ffprobe counts every frame): {checked:.2f} s")  # fmt: skip
        ratio = medians[best] / phase["total"]
        print(goal("split >= 1.7x faster than the best whole render, join included", f"{ratio:.2f}x", ratio >= 1.7))
        print(
            f"reproduce: .venv/bin/python bench/chunked_render.py --seconds {args.seconds:g} --rounds {args.rounds} "
            f"--concurrencies {args.concurrencies}"
        )
    finally:
        for renderer in renderers:
            renderer.close()
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
