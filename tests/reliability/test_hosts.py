"""Several "hosts" on one spool, simulated on one machine (no kernel NFS here):

- each runner in its own UTS and PID namespace (`unshare -u -p -f --mount-proc`): its own
  hostname, pids no other runner can see, flocks that prove nothing across "hosts";
- one runner watching the spool through a bindfs view, where inotify misses the other
  hosts' writes (as NFS clients miss each other's), so it must poll;
- one runner with its wall clock skewed by an hour (faketime).

What real NFS adds (attribute caching, a server clock) is not simulated; see
docs/reliability.md.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from invariants import audit

from spoolrender.spool.heartbeat import Heartbeat, read_heartbeat
from spoolrender.spool.layout import SpoolLayout, init_spool
from spoolrender.spool.publish import scratch_dir

RENDER_PROPS = Path(__file__).resolve().parent.parent / "programs" / "render_props.py"
LEASE = 3.0
LIBFAKETIME = "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1"  # Debian amd64


def _can_simulate() -> str | None:
    if os.geteuid() != 0:
        return "needs root for unshare and FUSE mounts"
    for tool in ("unshare", "bindfs", "fusermount"):
        if shutil.which(tool) is None:
            return f"{tool} not installed (scripts/setup.sh --test installs it)"
    if not Path(LIBFAKETIME).exists():
        return "libfaketime not installed (scripts/setup.sh --test installs it)"
    if subprocess.run(["unshare", "-u", "-p", "-f", "--mount-proc", "true"], check=False).returncode != 0:
        return "unshare of UTS/PID namespaces not permitted here"
    return None


pytestmark = pytest.mark.skipif(_can_simulate() is not None, reason=str(_can_simulate()))


class Host:
    """A runner in its own hostname and pid namespace; SIGKILL kills the whole "host"."""

    def __init__(
        self, name: str, spool: Path, log: Path, *, skew: str | None = None, env: dict[str, str] | None = None,
        command: list[str] | None = None,
    ) -> None:  # fmt: skip
        argv = command or [sys.executable, "-m", "spoolrender.cli", "run", "-v", "--spool", str(spool)]
        if env:
            argv = ["env", *(f"{k}={v}" for k, v in env.items()), *argv]
        if skew:
            # libfaketime preloaded directly: the `faketime` wrapper's named semaphore is
            # keyed by pid and collides between pid namespaces (every runner is pid 1).
            argv = ["env", f"LD_PRELOAD={LIBFAKETIME}", f"FAKETIME={skew}", *argv]
        self.name = name
        with open(log, "ab") as out:
            self.proc = subprocess.Popen(
                ["unshare", "-u", "-p", "-f", "--mount-proc", "--kill-child=SIGKILL", "sh", "-c",
                 f'hostname {name} && exec "$@"', "sh", *argv],
                stdout=out, stderr=subprocess.STDOUT,
            )  # fmt: skip

    def kill(self) -> None:
        """Power cut: the namespace's init dies, and the kernel kills everything in it."""
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()  # --kill-child: the runner (its ns init) and its renders go too
            self.proc.wait()


def wait_until(predicate: object, timeout: float) -> float:
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if predicate():  # type: ignore[operator]
            return time.monotonic() - start
        time.sleep(0.05)
    raise AssertionError(f"not within {timeout} s")


@pytest.fixture
def shared(tmp_path: Path) -> Iterator[tuple[SpoolLayout, Path]]:
    layout = init_spool(tmp_path / "disk" / "spool")
    marker = tmp_path / "disk" / "renders.txt"
    quick = ["sh", "-c", 'echo "$2 $(hostname)" >> "$3" && echo "$2" > "$1"', "sh", "{output}", "{job_id}", str(marker)]
    config = {
        "settle_seconds": 0.3, "heartbeat_seconds": 0.3, "lease_seconds": LEASE, "rescan_seconds": 0.5,
        "poll_seconds": 0.3, "backoff_base_seconds": 0.05, "backoff_cap_seconds": 0.1, "slots": 2,
        "commands": {"quick": quick, "props": [sys.executable, str(RENDER_PROPS), "{output}", "{props_file}"]},
    }  # fmt: skip
    (layout.root / "spoolrender.yaml").write_text(yaml.safe_dump(config))
    view = tmp_path / "view"
    view.mkdir()
    subprocess.run(["bindfs", "--no-allow-other", str(tmp_path / "disk"), str(view)], check=True)
    yield layout, view / "spool"
    subprocess.run(["fusermount", "-u", str(view)], check=False)


def drop(layout: SpoolLayout, name: str, job: dict[str, object]) -> None:
    tmp = layout.incoming / f".{name}.part"
    tmp.write_text(yaml.safe_dump(job))
    os.rename(tmp, layout.incoming / name)


def test_three_hosts_exactly_once_recovery_skew_and_polling(shared: tuple[SpoolLayout, Path], tmp_path: Path) -> None:
    layout, view_spool = shared
    log = tmp_path / "hosts.log"
    hosts: list[Host] = []
    try:
        # 1. A drop "on another host": only host-b runs, watching through the bindfs view,
        #    where inotify sees nothing of writes made to the disk directly.
        b = Host("host-b", view_spool, log)
        hosts.append(b)
        wait_until(lambda: os.listdir(layout.runners), timeout=60)  # up (its beacon written)
        drop(layout, "first.yaml", {"renderer": "command", "command": "quick"})
        picked_up = wait_until(lambda: os.listdir(layout.done), timeout=60)
        assert "watch=polling" in log.read_text()  # chose polling by itself on FUSE

        # 2. Three hosts, one with a clock an hour fast, race for 300 jobs.
        hosts.append(Host("host-a", layout.root, log))
        hosts.append(Host("host-c", layout.root, log, skew="+3600s"))
        # Every host up (its beacon written) before the jobs arrive, or the first ones
        # could take them all.
        wait_until(lambda: len(os.listdir(layout.runners)) >= 3, timeout=60)
        jobs = 300
        for i in range(jobs):
            drop(layout, f"j{i:04d}.yaml", {"renderer": "command", "command": "quick"})
        wait_until(lambda: len(os.listdir(layout.done)) == jobs + 1, timeout=240)

        # 3. Kill the host rendering a long job; another host takes it over within the lease.
        drop(layout, "long.yaml", {"renderer": "command", "command": "props", "props": {"sleep": 60}})

        def rendering() -> tuple[str, Heartbeat] | None:
            for name in os.listdir(layout.running):
                hb = read_heartbeat(layout.running / name)
                if hb is not None and hb.pgid is not None:
                    return name, hb
            return None

        wait_until(lambda: rendering() is not None, timeout=60)
        found = rendering()
        assert found is not None
        entry, hb = found
        owner = next(h for h in hosts if h.name == hb.host)
        owner.kill()
        # Recovered: out of running/, and its scratch dir removed (the hosts are killed next).
        scratch = scratch_dir(layout.root / "output", entry)
        recovered_after = wait_until(
            lambda: entry not in os.listdir(layout.running) and not scratch.exists(), timeout=LEASE * 10
        )
    finally:
        for h in hosts:
            h.stop()
    renders = (layout.root.parent / "renders.txt").read_text().split("\n")
    per_job: dict[str, int] = {}
    by_host: dict[str, int] = {}
    for line in filter(None, renders):
        job_id, host = line.split()
        per_job[job_id] = per_job.get(job_id, 0) + 1
        by_host[host] = by_host.get(host, 0) + 1
    assert len(per_job) == jobs + 1 and set(per_job.values()) == {1}  # exactly once, counted
    assert set(by_host) == {"host-a", "host-b", "host-c"}, by_host  # every host worked
    # Promptly, however loaded the machine (idle: about 1 s).
    assert picked_up < 30, picked_up
    # Recovery came from the lease, not from a clock: within lease + a rescan or two (idle:
    # about LEASE + 1 s; a loaded machine delays the recoverer's rescans by seconds).
    # "Unchanged for a lease" counts from the first sighting of the last heartbeat, up to
    # a beat and a rescan before the kill.
    assert LEASE - 1.0 <= recovered_after <= LEASE * 3, recovered_after
    runs = []
    for state in ("retry", "running", "done"):
        for name in os.listdir(layout.state_dir(state)):
            for run_file in sorted((layout.state_dir(state) / name).glob("run-*.json")):
                runs.append(json.loads(run_file.read_text()))
    died = [r for r in runs if (r.get("error") or {}).get("kind") == "runner-died"]
    # The skewed host never judged a live job dead; only the killed host's job was taken.
    assert len(died) == 1 and died[0]["host"] != owner.name and "heartbeat unchanged" in died[0]["error"]["message"]
    ids = {f"j{i:04d}" for i in range(jobs)} | {"first", "long"}
    result = audit(layout, ids, check_processes=False)
    assert not result.lost and not result.duplicated and not result.partial_files, result.problems()
