"""Chaos among several hosts: blocking a bad host never stops the farm (issue 21 item 4).

Five "hosts" (test_hosts.Host: own hostname and pid namespace each) share a spool: three
runners, one cron-style host (`run --drain` again and again) and one bad host whose
renders all fail (a missing font, say). At random moments the test SIGKILLs render
children (an operator's kill, the OOM killer), whole hosts (a power cut; restarted) and
freezes a runner past the lease (a VM pause). Every half second it reads which blocks
are applied, as any host would. It asserts that the farm claims throughout (no gap in
render starts, never every online host blocked), that only the bad host was ever
blocked (the others did nothing wrong: 0 blocked seconds), that nothing was lost or
published twice, and prints a summary.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import random
import signal
import sys
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path

import pytest
import yaml
from invariants import audit
from test_hosts import Host, _can_simulate

from spoolrender.config.spool_config import load_config
from spoolrender.hosts.blocks import block_states
from spoolrender.hosts.health import online_hosts
from spoolrender.spool.layout import SpoolLayout, init_spool

pytestmark = pytest.mark.skipif(_can_simulate() is not None, reason=str(_can_simulate()))

JOBS = 240
LEASE = 4.0
GOOD = ("host-a", "host-b", "host-c")
DRAIN = "host-d"  # cron-style
BAD = "host-bad"
# argv: OUTPUT JOB ATTEMPT MARKER. The marker line is the claim's render start (real time).
RENDER = (
    'echo "$(date +%s.%N) $(hostname) $2 $3" >> "$4"; '
    f'if [ "$(hostname)" = {BAD} ]; then echo "font missing on $(hostname)"; exit 75; fi; '
    'sleep "0.$(( $(od -An -N1 -tu1 /dev/urandom) % 6 + 1 ))"; echo "$2" > "$1"'
)
RENDER_TAG = "farm-chaos-render"  # argv[0] of every render's shell: how the test finds them


def render_children() -> list[int]:
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if len(argv) > 3 and argv[3] == RENDER_TAG.encode():
                pids.append(int(entry))
    return pids


def runner_pid(host: Host) -> int | None:
    """The runner (pid 1 of the host's namespace), seen from here: unshare's child."""
    try:
        children = Path(f"/proc/{host.proc.pid}/task/{host.proc.pid}/children").read_text().split()
    except OSError:
        return None
    return int(children[0]) if children else None


def thaw(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):  # its host was killed meanwhile
        os.kill(pid, signal.SIGCONT)


class Watch(threading.Thread):
    """Every half second: which blocks are applied, over which online hosts."""

    def __init__(self, layout: SpoolLayout) -> None:
        super().__init__(daemon=True)
        self.layout = layout
        self.config = load_config(layout.root, environ={})
        self.blocked_seconds: defaultdict[str, float] = defaultdict(float)
        self.all_blocked: list[str] = []  # moments when every online host was blocked
        self.held_back: Counter[str] = Counter()  # causes seen of blocks held back
        self.stop = threading.Event()

    def run(self) -> None:
        last = time.monotonic()
        while not self.stop.wait(0.5):
            now = time.monotonic()
            fs_now = time.time()  # a local spool: the spool's clock is this host's
            try:
                states = block_states(self.layout, self.config, fs_now)
                online = set(online_hosts(self.layout, fs_now, self.config.lease_seconds, with_blocked=True))
            except OSError:
                continue
            applied = {b.host for b in states if b.applied}
            for host in applied:
                self.blocked_seconds[host] += now - last
            self.held_back.update(b.cause for b in states if not b.applied)
            if online and online <= applied:
                self.all_blocked.append(f"{sorted(online)} at {fs_now:.1f}")
            last = now


def test_a_bad_host_is_blocked_but_kills_and_freezes_never_block_the_farm(tmp_path: Path) -> None:
    rng = random.Random(20261201)
    layout = init_spool(tmp_path / "spool")
    marker = tmp_path / "starts.txt"
    config = {
        "settle_seconds": 0.2, "heartbeat_seconds": 0.4, "lease_seconds": LEASE, "rescan_seconds": 0.5,
        "poll_seconds": 0.3, "backoff_base_seconds": 0.2, "backoff_cap_seconds": 0.5, "slots": 2,
        "max_attempts": 50, "retry_elsewhere_seconds": 3, "grace_seconds": 1,
        # Low on purpose: on 8329ac5 every host here was blocked by the kills within seconds.
        "host_block_jobs": 3, "host_block_window_seconds": 600, "host_block_seconds": 600,
        "host_probe_seconds": 5,
        "commands": {"farm": ["sh", "-c", RENDER, RENDER_TAG, "{output}", "{job_id}", "{attempt}", str(marker)]},
    }  # fmt: skip
    (layout.root / "spoolrender.yaml").write_text(yaml.safe_dump(config))
    for i in range(JOBS):
        (layout.incoming / f".j{i:04d}.part").write_text(yaml.safe_dump({"renderer": "command", "command": "farm"}))
        os.rename(layout.incoming / f".j{i:04d}.part", layout.incoming / f"j{i:04d}.yaml")
    log = tmp_path / "hosts.log"
    drain = [
        "sh", "-c", f'while :; do "{sys.executable}" -m spoolrender.cli run --drain -v --spool "$0"; sleep 1; done',
        str(layout.root),
    ]  # fmt: skip
    hosts = {name: Host(name, layout.root, log) for name in (*GOOD, BAD)}
    hosts[DRAIN] = Host(DRAIN, layout.root, log, command=drain)
    watch = Watch(layout)
    watch.start()
    started = time.monotonic()
    kills: Counter[str] = Counter()
    try:
        while any(os.listdir(layout.state_dir(s)) for s in ("incoming", "running", "retry")):
            assert time.monotonic() - started < 240, "the farm did not finish in 240 s"
            time.sleep(rng.uniform(0.3, 1.0))
            action = rng.random()
            if action < 0.6:
                victims = render_children()
                if victims:
                    with contextlib.suppress(ProcessLookupError):  # it may have just ended
                        os.kill(rng.choice(victims), signal.SIGKILL)
                    kills["render child"] += 1
            elif action < 0.8 and kills["host"] < 4:
                name = rng.choice(GOOD)
                hosts[name].kill()  # power cut: every process of the host
                hosts[name] = Host(name, layout.root, log)
                kills["host"] += 1
            elif kills["freeze"] < 2:
                name = rng.choice(GOOD)
                pid = runner_pid(hosts[name])
                if pid is not None:
                    os.kill(pid, signal.SIGSTOP)
                    threading.Timer(1.5 * LEASE, thaw, (pid,)).start()
                    kills["freeze"] += 1
    finally:
        watch.stop.set()
        watch.join()
        for host in hosts.values():
            host.stop()
    seconds = time.monotonic() - started
    # A render killed in its `$(date ...)` (the subshell carries the render's argv, so the
    # kills pick it too) writes its line without the time: it never started, and is no start.
    lines = [line.split() for line in marker.read_text().splitlines()]
    starts = sorted((float(fields[0]), fields[1]) for fields in lines if len(fields) == 4)
    gaps = [b[0] - a[0] for a, b in itertools.pairwise(starts)]
    by_host = Counter(host for _, host in starts)
    summary = {
        "jobs": JOBS, "seconds": round(seconds, 1), "renders": len(starts),
        "renders by host": dict(sorted(by_host.items())), "kills": dict(kills),
        "longest gap between claims (s)": round(max(gaps), 1),
        "blocked-host seconds": {h: round(watch.blocked_seconds[h], 1) for h in (*GOOD, DRAIN, BAD)},
        "blocks held back (samples by cause)": dict(watch.held_back),
        "all online hosts blocked": len(watch.all_blocked),
    }  # fmt: skip
    print(f"\nfarm chaos: {summary}")
    result = audit(layout, {f"j{i:04d}" for i in range(JOBS)}, max_attempts=50)
    assert result.ok, result.problems()
    assert result.states["done"] == JOBS
    assert watch.all_blocked == []
    # Hosts that did nothing wrong were never blocked; the bad one was.
    assert all(watch.blocked_seconds[h] == 0 for h in (*GOOD, DRAIN)), summary
    assert watch.blocked_seconds[BAD] > 0, summary
    assert max(gaps) < 3 * LEASE, summary  # claims never stopped (a killed host's jobs wait a lease)
    assert kills["render child"] >= 5 and kills["host"] >= 1, summary
