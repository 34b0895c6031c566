#!/usr/bin/env python3
"""Claim latency (issue 6, P1): a job file renamed into incoming/ -> the job claimed, and ->
its render started, for the runner's inotify path, its polling path and the seeds' design
(a minimal loop that lists incoming/ every 1 s and renames the first file into running/).

Method: the benchmark watches the spool itself with inotify (ctypes, no extra package) and
takes every timestamp on its own monotonic clock:
- drop: this process makes X.yaml appear in incoming/ (time taken after the call returns).
  Main path: `rename(incoming/.X.yaml.part, incoming/X.yaml)`, what `spoolrender submit`
  does. Also measured, fewer drops: a rename from another directory on the same filesystem,
  and `link()` from a hidden temporary name, then an open for writing and close of the
  new name (what contrib/drop/spoolrender-drop does: a bare link is only an IN_CREATE and
  waits settle_seconds);
- claim: the IN_MOVED_FROM event of X.yaml in incoming/, i.e. the claim `rename()` itself
  (the runner moves the file into running/<id>.<uid>.<token>/);
- render started: the job's command is `sh -c ': > "$STARTS/$ID"; echo x > "$1"'`, so the
  IN_CREATE of $STARTS/<id> marks the first thing the render process does (a shell builtin,
  no extra exec).
This is the most precise method (microseconds, one clock, no parsing). Cross-check: the
runner runs with `--log-format json -v`; its `incoming -> running` lines give a second
claim time (wall clock, millisecond resolution, logged just after the claim).
Drops are sequential: drop, wait for claim, start and done, then a random pause (uniform
0.02 s to max(1 s, poll period)), so drops fall at random phases of any poll cycle or delay. A fresh spool per
path in a temp dir, slots 2, settle_seconds default (5). The polling path sees no
"upload complete" event (close-after-write or rename inside incoming/), so a fresh file
waits settle_seconds: measured as such with few drops, and with n drops of files whose
mtime is settle_seconds+1 in the past (an upload that finished earlier), which isolates
the poll wake-up. The seeds' design: a loop in a subprocess that lists incoming/ every
1 s, renames the first file into running/ and runs the same command.
Goal with inotify: p50 <= 10 ms, p99 <= 50 ms.

Reproduce:  .venv/bin/python bench/claim_latency.py [--drops 200] [--others 10] [--poll-seconds 0.5]
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import random
import select
import shutil
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

import yaml
from goals import goal

CMD = [sys.executable, "-m", "spoolrender.cli"]
IN_MOVED_FROM, IN_MOVED_TO, IN_CREATE = 0x40, 0x80, 0x100
EVENT = struct.Struct("iIII")  # wd, mask, cookie, len; then len bytes of name
SETTLE_DEFAULT = 5.0


class Inotify:
    """Just enough inotify: watches, and events stamped with time.monotonic() on arrival."""

    def __init__(self) -> None:
        self._libc = ctypes.CDLL(None, use_errno=True)
        self.fd = int(self._libc.inotify_init1(os.O_CLOEXEC | os.O_NONBLOCK))
        if self.fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1")

    def watch(self, path: Path, mask: int) -> int:
        wd = int(self._libc.inotify_add_watch(self.fd, os.fsencode(path), mask))
        if wd < 0:
            raise OSError(ctypes.get_errno(), f"inotify_add_watch {path}")
        return wd

    def read(self, timeout: float) -> list[tuple[int, int, str, float]]:
        ready, _, _ = select.select([self.fd], [], [], max(0.0, timeout))
        if not ready:
            return []
        now = time.monotonic()
        data = os.read(self.fd, 1 << 16)
        out = []
        pos = 0
        while pos < len(data):
            wd, mask, _cookie, length = EVENT.unpack_from(data, pos)
            name = data[pos + EVENT.size : pos + EVENT.size + length].rstrip(b"\0").decode()
            out.append((wd, mask, name, now))
            pos += EVENT.size + length
        return out

    def close(self) -> None:
        os.close(self.fd)


def ms(value: float) -> str:
    return f"{value * 1000:9.1f}"


def pct(values: list[float], p: int) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[p - 1]


def noop_command(starts: Path) -> list[str]:
    return ["sh", "-c", ': > "$2/$3"; echo x > "$1"', "sh", "{output}", str(starts), "{job_id}"]


def seed_loop(spool: Path, starts: Path) -> None:
    """The seeds' design: every 1 s list incoming/, claim the first file, run the command."""
    incoming, running, done = spool / "incoming", spool / "running", spool / "done"
    while True:
        names = sorted(n for n in os.listdir(incoming) if not n.startswith("."))
        if names:
            name = names[0]
            os.rename(incoming / name, running / name)
            job_id = name.rsplit(".", 1)[0]
            argv = [a.replace("{output}", str(spool / "output" / f"{job_id}.mp4")).replace("{job_id}", job_id)
                    for a in noop_command(starts)]  # fmt: skip
            subprocess.run(argv, check=True)
            os.rename(running / name, done / name)
        time.sleep(1.0)


class Mode:
    def __init__(self, key: str, label: str, watch: str, drop: str, drops: int, period: float = 1.0) -> None:
        self.key, self.label, self.watch, self.drop, self.drops, self.period = key, label, watch, drop, drops, period
        self.claim: list[float] = []
        self.start: list[float] = []
        self.log_claim: list[float] = []


def drop_file(mode: Mode, root: Path, incoming: Path, name: str) -> float:
    """Stage a complete job file, then make it appear in incoming/; the monotonic time after."""
    tmp = root / "staging" / name if mode.drop == "across" else incoming / f".{name}.part"
    tmp.write_text("renderer: command\ncommand: noop\n")
    if mode.drop == "backdated":
        old = time.time() - SETTLE_DEFAULT - 1
        os.utime(tmp, (old, old))
    if mode.drop == "link":
        os.link(tmp, incoming / name)
        t0 = time.monotonic()
        tmp.unlink()
        # What contrib/drop/spoolrender-drop does next (`dd conv=notrunc,nocreat`): open the
        # job for writing and close it, so that inotify reports it complete (IN_CLOSE_WRITE).
        with contextlib.suppress(FileNotFoundError):  # claimed already
            os.close(os.open(incoming / name, os.O_WRONLY))
        return t0
    os.rename(tmp, incoming / name)
    return time.monotonic()


def measure(mode: Mode, base: Path, poll_seconds: float, warmup: int = 3) -> None:
    root = base / mode.key
    spool, starts = root / "spool", root / "starts"
    starts.mkdir(parents=True)
    (root / "staging").mkdir()
    log_path = root / "runner.log"
    if mode.watch == "seed":
        for d in ("incoming", "running", "done", "output"):
            (spool / d).mkdir(parents=True)
        proc = subprocess.Popen([sys.executable, __file__, "--seed-loop", str(spool), str(starts)])
    else:
        subprocess.run([*CMD, "init", str(spool)], check=True, capture_output=True)
        config = {"commands": {"noop": noop_command(starts)}, "slots": 2, "watch": mode.watch}
        if mode.watch == "polling":
            config["poll_seconds"] = poll_seconds
        (spool / "spoolrender.yaml").write_text(yaml.safe_dump(config))
        with log_path.open("w") as log:
            proc = subprocess.Popen([*CMD, "run", "--spool", str(spool), "--log-format", "json", "-v"],
                                    stderr=log, stdout=subprocess.DEVNULL)  # fmt: skip
    ino = Inotify()
    wd_in = ino.watch(spool / "incoming", IN_MOVED_FROM)
    wd_starts = ino.watch(starts, IN_CREATE)
    wd_done = ino.watch(spool / "done", IN_MOVED_TO)
    drop_wall: dict[str, float] = {}
    rng = random.Random(6)
    try:
        for i in range(warmup + mode.drops):
            job_id = f"{mode.key}-{i:04d}"
            name = f"{job_id}.yaml"
            time.sleep(rng.uniform(0.02, max(1.0, mode.period)))
            t0 = drop_file(mode, root, spool / "incoming", name)
            drop_wall[job_id] = time.time() - (time.monotonic() - t0)
            claimed = started = finished = None
            deadline = t0 + 60
            while finished is None:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise SystemExit(f"{mode.key}: {job_id} not claimed/started/done within 60 s")
                for wd, _mask, ev_name, t in ino.read(deadline - time.monotonic()):
                    if wd == wd_in and ev_name == name:
                        claimed = t
                    elif wd == wd_starts and ev_name == job_id:
                        started = t
                    elif wd == wd_done and ev_name.startswith(job_id + "."):
                        finished = t
            if claimed is None or started is None:
                raise SystemExit(f"{mode.key}: {job_id} finished without a claim/start event")
            if i >= warmup:
                mode.claim.append(claimed - t0)
                mode.start.append(started - t0)
    finally:
        ino.close()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    if mode.watch != "seed":
        for line in log_path.read_text().splitlines():
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            job = rec.get("job")
            if rec.get("from") == "incoming" and rec.get("to") == "running" and job in drop_wall:
                if int(job.rsplit("-", 1)[1]) < warmup:
                    continue
                logged = datetime.fromisoformat(rec["time"].replace("Z", "+00:00")).timestamp()
                mode.log_claim.append(logged - drop_wall[job])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--drops", type=int, default=200, help="measured drops per mode (after 3 warm-ups)")
    parser.add_argument("--others", type=int, default=10, help="drops for the slow paths (each waits ~settle_seconds)")
    parser.add_argument("--poll-seconds", type=float, default=0.5, help="poll_seconds of the polling path")
    parser.add_argument("--seed-loop", nargs=2, metavar=("SPOOL", "STARTS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.seed_loop:
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        seed_loop(Path(args.seed_loop[0]), Path(args.seed_loop[1]))
        return
    poll = args.poll_seconds
    modes = [
        Mode("ino", "inotify, rename in incoming/ (submit)", "inotify", "rename", args.drops),
        Mode("ino-across", "inotify, rename from another dir", "inotify", "across", args.others),
        Mode("ino-link", "inotify, link() + open/close (contrib/drop)", "inotify", "link", args.others),
        Mode("poll", f"polling {poll:g} s, upload settled", "polling", "backdated", args.drops, poll),
        Mode("poll-fresh", f"polling {poll:g} s, fresh upload", "polling", "rename", args.others, poll),
        Mode("seed", "seeds' design: 1 s poll loop", "seed", "rename", args.drops),
    ]
    base = Path(tempfile.mkdtemp(prefix="spoolrender-bench-"))
    try:
        print(f"machine: {os.cpu_count()} cores; sequential drops per path (+3 warm-ups), slots 2, settle_seconds 5")
        for mode in modes:
            t0 = time.monotonic()
            measure(mode, base, poll)
            print(f"  measured {mode.label}: {mode.drops} drops in {time.monotonic() - t0:.0f} s", flush=True)
        print("latency in ms from the drop (rename or link into incoming/). claim: the claim rename out of incoming/")
        print("(inotify); start: the render command's first builtin (inotify); log: the runner's JSON `incoming ->")
        print("running` line (wall clock, ms resolution)")
        print(f"  {'path':<40} {'n':>4} {'what':<6} {'p50':>9} {'p90':>9} {'p99':>9} {'max':>9}")
        for mode in modes:
            for what, values in (("claim", mode.claim), ("start", mode.start), ("log", mode.log_claim)):
                if len(values) < 2:
                    continue
                print(f"  {mode.label:<40} {len(values):>4} {what:<6} {ms(pct(values, 50))} {ms(pct(values, 90))} "
                      f"{ms(pct(values, 99))} {ms(max(values))}")  # fmt: skip
        ino = modes[0]
        p50, p99 = pct(ino.claim, 50) * 1000, pct(ino.claim, 99) * 1000
        print(goal("inotify claim p50 <= 10 ms", f"{p50:.1f} ms (n={len(ino.claim)})", p50 <= 10))
        print(goal("inotify claim p99 <= 50 ms", f"{p99:.1f} ms (n={len(ino.claim)})", p99 <= 50))
        print(f"inotify render start: p50 {pct(ino.start, 50) * 1000:.1f} ms, p99 {pct(ino.start, 99) * 1000:.1f} ms")
        for other in modes[1:]:
            r50, r99 = pct(other.claim, 50) / pct(ino.claim, 50), pct(other.claim, 99) / pct(ino.claim, 99)
            print(f"ratio {other.label:<40} / inotify (submit), claim p50: {r50:7.1f}x, p99: {r99:7.1f}x")
        print(f"reproduce: .venv/bin/python bench/claim_latency.py --drops {args.drops} "
              f"--others {args.others} --poll-seconds {args.poll_seconds:g}")  # fmt: skip
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
