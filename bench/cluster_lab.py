#!/usr/bin/env python3
"""Issue 26 item 6: the spool protocol on 1, 2 and 4 client hosts, on a replicated GlusterFS
volume, on sshfs and on a local disk, side by side in one run.

The hosts are the test labs' (tests/reliability/gluster_lab.py, netfs_lab.py: each client
host its own network, UTS, PID and mount namespaces, one `spoolrender run` each, mounting
the spool with spoolrender's options); on the local disk a "host" is one runner process.
Every job is a no-op command (`date > {output}`: the output holds the render's start time;
every namespace shares this machine's clock). Every runner polls (`watch: polling`,
`poll_seconds` below) on all three, as it must on a network filesystem (inotify sees no
other host's change), so the filesystems differ by their own cost only.

For each filesystem, hosts added 1 -> 2 -> 4 on one fresh spool:

- throughput: --jobs jobs renamed into incoming/ at once, jobs/s until all are in done/;
  per job: wall seconds x hosts (host-seconds), CPU seconds of the runners (their renders
  included) and of the filesystem's own processes (FUSE clients, bricks and glusterds, or
  sshfs, ssh, sshd and sftp-server; none on a local disk), and on GlusterFS the file
  operations each brick served (`gluster volume profile ... info incremental`);
- claim latency: --drops jobs dropped one at a time (each waited for until done), drop
  (the rename into incoming/) to the render's start, p50/p99;
- listing size: with the most hosts, --waiting jobs held in incoming/ (`not_before` a year
  ahead: listed and looked at on every pass, never claimed), the claim latency again, and
  the throughput with the largest backlog held.

On 2 cores every host shares the same CPUs: absolute throughput cannot grow with hosts;
the per-job costs say what each host adds. Needs root, network namespaces, FUSE,
glusterfs-server, sshfs and sshd (scripts/setup.sh --test); a filesystem whose lab cannot
run here is skipped, saying why.

    .venv/bin/python bench/cluster_lab.py                 # 200-job batches: long at any load
    .venv/bin/python bench/cluster_lab.py --quick         # 1-2 hosts, 10 jobs a batch: 226 s at load 17-26
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "reliability"))

import gluster_lab  # noqa: E402
import netfs_lab  # noqa: E402
from gluster_lab import GlusterLab  # noqa: E402
from netfs_lab import NetfsLab, namespace_pids, runner_argv, wait_until  # noqa: E402

from spoolrender.spool.layout import SpoolLayout, init_spool  # noqa: E402

POLL_S = 0.2  # every runner's poll_seconds, on every filesystem
WAIT_S = 300.0  # generous deadlines: conditions, never timers (the machine is shared)
TICK = os.sysconf("SC_CLK_TCK")
FS_DEFAULT = "gluster,sshfs,local"
HELD = "2099-01-01T00:00:00Z"  # a not_before no run of this bench reaches
# One row of `gluster volume profile V info incremental`'s table:
# %-latency  Avg-latency  Min-Latency  Max-Latency  No. of calls  Fop
# (latencies in ns in 10.3, in us in older releases).
_FOP_ROW = re.compile(r"^\s*[\d.]+(?:\s+[\d.]+ [nu]s){3}\s+(\d+)\s+([A-Z_]+)\s*$", re.MULTILINE)


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def cpu_seconds(pids: Sequence[int]) -> float:
    """utime + stime of each process and of its reaped children (a runner's renders)."""
    total = 0
    for pid in pids:
        with contextlib.suppress(OSError, IndexError, ValueError):
            fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
            total += sum(int(v) for v in fields[11:15])  # stat fields 14-17
    return total / TICK


def is_runner(pid: int) -> bool:
    with contextlib.suppress(OSError):
        return b"spoolrender.cli" in Path(f"/proc/{pid}/cmdline").read_bytes()
    return False


@dataclass
class Sample:
    """What one measured stretch cost."""

    jobs: int
    wall: float
    runner_cpu: float
    fs_cpu: float | None
    fops: int | None


@dataclass
class Row:
    fs: str
    hosts: int
    waiting: int
    throughput: Sample | None = None
    latencies: list[float] = field(default_factory=list)


class Farm:
    """A filesystem, a spool on it, and hosts running one runner each."""

    label = ""

    def __init__(self, work: Path) -> None:
        self.work = work
        self.layout: SpoolLayout  # as this process sees it (the bench drops and judges here)
        self.host_root: Path  # the spool's path on the hosts
        self.hosts = 0

    def add_host(self) -> None:
        raise NotImplementedError

    def runner_pids(self) -> list[int]:
        raise NotImplementedError

    def fs_pids(self) -> list[int] | None:
        """The filesystem's own processes serving the hosts (None: none of its own)."""
        return None

    def start_fops(self) -> None:
        """Start counting the file operations the storage serves (no-op where it cannot)."""

    def fops(self) -> int | None:
        """File operations served since the last call (None: not counted here)."""
        return None

    def close(self) -> None:
        raise NotImplementedError


class LocalFarm(Farm):
    label = "local disk"

    def __init__(self, work: Path) -> None:
        super().__init__(work)
        self.layout = self.host_layout = init_spool(work / "spool")
        self.host_root = self.layout.root
        self.procs: list[subprocess.Popen[bytes]] = []

    def add_host(self) -> None:
        log = open(self.work / f"runner{len(self.procs) + 1}.log", "ab")  # noqa: SIM115 (kept by the child)
        with log:
            self.procs.append(subprocess.Popen(runner_argv(self.host_root), stdout=log, stderr=subprocess.STDOUT))

    def runner_pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    def close(self) -> None:
        for proc in self.procs:
            proc.kill()
            proc.wait()


class LabFarm(Farm):
    """A farm of a lab's hosts (NetfsLab's or GlusterLab's: one Host class), each in its
    own namespaces, running one runner."""

    lab: NetfsLab | GlusterLab

    def add_host(self) -> None:
        n = len(self.lab.hosts) + 1
        self.lab.host(f"host{n}", runner_argv(self.host_root), self.work / f"host{n}.log")

    def runner_pids(self) -> list[int]:
        return [pid for host in self.lab.hosts for pid in host.pids() if is_runner(pid)]

    def client_pids(self) -> list[int]:
        """The hosts' processes that are not runners: their filesystem clients."""
        return [pid for host in self.lab.hosts for pid in host.pids() if not is_runner(pid)]

    def close(self) -> None:
        self.lab.close()


class SshfsFarm(LabFarm):
    label = "sshfs"
    lab: NetfsLab

    def __init__(self, work: Path) -> None:
        super().__init__(work)
        share = work / "share"
        share.mkdir()
        self.layout = init_spool(share / "spool")  # the server's disk
        self.lab = NetfsLab(work, share)
        self.host_root = self.lab.mountpoint / "spool"

    def fs_pids(self) -> list[int]:
        assert self.lab.sshd is not None
        server = namespace_pids(netfs_lab._child_of(self.lab.sshd.pid))
        return server + self.client_pids()


class GlusterFarm(LabFarm):
    label = "GlusterFS replica 3"
    lab: GlusterLab

    def __init__(self, work: Path) -> None:
        super().__init__(work)
        (work / "lab").mkdir()
        self.lab = GlusterLab(work / "lab")
        self.layout = init_spool(self.lab.mountpoint / "spool")  # through the observer's mount
        self.host_root = self.layout.root  # each host mounts the volume at the same path
        self.profiling = False

    def fs_pids(self) -> list[int]:
        # Not the observer's FUSE client: that one serves this bench's drops and looks.
        servers = [pid for i in range(1, gluster_lab.SERVERS + 1) for pid in self.lab._in_netns(f"{self.lab.tag}-s{i}")]
        return servers + self.client_pids()

    def start_fops(self) -> None:
        if not self.profiling:
            self.lab.gluster("volume", "profile", self.lab.volume, "start")
            self.profiling = True
        self.fops()

    def fops(self) -> int | None:
        """Calls served per brick since the last call, averaged over the bricks."""
        out = self.lab.gluster("volume", "profile", self.lab.volume, "info", "incremental")
        return round(sum(int(n) for n, _fop in _FOP_ROW.findall(out)) / gluster_lab.SERVERS)


FARMS: dict[str, Callable[[Path], Farm]] = {"gluster": GlusterFarm, "sshfs": SshfsFarm, "local": LocalFarm}


def missing(name: str) -> str | None:
    if name == "gluster":
        return gluster_lab.missing()
    if name == "sshfs":
        return netfs_lab.missing()
    return None


def configure(layout: SpoolLayout) -> None:
    config = {
        # Complete files are renamed in: no settle wait (it would add a constant to every claim).
        "settle_seconds": 0, "watch": "polling", "poll_seconds": POLL_S, "rescan_seconds": 2,
        # Long enough that no live owner looks dead on a loaded machine (no job lasts a second).
        "heartbeat_seconds": 1, "lease_seconds": 30, "slots": 1,
        "commands": {"noop": ["sh", "-c", 'date +%s.%N > "$1"', "sh", "{output}"]},
    }  # fmt: skip
    (layout.root / "spoolrender.yaml").write_text(yaml.safe_dump(config))
    (layout.root / "stage").mkdir()


class Drops:
    """Job files written beside the spool (same filesystem), renamed into incoming/ at once."""

    def __init__(self, layout: SpoolLayout) -> None:
        self.layout = layout
        self.stage = layout.root / "stage"
        self.count = 0  # jobs staged so far (their ids)
        self.finished = 0  # jobs in done/ so far

    def stage_jobs(self, n: int, *, held: bool = False) -> list[str]:
        names = []
        for _ in range(n):
            self.count += 1
            job_id = f"{'held' if held else 'j'}{self.count:06d}"
            job = {"renderer": "command", "command": "noop", "output": f"bench/{job_id}.txt"}
            if held:
                job["not_before"] = HELD
            (self.stage / f"{job_id}.yaml").write_text(yaml.safe_dump(job))
            names.append(job_id)
        return names

    def drop(self, job_ids: Sequence[str]) -> None:
        for job_id in job_ids:
            os.rename(self.stage / f"{job_id}.yaml", self.layout.incoming / f"{job_id}.yaml")

    def output(self, job_id: str) -> Path:
        return self.layout.root / "output" / "bench" / f"{job_id}.txt"

    def done(self, job_id: str) -> bool:
        """Published and out of running/ (done/ names are ``<id>.<token>``: a short listing
        of running/ instead of a growing one of done/)."""
        if not self.output(job_id).exists():
            return False
        return not any(name.startswith(f"{job_id}.") for name in os.listdir(self.layout.running))

    def started(self, job_id: str) -> float:
        return float(self.output(job_id).read_text())


def runners_up(farm: Farm, n: int) -> None:
    """``n`` runners announced (a beacon each) and polling."""

    def up() -> bool:
        return sum(1 for name in os.listdir(farm.layout.runners) if name.endswith(".json")) >= n

    wait_until(up, WAIT_S, f"{n} runners up on {farm.label}")


def throughput(farm: Farm, drops: Drops, jobs: int) -> Sample:
    ids = drops.stage_jobs(jobs)
    runners, fs = farm.runner_pids(), farm.fs_pids()
    cpu0 = cpu_seconds(runners), (cpu_seconds(fs) if fs is not None else 0.0)
    farm.start_fops()
    t0 = time.monotonic()
    drops.drop(ids)
    wait_until(lambda: len(os.listdir(farm.layout.done)) >= drops.finished + jobs, WAIT_S, "batch done")
    wall = time.monotonic() - t0
    fops = farm.fops()
    drops.finished += jobs
    fs_cpu = cpu_seconds(fs) - cpu0[1] if fs is not None else None
    return Sample(jobs, wall, cpu_seconds(runners) - cpu0[0], fs_cpu, fops)


def latencies(drops: Drops, n: int) -> list[float]:
    """Drop to render start of ``n`` jobs, one at a time (a first one unmeasured: warm-up)."""
    out = []
    for i in range(n + 1):
        (job_id,) = drops.stage_jobs(1)
        dropped = time.time()  # the render's start is this machine's wall clock too
        drops.drop([job_id])
        wait_until(lambda job_id=job_id: drops.done(job_id), WAIT_S, f"job {job_id} done")  # type: ignore[misc]
        drops.finished += 1
        if i:
            out.append(drops.started(job_id) - dropped)
    return out


def progress(what: str) -> None:
    print(f"  {time.strftime('%H:%M:%S')} {what} ...", file=sys.stderr, flush=True)


def measure(name: str, work: Path, args: argparse.Namespace) -> Iterator[Row]:
    farm = FARMS[name](work)
    try:
        configure(farm.layout)
        drops = Drops(farm.layout)
        for hosts in args.hosts:
            while farm.hosts < hosts:
                farm.add_host()
                farm.hosts += 1
            runners_up(farm, hosts)
            progress(f"{farm.label}: {hosts} host(s)")
            row = Row(farm.label, hosts, 0, throughput(farm, drops, args.jobs))
            progress("latencies")
            row.latencies = latencies(drops, args.drops)
            yield row
        held = 0
        for waiting in args.waiting:
            drops.drop(drops.stage_jobs(waiting - held, held=True))
            held = waiting
            progress(f"{farm.label}: {args.hosts[-1]} host(s), {waiting} waiting")
            row = Row(farm.label, args.hosts[-1], waiting)
            progress("latencies")
            row.latencies = latencies(drops, args.drops)
            if waiting == args.waiting[-1]:
                row.throughput = throughput(farm, drops, args.jobs)
            yield row
    finally:
        farm.close()


def ms(seconds: float) -> str:
    return f"{seconds * 1000:8.1f}"


def report(rows: list[Row], args: argparse.Namespace) -> None:
    print(f"machine: {os.cpu_count()} cores; load average before: {args.load_before}, after: {load()}")
    print(f"no-op command jobs, one runner per host (slots 1), watch: polling every {POLL_S} s on every filesystem")
    print(f"throughput: {args.jobs} jobs renamed into incoming/ at once; per job: host-s = wall x hosts, CPU ms of")
    print("the runners (renders included) and of the filesystem's processes, file operations per brick (GlusterFS)")
    print(f"latency: {args.drops} drops one at a time, drop (rename into incoming/) to render start, ms")
    print(f"{'filesystem':<20} {'hosts':>5} {'waiting':>7} {'jobs/s':>7} {'host-ms/job':>11} {'runner CPU':>10} "
          f"{'fs CPU':>8} {'fops/job':>8} {'lat p50':>8} {'lat p99':>8}")  # fmt: skip
    for r in rows:
        t = r.throughput
        cols = ["", "", "", "", "", ""]
        if t is not None:
            cols = [f"{t.jobs / t.wall:7.1f}", f"{t.wall * r.hosts / t.jobs * 1000:11.1f}",
                    f"{t.runner_cpu / t.jobs * 1000:10.1f}",
                    f"{t.fs_cpu / t.jobs * 1000:8.1f}" if t.fs_cpu is not None else f"{'-':>8}",
                    f"{t.fops / t.jobs:8.0f}" if t.fops is not None else f"{'-':>8}"]  # fmt: skip
        else:
            cols = [f"{'':7}", f"{'':11}", f"{'':10}", f"{'':8}", f"{'':8}"]
        lat = [ms(statistics.median(r.latencies)), ms(percentile(r.latencies, 0.99))] if r.latencies else ["", ""]
        print(f"{r.fs:<20} {r.hosts:>5} {r.waiting:>7} " + " ".join(cols) + " " + " ".join(lat))
    ratios(rows, args)


def ratios(rows: list[Row], args: argparse.Namespace) -> None:
    by = {(r.fs, r.hosts, r.waiting): r for r in rows}
    gl, labels = GlusterFarm.label, (SshfsFarm.label, LocalFarm.label)
    for hosts in args.hosts:
        g = by.get((gl, hosts, 0))
        for other in labels:
            o = by.get((other, hosts, 0))
            if g is None or o is None or g.throughput is None or o.throughput is None:
                continue
            speed = (o.throughput.jobs / o.throughput.wall) / (g.throughput.jobs / g.throughput.wall)
            lat50 = statistics.median(g.latencies) / statistics.median(o.latencies)
            lat99 = percentile(g.latencies, 0.99) / percentile(o.latencies, 0.99)
            print(f"replication's cost, {hosts} host(s): GlusterFS vs {other}: time per job {speed:.2f}x, "
                  f"claim latency p50 {lat50:.2f}x, p99 {lat99:.2f}x")  # fmt: skip
    for fs in (gl, *labels):
        series = [by[(fs, h, 0)] for h in args.hosts if (fs, h, 0) in by]
        if len(series) > 1 and all(r.throughput for r in series):
            per = [r.throughput.wall * r.hosts / r.throughput.jobs for r in series if r.throughput]
            first = series[0].hosts
            growth = ", ".join(f"{r.hosts} hosts {p / per[0]:.2f}x" for r, p in zip(series[1:], per[1:], strict=True))
            print(f"{fs}: host-seconds per job vs {first} host: {growth}")
        held = [by[(fs, args.hosts[-1], w)] for w in args.waiting if (fs, args.hosts[-1], w) in by]
        base = by.get((fs, args.hosts[-1], 0))
        if base is not None and held:
            steps = [base, *held]
            text = ", ".join(f"{r.waiting} {statistics.median(r.latencies) * 1000:.0f} ms" for r in steps)
            lo, hi = held[0], held[-1]
            factor = statistics.median(hi.latencies) / statistics.median(lo.latencies)
            print(f"{fs}: claim latency p50 by jobs waiting ({args.hosts[-1]} hosts): {text}; "
                  f"{hi.waiting / lo.waiting:.0f}x the listing -> {factor:.2f}x the latency")  # fmt: skip
            if base.throughput and hi.throughput:
                slow = (hi.throughput.wall / hi.throughput.jobs) / (base.throughput.wall / base.throughput.jobs)
                print(f"{fs}: time per job with {hi.waiting} held vs none ({args.hosts[-1]} hosts): {slow:.2f}x")


def load() -> str:
    return " ".join(f"{v:.1f}" for v in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--fs", default=FS_DEFAULT, help="filesystems, in order (gluster,sshfs,local)")
    parser.add_argument("--hosts", default="1,2,4", help="client host counts, rising")
    parser.add_argument("--jobs", type=int, default=200, help="jobs per throughput batch")
    parser.add_argument("--drops", type=int, default=20, help="measured drops per latency figure")
    parser.add_argument("--waiting", default="100,1000", help="jobs held in incoming/, rising")
    parser.add_argument("--quick", action="store_true", help="about a minute on an idle machine: --hosts 1,2 "
                        "--jobs 10 --drops 5 --waiting 100,300")  # fmt: skip
    args = parser.parse_args()
    if args.quick:
        args.hosts, args.jobs, args.drops, args.waiting = "1,2", 10, 5, "100,300"
    args.hosts = [int(h) for h in args.hosts.split(",")]
    args.waiting = [int(w) for w in args.waiting.split(",") if w]
    names = args.fs.split(",")
    if unknown := set(names) - set(FARMS):
        parser.error(f"unknown filesystem(s) {', '.join(sorted(unknown))}; choose from {', '.join(FARMS)}")
    args.load_before = load()
    # SIGTERM (timeout, kill) unwinds like ^C: the labs' close() removes their namespaces,
    # mounts and daemons.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    t0 = time.monotonic()
    rows: list[Row] = []
    base = Path(tempfile.mkdtemp(prefix="spoolrender-cluster-"))
    try:
        for name in names:
            why = missing(name)
            if why is not None:
                print(f"{name}: skipped: {why}")
                continue
            (base / name).mkdir()
            rows.extend(measure(name, base / name, args))
    finally:
        shutil.rmtree(base, ignore_errors=True)
    report(rows, args)
    print(f"took {time.monotonic() - t0:.0f} s")
    fs = "" if args.fs == FS_DEFAULT else f" --fs {args.fs}"
    command = f"--quick{fs}" if args.quick else (
        f"--fs {args.fs} --hosts {','.join(map(str, args.hosts))} --jobs {args.jobs} --drops {args.drops} "
        f"--waiting {','.join(map(str, args.waiting))}")  # fmt: skip
    print(f"reproduce: .venv/bin/python bench/cluster_lab.py {command}")


if __name__ == "__main__":
    main()
