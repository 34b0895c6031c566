"""Log lines and CPU of a runner whose spool disk is full (issue 21), as root.

A 64 MiB ext4 image is loop-mounted, a paused spool on it gets a few jobs, the disk is
filled, the spool is resumed (a pause marker's removal needs no room), and the runner's
log lines and CPU time (psutil) are counted over a window. Run:

    sudo .venv/bin/python bench/full_disk.py [--window 10] [--pythonpath DIR]

``--pythonpath`` runs another checkout's spoolrender (e.g. an older commit's tree).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import yaml

from spoolrender.spool.layout import init_spool

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests" / "reliability")]
from small_disk import fill, mount_small_ext4  # noqa: E402
from support.spool_jobs import FAST, command_job, drop  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--window", type=float, default=10.0)
    parser.add_argument("--pythonpath")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        mnt = mount_small_ext4(Path(tmp))
        if isinstance(mnt, str):
            sys.exit(mnt)
        try:
            layout = init_spool(mnt / "spool")
            config = {
                **FAST,
                "heartbeat_seconds": 5.0,
                "lease_seconds": 60.0,
                "rescan_seconds": 10.0,
                "output_root": f"{tmp}/output",
            }
            (layout.root / "spoolrender.yaml").write_text(yaml.safe_dump(config))
            (layout.private / "paused").write_text("bench\n")
            for i in range(3):
                drop(layout, f"j{i}.yaml", command_job())
            log = Path(tmp) / "runner.log"
            env = {**os.environ, **({"PYTHONPATH": args.pythonpath} if args.pythonpath else {})}
            with open(log, "ab") as out:
                runner = subprocess.Popen(
                    [sys.executable, "-m", "spoolrender.cli", "run", "--spool", str(layout.root), "-v"],
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    env=env,
                    cwd=tmp,
                )
            time.sleep(3)  # started and listed (paused)
            fill(mnt)
            (layout.private / "paused").unlink()
            time.sleep(2)
            proc = psutil.Process(runner.pid)
            cpu0, lines0 = sum(proc.cpu_times()[:2]), log.read_bytes().count(b"\n")
            time.sleep(args.window)
            cpu1, lines1 = sum(proc.cpu_times()[:2]), log.read_bytes().count(b"\n")
            runner.terminate()
            runner.wait(timeout=30)
        finally:
            subprocess.run(["umount", "-l", str(mnt)], check=False)
    print(f"command: {' '.join(sys.argv)}")
    print(
        f"full disk, {args.window:g} s window: {(lines1 - lines0) / args.window:.1f} log lines/s, "
        f"CPU {100 * (cpu1 - cpu0) / args.window:.1f}% of one core"
    )


if __name__ == "__main__":
    main()
