#!/usr/bin/env python3
"""What a lost client host's locks do to the others, on the GlusterFS lab (measurements for
docs/reliability.md, "A frozen host's locks"; not a test: a freeze that meets a heal can
block the other clients for as long as it lasts, which the suite cannot judge in bounded time).

    .venv/bin/python tests/reliability/gluster_lock_probe.py locks freeze|cut [KEY=VALUE ...]
    .venv/bin/python tests/reliability/gluster_lock_probe.py heal [KEY=VALUE ...]

- ``locks``: a client host takes an flock and an fcntl lock through its mount and keeps
  renaming files beside them; it is frozen (SIGSTOP of every process, its FUSE client too) or
  its link is cut; another client polls both locks and times creates and renames in the
  holder's directory;
- ``heal``: brick 3 killed while a client host renames files in a directory with 8 threads,
  the host frozen, the brick restarted and a heal launched; another client times a create
  and a rename in that directory, one elsewhere, and a rename of the directory.

KEY=VALUE: volume options added to the supported ones. One JSON line per run (seconds, or
">LIMIT" when still blocked, or the errno).
"""

from __future__ import annotations

import fcntl
import json
import os
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gluster_lab import GlusterLab
from netfs_lab import wait_until

from spoolrender.spool.glusterfs import VOLUME_OPTIONS

LIMIT = 90.0  # seconds an operation may stay blocked before it is reported as blocked

HOLDER = """
import fcntl, os, sys, threading
d = sys.argv[1]
for name, lock in (("flock.lock", fcntl.flock), ("posix.lock", fcntl.lockf)):
    fd = os.open(os.path.join(d, name), os.O_RDWR | os.O_CREAT)
    lock(fd, fcntl.LOCK_EX)
def loop(t):
    while True:
        with open(os.path.join(d, f"tmp-{t}"), "w") as f:
            f.write("x")
        os.rename(os.path.join(d, f"tmp-{t}"), os.path.join(d, f"hb-{t}"))
for t in range(8):
    threading.Thread(target=loop, args=(t,), daemon=True).start()
open(os.path.join(d, "started"), "w").write("x")
threading.Event().wait()
"""


def timed(ops: dict[str, Callable[[], object]], started: float) -> dict[str, object]:
    """Run each operation in a thread of its own (it may block); seconds each took."""
    got: dict[str, object] = {}

    def run(label: str, op: Callable[[], object]) -> None:
        begin = time.monotonic()
        try:
            op()
            got[label] = round(time.monotonic() - begin, 2)
        except OSError as exc:
            got[label] = f"errno {exc.errno}"

    threads = [threading.Thread(target=run, args=item, daemon=True) for item in ops.items()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(max(0.1, LIMIT - (time.monotonic() - started)))
    return {label: got.get(label, f">{LIMIT:g}") for label in ops}


def lock_free(path: Path, lock: Callable[[int, int], object]) -> bool:
    fd = os.open(path, os.O_RDWR)
    try:
        lock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def probe(mode: str, fault: str, options: list[tuple[str, str]], work: Path) -> dict[str, object]:
    lab = GlusterLab(work, volume_options=(*VOLUME_OPTIONS, *options))
    try:
        d, other = lab.mountpoint / "d", lab.mountpoint / "other"
        d.mkdir()
        other.mkdir()
        script = work / "holder.py"
        script.write_text(HOLDER)
        host = lab.host("holder", [sys.executable, str(script), str(d)], work / "holder.log")
        wait_until(lambda: (d / "started").exists(), 120, "holder started")
        (d / "mine").write_text("x")
        result: dict[str, object] = {"mode": mode, "fault": fault, "options": options}
        if mode == "heal":
            lab.kill_brick(3)
            time.sleep(3)  # renames on two bricks only: the directory needs a heal
        host.freeze() if fault == "freeze" else host.partition(False)
        started = time.monotonic()
        if mode == "heal":
            lab.restart_bricks()
            wait_until(lambda: _heal_launched(lab), 60, "heal launched")
            result["ops"] = timed(
                {
                    "create elsewhere": lambda: (other / "x").write_text("x"),
                    "create in its dir": lambda: (d / "new").write_text("x"),
                    "rename in its dir": lambda: os.rename(d / "mine", d / "mine.moved"),
                },
                started,
            )
        else:
            released: dict[str, float] = {}
            result["ops"] = timed(
                {
                    "create in its dir": lambda: (d / "new").write_text("x"),
                    "rename onto its name": lambda: os.rename(d / "mine", d / "hb-0"),
                },
                started,
            )
            while time.monotonic() - started < LIMIT and len(released) < 2:
                for name, lock in (("flock", fcntl.flock), ("posix", fcntl.lockf)):
                    if name not in released and lock_free(d / f"{name}.lock", lock):
                        released[name] = round(time.monotonic() - started, 2)
                time.sleep(0.05)
            result["lock free after"] = {n: released.get(n, f">{LIMIT:g}") for n in ("flock", "posix")}
        result["rename its dir"] = timed({"": lambda: os.rename(d, lab.mountpoint / "moved")}, time.monotonic())[""]
        host.thaw() if fault == "freeze" else host.partition(True)
        return result
    finally:
        lab.close()


def _heal_launched(lab: GlusterLab) -> bool:
    try:
        lab.gluster("volume", "heal", lab.volume)
    except RuntimeError:
        return False  # the self-heal daemons not connected yet, right after the restart
    return True


def main() -> None:
    mode = sys.argv[1]
    fault = sys.argv[2] if mode == "locks" else "freeze"
    rest = sys.argv[3:] if mode == "locks" else sys.argv[2:]
    options = [(k, v) for k, v in (arg.split("=", 1) for arg in rest)]
    with tempfile.TemporaryDirectory(prefix="gluster-lock-probe-") as tmp:
        print(json.dumps(probe(mode, fault, options, Path(tmp))), flush=True)


if __name__ == "__main__":
    main()
