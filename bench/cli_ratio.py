#!/usr/bin/env python3
"""spoolrender vs the project's own CLI (issue 22): each render of the conformance suite's
project shapes (tests/support/conformance.py: TypeScript and JavaScript starters, a still,
an audiogram, a Next.js-nested entry point with a webpack override, mixed versions) timed
as ``npx remotion render``/``still`` in the project directory (one process per render: it
bundles each time, as a user's loop of CLI calls does) and as a job through a warm
long-running ``spoolrender run`` (bundle cached, worker and Chromium warm: the first job
of each project is rendered before the clock starts), drop into incoming/ to the job in
done/. The two alternate, render by render, so that a load change hits both; medians over
the repeats. The ratio is CLI / spoolrender: how many times faster a warm runner turns a
job around than the CLI renders it.

Reproduce:  .venv/bin/python bench/cli_ratio.py [--repeats 5] [--shapes typescript-starter,...]
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

import yaml
from spools import CMD, ROOT, make_spool

sys.path.insert(0, str(ROOT / "tests"))  # the shapes are the conformance suite's own
from support.conformance import SHAPES, Render, Shape, run_cli

DONE_TIMEOUT_S = 600.0
POLL_S = 0.02


def drop(spool: Path, job_id: str, job: dict[str, object]) -> None:
    # Written aside, then renamed in: what `spoolrender submit` does.
    tmp = spool / "incoming" / f".{job_id}.yaml"
    tmp.write_text(yaml.safe_dump({"id": job_id, **job}))
    tmp.rename(tmp.with_name(f"{job_id}.yaml"))


def wait_done(spool: Path, job_id: str) -> None:
    deadline = time.monotonic() + DONE_TIMEOUT_S
    while time.monotonic() < deadline:
        if any(e.startswith(f"{job_id}.") for e in os.listdir(spool / "done")):
            return
        failed = [e for e in os.listdir(spool / "failed") if e.startswith(f"{job_id}.")]
        if failed:
            raise SystemExit(f"job {job_id} failed: {(spool / 'failed' / failed[0] / 'failure.json').read_text()}")
        time.sleep(POLL_S)
    raise SystemExit(f"job {job_id} not done within {DONE_TIMEOUT_S:g} s")


def through_runner(spool: Path, render: Render, tag: str) -> float:
    path = Path(render.output)
    job_id = f"{path.stem}-{tag}"
    t0 = time.monotonic()
    drop(spool, job_id, {**render.job(), "output": f"{job_id}{path.suffix}"})
    wait_done(spool, job_id)
    return time.monotonic() - t0


def through_cli(project: Path, render: Render, out_dir: Path, tag: str) -> float:
    out = out_dir / f"{Path(render.output).stem}-{tag}{Path(render.output).suffix}"
    t0 = time.monotonic()
    run_cli(project, render, out)
    return time.monotonic() - t0


def bench_shape(shape: Shape, base: Path, repeats: int) -> list[tuple[Render, list[float], list[float]]]:
    project = shape.write(base)
    config = {"remotion_project": str(project), "cache_dir": str(base / "cache"), "slots": 1}
    spool = make_spool(base / f"{shape.name}-spool", config)
    out_dir = base / f"{shape.name}-cli"
    out_dir.mkdir()
    log = open(base / f"{shape.name}-runner.log", "wb")  # noqa: SIM115  # the runner's, closed below
    runner = subprocess.Popen([*CMD, "run", "--spool", str(spool)], stdout=log, stderr=subprocess.STDOUT)
    try:
        for render in shape.renders:  # warm: the bundle, the worker, each kind of render once
            through_runner(spool, render, "warm")
        results = []
        for render in shape.renders:
            cli, ours = [], []
            for i in range(repeats):
                cli.append(through_cli(project, render, out_dir, f"{i}"))
                ours.append(through_runner(spool, render, f"{i}"))
            results.append((render, cli, ours))
        return results
    finally:
        runner.terminate()
        runner.wait(timeout=120)
        log.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--shapes", default=",".join(s.name for s in SHAPES))
    args = parser.parse_args()
    wanted = args.shapes.split(",")
    shapes = [s for s in SHAPES if s.name in wanted]
    missing = [s.name for s in shapes if not s.node_modules.is_dir()]
    if missing:
        raise SystemExit(f"not installed: {', '.join(missing)} (run bash scripts/setup.sh --test)")
    ratios = []
    load0 = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="spoolrender-cli-ratio-") as tmp:
        for shape in shapes:
            for render, cli, ours in bench_shape(shape, Path(tmp), args.repeats):
                cli_s, ours_s = statistics.median(cli), statistics.median(ours)
                ratios.append(cli_s / ours_s)
                kind = "still" if render.still else "render"
                print(f"{shape.name} {render.composition}: npx remotion {kind} {cli_s:.2f} s, warm spoolrender "
                      f"runner {ours_s:.2f} s (drop to done): {cli_s / ours_s:.1f}x", flush=True)  # fmt: skip
    print(f"machine: {os.cpu_count()} cores; load average {load0:.1f} at the start, {os.getloadavg()[0]:.1f} at the "
          f"end; medians of {args.repeats}, CLI and runner alternating")  # fmt: skip
    print(f"spoolrender vs the CLI (CLI time / warm runner time), median over {len(ratios)} renders: "
          f"{statistics.median(ratios):.1f}x (from {min(ratios):.1f}x to {max(ratios):.1f}x)")  # fmt: skip
    print(f"reproduce: .venv/bin/python bench/cli_ratio.py --repeats {args.repeats}"
          + ("" if len(shapes) == len(SHAPES) else f" --shapes {args.shapes}"))  # fmt: skip


if __name__ == "__main__":
    main()
