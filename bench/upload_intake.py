#!/usr/bin/env python3
"""Upload intake (issue 11): rate-limited uploads by real clients, early claims and latency.

A real OpenSSH sshd on a free loopback port (throwaway keys), a real runner (inotify), and
N uploads, a batch at a time in parallel, cycling through: scp -l, sftp -l batch put,
rsync --inplace --bwlimit, rsync (default: temp name + rename), a Python writer pausing
longer than the settle time, the shell's `>` then `>>`, cp, and mv across filesystems.
Rate limits and sizes make each client go quiet for longer than the runner's settle time
(the gaps are measured and reported), so an intake that trusted quiet alone would claim
them half-written. Then the contrib drop script over ssh, the recommended way for NFS.

Per upload, the benchmark's own inotify watch on incoming/ stamps (one monotonic clock):
- completion: the name's last IN_CLOSE_WRITE, or its IN_MOVED_TO (rsync's rename) or, for
  the drop script, its IN_CREATE (link) if no close follows;
- claim: the name's IN_MOVED_FROM (the runner's claim rename).
Early claim: claimed before completion, claimed more than once (a discarded run), or the
job's command (which writes the byte count and SHA-256 of the job file it rendered from)
saw anything but the uploaded bytes. Goal: 0 early claims; close-to-claim p99 <= 1 s.

Optionally (--gaps) the quiet gaps of slow clients with a 900 KiB job file, the data
behind the default settle time (docs/reliability.md, "Uploads").

Reproduce: .venv/bin/python bench/upload_intake.py --uploads 56 --parallel 8 --drops 50 --gaps
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from claim_latency import Inotify
from goals import goal

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from support.uploads_harness import SshServer, digest, job_file, job_hash_command, sshd_missing  # noqa: E402

CMD = [sys.executable, "-m", "spoolrender.cli"]
DROP = ROOT / "contrib" / "drop" / "spoolrender-drop"
IN_MODIFY, IN_CLOSE_WRITE, IN_MOVED_FROM, IN_MOVED_TO, IN_CREATE = 0x2, 0x8, 0x40, 0x80, 0x100


@dataclass
class Seen:
    """inotify's view of one name in incoming/."""

    writes: list[float] = field(default_factory=list)  # create/modify times
    completed: float | None = None
    claimed: list[float] = field(default_factory=list)

    def max_gap(self) -> float:
        return max((b - a for a, b in zip(self.writes, self.writes[1:], strict=False)), default=0.0)


class Watch:
    """Records every event for names in one directory, in a thread."""

    def __init__(self, directory: Path) -> None:
        self._ino = Inotify()
        self._ino.watch(directory, IN_MODIFY | IN_CLOSE_WRITE | IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE)
        self.seen: dict[str, Seen] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            for _wd, mask, name, now in self._ino.read(0.1):
                s = self.seen.setdefault(name, Seen())
                if mask & (IN_MODIFY | IN_CREATE):
                    s.writes.append(now)
                if mask & IN_CREATE and s.completed is None:
                    s.completed = now  # a hard link arrives whole (drop script); a close may follow
                if mask & (IN_CLOSE_WRITE | IN_MOVED_TO):
                    s.completed = now
                if mask & IN_MOVED_FROM:
                    s.claimed.append(now)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self._ino.close()


def pct(values: list[float], p: int) -> float:
    if len(values) < 2:
        return values[0] if values else float("nan")
    return statistics.quantiles(values, n=100, method="inclusive")[p - 1]


Client = Callable[[Path, Path], list[str]]


def clients(sshd: SshServer, settle: float, other_fs: Path | None) -> list[tuple[str, int, Client]]:
    """(kind, size, argv maker): each one quiet for longer than ``settle`` mid-upload."""
    pause = f"{2 * settle:g}"
    writer = (
        "import sys, time\ndata = open(sys.argv[1], 'rb').read()\n"
        "with open(sys.argv[2], 'wb') as fh:\n"
        "    fh.write(data[: len(data) // 2]); fh.flush(); time.sleep(float(sys.argv[3]))\n"
        "    fh.write(data[len(data) // 2 :])\n"
    )
    # The shell's own `>` then `>>`; the pause is shorter than the settle time (longer
    # ones are not protected: docs/reliability.md).
    append = f'printf %s "$1" > "$3"; sleep {settle / 2:g}; printf %s "$2" >> "$3"'

    def shell(s: Path, d: Path) -> list[str]:
        data = s.read_bytes().decode()
        return ["sh", "-c", append, "sh", data[:10_000], data[10_000:], str(d)]

    def mv_across(s: Path, d: Path) -> list[str]:
        assert other_fs is not None
        moved = other_fs / s.name
        shutil.copyfile(s, moved)
        return ["mv", str(moved), str(d)]

    made: list[tuple[str, int, Client]] = [
        ("scp -l 800", 400_000, lambda s, d: sshd.scp(s, d, 800)),
        ("sftp -l 800", 400_000, lambda s, d: sshd.sftp_put(s, d, 800)),
        ("rsync --inplace --bwlimit=20", 40_000, lambda s, d: sshd.rsync(s, d, "--inplace", "--bwlimit=20")),
        ("rsync --bwlimit=100", 60_000, lambda s, d: sshd.rsync(s, d, "--bwlimit=100")),
        (f"python, pause {pause} s", 20_000, lambda s, d: [sys.executable, "-c", writer, str(s), str(d), pause]),
        ("sh > then >>", 20_000, shell),
        ("cp", 100_000, lambda s, d: ["cp", str(s), str(d)]),
    ]
    if other_fs is not None:
        made.append(("mv across filesystems", 100_000, mv_across))
    return made


@dataclass
class Result:
    kind: str
    name: str
    data: bytes
    exited: float = 0.0
    returncode: int = 0


def run_runner(spool: Path, settle: float, slots: int) -> subprocess.Popen[bytes]:
    subprocess.run([*CMD, "init", str(spool)], check=True, capture_output=True)
    # As many slots as uploads at once: a claim never waits for a free slot (that would
    # measure the render queue, not the intake).
    config = {"settle_seconds": settle, "slots": slots, "watch": "inotify", "commands": {"jobhash": job_hash_command()}}
    (spool / "spoolrender.yaml").write_text(yaml.safe_dump(config))
    proc = subprocess.Popen([*CMD, "run", "--spool", str(spool)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while not any((spool / ".spoolrender" / "runners").glob("*.json")):
        if time.monotonic() > deadline or proc.poll() is not None:
            raise SystemExit("the runner did not start")
        time.sleep(0.05)
    return proc


def wait_done(spool: Path, n: int, timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while len(os.listdir(spool / "done")) + len(os.listdir(spool / "failed")) < n:
        if time.monotonic() > deadline:
            raise SystemExit("jobs did not finish")
        time.sleep(0.1)
    while os.listdir(spool / "running"):
        time.sleep(0.1)


def judge(spool: Path, watch: Watch, results: list[Result]) -> tuple[list[str], dict[str, float], dict[str, float]]:
    """Problems (early claims), close-to-claim latency and longest quiet gap by upload name."""
    problems: list[str] = []
    latencies: dict[str, float] = {}
    gaps: dict[str, float] = {}
    done = {e.split(".")[0]: spool / "done" / e for e in os.listdir(spool / "done")}
    for r in results:
        seen = watch.seen.get(f"{r.name}.yaml", Seen())
        gaps[r.name] = seen.max_gap()
        out = spool / "output" / "uploads" / f"{r.name}.txt"
        job_dir = done.get(r.name)
        runs = len(list(job_dir.glob("run-*.json"))) if job_dir else 0
        rendered = out.read_text() if out.exists() else "nothing"
        if r.returncode != 0:
            problems.append(f"{r.kind} {r.name}: client exit {r.returncode}")
        if rendered != digest(r.data) or runs != 1 or len(seen.claimed) != 1:
            problems.append(f"{r.kind} {r.name}: rendered {rendered}, {runs} run(s), {len(seen.claimed)} claim(s)")
            continue
        if seen.completed is None or seen.claimed[0] < seen.completed:
            problems.append(f"{r.kind} {r.name}: claimed before the upload completed")
            continue
        latencies[r.name] = seen.claimed[0] - seen.completed
    return problems, latencies, gaps


def uploads(sshd: SshServer, base: Path, n: int, parallel: int, settle: float) -> bool:
    spool = base / "uploads-spool"
    runner = run_runner(spool, settle, parallel)
    watch = Watch(spool / "incoming")
    shm = Path("/dev/shm")
    # mv across filesystems: the sources live on tmpfs, in a temp dir removed at the end.
    other_dir = tempfile.TemporaryDirectory(dir=shm, prefix="spoolrender-bench-") if shm.is_dir() else None
    other = Path(other_dir.name) if other_dir is not None else None
    if other is not None and os.stat(other).st_dev == os.stat(spool).st_dev:
        other = None
    kinds = clients(sshd, settle, other)
    src = base / "src"
    src.mkdir()
    results: list[Result] = []
    try:
        for start in range(0, n, parallel):
            batch = []
            for i in range(start, min(n, start + parallel)):
                kind, size, make = kinds[i % len(kinds)]
                name = f"u{i:03d}"
                data = job_file(name, size)
                (src / f"{name}.yaml").write_bytes(data)
                batch.append(
                    (Result(kind, name, data), make(src / f"{name}.yaml", spool / "incoming" / f"{name}.yaml"))
                )

            def one(result: Result, argv: list[str]) -> None:
                proc = subprocess.run(argv, capture_output=True, stdin=subprocess.DEVNULL, timeout=600)
                result.exited, result.returncode = time.monotonic(), proc.returncode

            threads = [threading.Thread(target=one, args=b) for b in batch]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            results += [r for r, _ in batch]
        wait_done(spool, n)
    finally:
        runner.terminate()
        runner.wait(timeout=60)
        watch.stop()
        if other_dir is not None:
            other_dir.cleanup()
    problems, latencies, gaps = judge(spool, watch, results)
    print(f"uploads: {n} over real clients, {parallel} at once; runner: inotify, {parallel} slots, settle {settle:g} s")
    print(f"{'client':<32}{'n':>4}{'max quiet gap':>15}{'gaps > settle':>15}{'claim p50':>11}{'p99':>9}")
    for kind, _size, _make in kinds:
        mine = [r.name for r in results if r.kind == kind]
        lat = [latencies[m] for m in mine if m in latencies]
        over = sum(1 for m in mine if gaps[m] > settle)
        print(f"{kind:<32}{len(mine):>4}{max(gaps[m] for m in mine):>14.2f}s{over:>15}"
              f"{pct(lat, 50) * 1000:>9.0f}ms{pct(lat, 99) * 1000:>7.0f}ms")  # fmt: skip
    for p in problems:
        print(f"  EARLY: {p}")
    all_lat = list(latencies.values())
    p99 = pct(all_lat, 99)
    print(f"all: close-to-claim p50 {pct(all_lat, 50) * 1000:.0f} ms, p99 {p99 * 1000:.0f} ms (n={len(all_lat)})")
    print(f"uploads quiet for longer than the settle time: {sum(1 for g in gaps.values() if g > settle)} of {n}")
    print(goal("early claims = 0", f"{len(problems)} of {n} uploads", not problems))
    print(goal("upload close-to-claim p99 <= 1 s (inotify)", f"{p99 * 1000:.0f} ms", p99 <= 1.0))
    return not problems and p99 <= 1.0


def drops(sshd: SshServer, base: Path, n: int, settle: float) -> None:
    spool = base / "drop-spool"
    runner = run_runner(spool, settle, 2)
    watch = Watch(spool / "incoming")
    env = {**os.environ, "SPOOLRENDER_DROP_SSH": " ".join(["ssh", *sshd.options(), "-p", str(sshd.port)])}
    results = []
    try:
        for i in range(n):
            name = f"d{i:03d}"
            data = job_file(name, 4_000)
            src = base / f"{name}.yaml"
            src.write_bytes(data)
            proc = subprocess.run(["sh", str(DROP), str(src), f"root@127.0.0.1:{spool}"], env=env, capture_output=True)
            results.append(Result("drop", name, data, time.monotonic(), proc.returncode))
        wait_done(spool, n)
    finally:
        runner.terminate()
        runner.wait(timeout=60)
        watch.stop()
    problems, latencies, _ = judge(spool, watch, results)
    exit_lat = [watch.seen[f"{r.name}.yaml"].claimed[0] - r.exited for r in results if watch.seen.get(f"{r.name}.yaml")]
    print(f"contrib drop script over ssh: {n} drops, one at a time; early claims: {len(problems)}")
    lat = list(latencies.values())
    print(f"  completion (link + close) to claim: p50 {pct(lat, 50) * 1000:.1f} ms, "
          f"p99 {pct(lat, 99) * 1000:.1f} ms; script exit to claim: p50 {pct(exit_lat, 50) * 1000:.1f} ms")  # fmt: skip


def quiet_gaps(sshd: SshServer, base: Path) -> None:
    """The longest quiet gap of slow clients writing a 900 KiB job file (item 3's data)."""
    src = base / "big.yaml"
    src.write_bytes(job_file("big", 900 * 1024))
    target = base / "gaps"
    target.mkdir()
    watch = Watch(target)
    cases: list[tuple[str, list[str]]] = [
        ("scp -l 100", sshd.scp(src, target / "a.yaml", 100)),
        ("scp -l 400", sshd.scp(src, target / "b.yaml", 400)),
        ("scp -l 1000", sshd.scp(src, target / "c.yaml", 1000)),
        ("sftp -l 100 (batch put)", sshd.sftp_put(src, target / "d.yaml", 100)),
        ("rsync --inplace --bwlimit=50", sshd.rsync(src, target / "e.yaml", "--inplace", "--bwlimit=50")),
    ]
    took: dict[str, float] = {}

    def one(label: str, argv: list[str]) -> None:
        t = time.monotonic()
        subprocess.run(argv, capture_output=True, stdin=subprocess.DEVNULL, timeout=900)
        took[label] = time.monotonic() - t

    threads = [threading.Thread(target=one, args=c) for c in cases]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    watch.stop()
    print("quiet gaps of slow clients, 900 KiB job file (the longest time the file did not change):")
    for (label, _), name in zip(cases, "abcde", strict=True):
        seen = watch.seen.get(f"{name}.yaml", Seen())
        print(f"  {label:<32} upload {took[label]:6.1f} s, longest quiet gap {seen.max_gap():5.1f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--uploads", type=int, default=56)
    parser.add_argument("--parallel", type=int, default=8)
    parser.add_argument("--drops", type=int, default=50)
    parser.add_argument("--settle", type=float, default=1.0, help="the runner's settle_seconds (default 1)")
    parser.add_argument("--gaps", action="store_true", help="also measure slow clients' quiet gaps (~75 s)")
    args = parser.parse_args()
    if (missing := sshd_missing()) is not None:
        raise SystemExit(missing)
    print(f"machine: {os.cpu_count()} cores")
    with tempfile.TemporaryDirectory(prefix="spoolrender-uploads-") as tmp:
        base = Path(tmp)
        sshd = SshServer(base / "sshd")
        sshd.start()
        try:
            ok = uploads(sshd, base, args.uploads, args.parallel, args.settle)
            drops(sshd, base, args.drops, args.settle)
            if args.gaps:
                quiet_gaps(sshd, base)
        finally:
            sshd.stop()
    reproduce = [
        "bench/upload_intake.py", "--uploads", str(args.uploads), "--parallel", str(args.parallel),
        "--drops", str(args.drops), "--settle", f"{args.settle:g}", *(["--gaps"] if args.gaps else []),
    ]  # fmt: skip
    print("reproduce: .venv/bin/python " + " ".join(reproduce))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
