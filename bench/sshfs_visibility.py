"""How long until a host sees another host's change through sshfs, per mount option set.

The spool's protocol needs each host to see the others' claims, heartbeats and moves
soon (well within `lease_seconds`). sshfs caches names and attributes for 20 s by
default, the kernel for 1 s: this measures what each option set in tests/reliability/
netfs_lab.py buys. A change is made on the server's disk (as another host's SFTP write
lands there); an observer host in its own network namespace polls through its sshfs mount
and reports when it first sees it:

- new name: a file appears in a directory (a job arriving, a claim made);
- replaced content: a file is replaced by rename with longer content (a heartbeat);
- gone: a directory is renamed away (a job moved to another state), seen in a listing
  and by stat() of its name.

Needs root, `ip netns`, sshd and sshfs (scripts/setup.sh --test). Prints a table and the
command to reproduce:

    .venv/bin/python bench/sshfs_visibility.py --trials 5
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "reliability"))

from netfs_lab import SSHFS_OPTIONS, NetfsLab, missing, wait_until  # noqa: E402

OPTION_SETS = {
    "sshfs defaults": (),
    "dir_cache=no": ("dir_cache=no",),
    "spoolrender's (netfs_lab.SSHFS_OPTIONS)": SSHFS_OPTIONS,
}

# The observer: polls the three things every 10 ms, reports first sightings as JSON lines.
OBSERVER = """
import json, os, sys, time
d = sys.argv[1]
seen = {}
while True:
    try:
        names = os.listdir(d)
    except OSError:
        names = []
    for name in names:
        if name.startswith("new-") and name not in seen:
            seen[name] = time.time()
            print(json.dumps({"what": "new name", "key": name, "t": seen[name]}), flush=True)
    try:
        with open(os.path.join(d, "beat")) as fh:
            content = fh.read()
    except OSError:
        content = ""
    if content and content not in seen:
        seen[content] = time.time()
        print(json.dumps({"what": "replaced content", "key": content, "t": seen[content]}), flush=True)
    for name in ("job-%d" % i for i in range(10)):
        if name in names:
            seen["listed " + name] = 1
        elif "listed " + name in seen and "gone " + name not in seen:
            seen["gone " + name] = time.time()
            print(json.dumps({"what": "gone (listing)", "key": name, "t": seen["gone " + name]}), flush=True)
        try:
            os.stat(os.path.join(d, name))
            seen["stat " + name] = 1
        except OSError:
            if "stat " + name in seen and "nostat " + name not in seen:
                seen["nostat " + name] = time.time()
                print(json.dumps({"what": "gone (stat)", "key": name, "t": seen["nostat " + name]}), flush=True)
    time.sleep(0.01)
"""


def measure(options: tuple[str, ...], trials: int) -> dict[str, list[float]]:
    work = Path(tempfile.mkdtemp(prefix="sshfs-visibility-"))
    share = work / "share"
    share.mkdir()
    (share / "beat").write_text("0")
    for i in range(trials):
        (share / f"job-{i}").mkdir()
    (work / "observer.py").write_text(OBSERVER)
    log = work / "observer.log"
    lab = NetfsLab(work, share)
    made: dict[str, float] = {}
    try:
        lab.host("observer", [sys.executable, str(work / "observer.py"), str(lab.mountpoint)], log,
                 sshfs_options=options)  # fmt: skip
        wait_until(lambda: '"replaced content"' in log.read_text(), 60, "observer up")
        time.sleep(1.0)  # let its caches fill: the point is how long they hold old answers
        for i in range(trials):
            (share / f"new-{i}").write_text("x")
            made[f"new-{i}"] = time.time()
            tmp = share / ".beat.tmp"
            tmp.write_text(f"beat {i} " + "x" * i)
            os.rename(tmp, share / "beat")
            made[f"beat {i} " + "x" * i] = time.time()
            os.rename(share / f"job-{i}", share / f".moved-{i}")
            made[f"job-{i}"] = time.time()
            time.sleep(2.0)
        time.sleep(25.0 if not options else 3.0)  # sshfs's own cache holds for 20 s
    finally:
        lab.close()
    changes = ("new name", "replaced content", "gone (listing)", "gone (stat)")
    latencies: dict[str, list[float]] = {what: [] for what in changes}
    for line in log.read_text().splitlines():
        if not line.startswith("{"):
            continue
        event = json.loads(line)
        if event["key"] in made:
            latencies[event["what"]].append(event["t"] - made[event["key"]])
    for values in latencies.values():
        values += [float("inf")] * (trials - len(values))  # never seen within the wait
    return latencies


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=5)
    args = parser.parse_args()
    why = missing()
    if why:
        sys.exit(f"cannot run: {why}")
    print(f"{'mount options':42} {'change':18} {'median s':>9} {'max s':>9}")
    for label, options in OPTION_SETS.items():
        for what, values in measure(options, args.trials).items():
            print(f"{label:42} {what:18} {statistics.median(values):9.2f} {max(values):9.2f}")
    print(f"reproduce: .venv/bin/python bench/sshfs_visibility.py --trials {args.trials}")


if __name__ == "__main__":
    main()
