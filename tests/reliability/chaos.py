"""Chaos: runners SIGKILLed at random moments and restarted, and others frozen (SIGSTOP)
past the lease and woken again, while they work a spool.

Shared by the bounded test (tests/reliability/test_chaos.py) and the long run
(tests/reliability/long_run.py). Jobs are real renders by the command renderer (a
Python program writing a known output); kills are real SIGKILLs; the verdict comes from
the disk (invariants.audit), after every runner has stopped.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import yaml
from invariants import Audit, audit
from support.chunk_jobs import FRAMES_CONFIG, chunk_leftovers, frames_job, video

from spoolrender.spool.layout import SpoolLayout, init_spool
from spoolrender.spool.records import read_runs

RENDER_PROPS = Path(__file__).resolve().parent.parent / "programs" / "render_props.py"
CMD = [sys.executable, "-m", "spoolrender.cli"]
# A drain takes a few seconds; the deadline only counts on a host far past its cores (a full
# run on 4 pytest-xdist workers beside other developers: load average 95).
DRAIN_TIMEOUT_S = 600
CONFIG = {
    "settle_seconds": 0.2,
    "heartbeat_seconds": 0.2,
    "lease_seconds": 2.0,
    "rescan_seconds": 0.3,
    "backoff_base_seconds": 0.05,
    "backoff_cap_seconds": 0.2,
    "grace_seconds": 2,
    "slots": 2,
    "max_attempts": 50,
    "commands": {
        "props": [sys.executable, str(RENDER_PROPS), "{output}", "{props_file}"],
        **FRAMES_CONFIG["commands"],
    },
    "command_chunks": FRAMES_CONFIG["command_chunks"],  # split jobs: tests/support/chunk_jobs.py
}
# Where a job may be while it is not finished (split/: waiting for its chunks).
LIVE_STATES = ("incoming", "running", "retry", "split")


@dataclass
class ChaosReport:
    jobs: int
    kills: int
    freezes: int
    runner_died_runs: int
    renders: int
    audit: Audit
    seconds: float
    alarms: list[str]  # ERROR lines in the runners' log: each would page a person
    leftovers: list[str]  # beacons and clock probes of runners that are all gone

    def row(self) -> dict[str, object]:
        return {
            "jobs": self.jobs,
            "kills": self.kills,
            "freezes": self.freezes,
            "lost": len(self.audit.lost),
            "duplicated": len(self.audit.duplicated),
            "partial files": len(self.audit.partial_files),
            "bad outputs": len(self.audit.bad_outputs),
            "orphans": len(self.audit.orphans),
            "recovered runs": self.runner_died_runs,
            "renders": self.renders,
            "errors logged": len(self.alarms),
            "leftovers": len(self.leftovers),
            "seconds": round(self.seconds, 1),
        }


def _start(spool: Path, log: Path, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    with open(log, "ab") as out:
        return subprocess.Popen([*CMD, "run", "-v", "--spool", str(spool)], stdout=out, stderr=subprocess.STDOUT,
                                env={**os.environ, **(env or {})})  # fmt: skip


def _leftovers(layout: SpoolLayout) -> list[str]:
    """Beacons, clock probes and temporary files left in .spoolrender/ by runners."""
    private = [n for n in os.listdir(layout.private) if n.startswith("clock-") or n.endswith(".tmp")]
    return os.listdir(layout.runners) + private


def _is_busy(layout: SpoolLayout, proc: subprocess.Popen[bytes]) -> bool:
    for name in os.listdir(layout.runners):
        if name.split("-")[-2:-1] == [str(proc.pid)]:
            try:
                return int(json.loads((layout.runners / name).read_bytes())["busy"]) > 0
            except (OSError, ValueError, KeyError):
                return False
    return False


def run_chaos(
    base: Path,
    *,
    jobs: int,
    runners: int,
    kills: int,
    seed: int,
    freezes: int = 0,
    timeout: float = 600,
    split_jobs: int = 0,
) -> ChaosReport:
    """``kills`` random SIGKILLs (each victim restarted) and ``freezes`` random SIGSTOPs of
    1.5 leases (a VM pause: the victim's jobs are recovered elsewhere meanwhile, and it
    wakes up to find them gone), in random order. ``split_jobs`` more jobs are rendered in
    chunks (2-5 of them, by any runner) and joined."""
    rng = random.Random(seed)
    layout = init_spool(base / "spool")
    (layout.root / "spoolrender.yaml").write_text(yaml.safe_dump(CONFIG))
    marker = base / "renders.txt"
    expected: dict[str, bytes] = {}
    for i in range(jobs):
        job_id = f"c{i:05d}"
        content = f"output of {job_id}"
        expected[job_id] = content.encode()
        props = {"sleep": rng.choice((0, 0.05, 0.2, 0.5)), "content": content, "marker": str(marker), "tag": job_id}
        tmp = layout.incoming / f".{job_id}.part"
        tmp.write_text(yaml.safe_dump({"renderer": "command", "command": "props", "props": props}))
        os.rename(tmp, layout.incoming / f"{job_id}.yaml")
    for i in range(split_jobs):
        job_id = f"s{i:05d}"
        frames = rng.choice((20, 30, 40))
        expected[job_id] = video(frames).encode()
        job = frames_job(rng.choice((2, 3, 4, 5)), frames=frames, sleep=rng.choice((0, 0.01, 0.03)))
        tmp = layout.incoming / f".{job_id}.part"
        tmp.write_text(yaml.safe_dump(job))
        os.rename(tmp, layout.incoming / f"{job_id}.yaml")
    log = base / "runners.log"
    started = time.monotonic()
    procs = [_start(layout.root, log) for _ in range(runners)]
    done_kills = done_freezes = 0
    frozen: dict[int, float] = {}  # runner index -> monotonic time to wake it
    lease = float(CONFIG["lease_seconds"])
    try:
        while (done_kills < kills or done_freezes < freezes) and time.monotonic() - started < timeout:
            time.sleep(rng.uniform(0.05, 0.6))
            for i, wake_at in list(frozen.items()):
                if time.monotonic() >= wake_at:
                    procs[i].send_signal(signal.SIGCONT)
                    del frozen[i]
            # Only runners that are rendering (their beacon says busy): a kill during the
            # import of Python or the first scan would test little.
            rendering = [i for i in range(runners) if i not in frozen and _is_busy(layout, procs[i])]
            if not rendering:
                if not any(os.listdir(layout.root / s) for s in LIVE_STATES):
                    break  # nothing left to disturb
                continue
            victim = rng.choice(rendering)
            if done_freezes < freezes and (done_kills >= kills or rng.random() < freezes / (kills + freezes)):
                procs[victim].send_signal(signal.SIGSTOP)
                frozen[victim] = time.monotonic() + 1.5 * lease
                done_freezes += 1
                continue
            procs[victim].send_signal(signal.SIGKILL)
            procs[victim].wait()
            done_kills += 1
            procs[victim] = _start(layout.root, log)
        for i in frozen:
            procs[i].send_signal(signal.SIGCONT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            busy = any(os.listdir(layout.root / s) for s in LIVE_STATES)
            if not busy:
                break
            time.sleep(0.2)
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
    # One last drain recovers anything the final SIGTERMs left in running/, and expires the
    # beacons of the SIGKILLed runners.
    subprocess.run([*CMD, "run", "--drain", "--spool", str(layout.root)], capture_output=True, timeout=DRAIN_TIMEOUT_S)
    alarms = [line for line in log.read_text(errors="replace").splitlines() if " ERROR " in line]
    # A beacon write cut short by a kill leaves its temporary file: it goes with the dead
    # runner's beacon at the next runner's sweep (beacons.expire_runners). Drains (as cron
    # would start them) until then.
    cleanup_deadline = time.monotonic() + 10 * float(CONFIG["lease_seconds"])
    while (leftovers := _leftovers(layout)) and time.monotonic() < cleanup_deadline:
        time.sleep(0.5)
        subprocess.run(
            [*CMD, "run", "--drain", "--spool", str(layout.root)], capture_output=True, timeout=DRAIN_TIMEOUT_S
        )
    seconds = time.monotonic() - started
    result = audit(layout, set(expected), output_ok=expected, max_attempts=CONFIG["max_attempts"])
    died = 0
    for state in ("done", "failed", "retry"):
        for name in os.listdir(layout.state_dir(state)):
            runs = read_runs(layout.state_dir(state) / name)
            died_here = sum(1 for r in runs if (r.error or {}).get("kind") == "runner-died")
            died += died_here
            publishes = [r for r in runs if r.outcome == "publishing"]
            # Attempts consistent with the kills: every attempt but the publishing one
            # was lost to a kill (the command never fails by itself here); a split job's
            # "split" runs (waiting for its chunks) use no attempt.
            if state == "done" and len(runs) - len(publishes) != died_here + sum(
                1 for r in runs if r.outcome in ("requeue", "reset", "split")
            ):
                result.attempt_violations.append(f"{state}/{name}: runs {[r.outcome for r in runs]}")
    renders = len(marker.read_text().splitlines()) if marker.exists() else 0
    # Chunk entries, ledgers and chunk files of ended jobs: the sweep removes them.
    leftovers += chunk_leftovers(layout, layout.root / "output")
    return ChaosReport(jobs + split_jobs, done_kills, done_freezes, died, renders, result, seconds, alarms, leftovers)


def report_json(report: ChaosReport) -> str:
    return json.dumps(report.row())


def layout_of(base: Path) -> SpoolLayout:
    return SpoolLayout(base / "spool")
