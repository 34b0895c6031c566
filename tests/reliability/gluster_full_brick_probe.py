#!/usr/bin/env python3
"""What a client of a GlusterFS replica-3 volume sees when bricks' filesystems fill up
(measurements for docs/reliability.md, "A full brick"; not a test).

    .venv/bin/python tests/reliability/gluster_full_brick_probe.py [KEY=VALUE ...]

A lab (`gluster_lab.GlusterLab`) and one more volume whose bricks 2 and 3 live on 32 MiB
tmpfs filesystems of their own (in their servers' mount namespaces), with the supported
options plus KEY=VALUE (e.g. ``storage.reserve=0``). Phases, each followed by one round of
operations through a client (create, small and 1 MiB writes with fsync, in-place rewrite,
rename, link, symlink, mkdir, unlink, directory fsync, statvfs) and the heal counts:

- ``reserve``: brick 3 below ``storage.reserve`` (free < 1 % of 32 MiB) but not full;
- ``one-full``: brick 3 full (a filler file on its filesystem, beside the brick, until ENOSPC);
- ``two-full``: bricks 2 and 3 full;
- ``freed``: both fillers removed; then `volume heal` until nothing is pending, timed, and
  whether the three bricks hold the same names.

One JSON line per phase: each operation's result ("ok" or the errno's name) and seconds.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gluster_lab import GlusterLab
from netfs_lab import wait_until

from spoolrender.spool.glusterfs import VOLUME_OPTIONS

SIZE = 32 * 1024 * 1024
VOLUME = "full"
# posix's disk-space check runs every 5 s on each brick (storage.reserve): wait past it.
RESERVE_CHECK_S = 6.0


def free(path: Path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def fill(root: Path, leave: int = 0) -> int:
    """A filler file on the filesystem at ``root`` until less than ``leave`` bytes are free
    (0: until ENOSPC); the bytes left free."""
    with open(root / "filler", "ab") as out:
        for chunk in (1 << 20, 1 << 16, 4096):
            while free(root) - chunk >= leave:
                try:
                    out.write(b"\0" * chunk)
                    out.flush()
                except OSError as exc:
                    if exc.errno != errno.ENOSPC:
                        raise
                    break
    return free(root)


def unlink_fillers(roots: Iterable[Path]) -> None:
    for root in roots:
        (root / "filler").unlink()


def attempt(op: Callable[[], object]) -> dict[str, object]:
    start = time.monotonic()
    try:
        op()
        result = "ok"
    except OSError as exc:
        result = errno.errorcode.get(exc.errno or 0, str(exc))
    return {"result": result, "s": round(time.monotonic() - start, 3)}


def write(path: Path, size: int) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, b"x" * size)
        os.fsync(fd)
    finally:
        os.close(fd)


def rewrite(path: Path) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.pwrite(fd, b"y" * 4096, 0)
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def operations(mount: Path, tag: str) -> dict[str, object]:
    d = mount / tag
    ops: dict[str, Callable[[], object]] = {
        "mkdir": lambda: d.mkdir(),
        "create_excl": lambda: os.close(os.open(d / "excl", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)),
        "write_4k_fsync": lambda: write(d / "small", 4096),
        "write_1m_fsync": lambda: write(d / "big", 1 << 20),
        "rewrite_in_place": lambda: rewrite(mount / "before" / "small"),
        "rename": lambda: os.rename(d / "small", d / "renamed"),
        "rename_over": lambda: os.rename(d / "excl", d / "renamed"),
        "link": lambda: os.link(d / "renamed", d / "linked"),
        "symlink": lambda: os.symlink("renamed", d / "sym"),
        "unlink": lambda: os.unlink(d / "linked"),
        "unlink_old": lambda: os.unlink(mount / "before" / f"victim-{tag}"),
        "fsync_dir": lambda: fsync_dir(d),
    }
    results: dict[str, object] = {name: attempt(op) for name, op in ops.items()}
    results["statvfs_free"] = free(mount)
    return results


def pending(lab: GlusterLab) -> list[int]:
    try:
        summary = lab.gluster("volume", "heal", VOLUME, "info", "summary")
    except RuntimeError as exc:
        return [-1, len(str(exc))]
    return [int(n) for n in re.findall(r"Total Number of entries:\s*(\d+)", summary)]


def names(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if ".glusterfs" not in p.parts}


def main() -> None:
    extra = [tuple(arg.split("=", 1)) for arg in sys.argv[1:]]
    with tempfile.TemporaryDirectory(prefix="fullbrick") as work:
        lab = GlusterLab(Path(work))
        try:
            opts = [*VOLUME_OPTIONS, *extra]
            lab.create_volume(VOLUME, opts, small_bricks=[(2, SIZE), (3, SIZE)])  # type: ignore[arg-type]
            mount = Path(work) / "fullmnt"
            lab.mount(mount, volume=VOLUME)
            fs = {i: lab.brick(i, VOLUME).parent for i in (2, 3)}
            before = mount / "before"
            before.mkdir()
            write(before / "small", 4096)
            for phase in ("reserve", "one-full", "two-full", "freed"):
                (before / f"victim-{phase}").write_text("v")
            print(json.dumps({"phase": "start", "options": opts, "statvfs_free": free(mount),
                              "brick_free": {i: free(r) for i, r in fs.items()}}), flush=True)  # fmt: skip
            phases: list[tuple[str, Callable[[], object]]] = [
                ("reserve", lambda: fill(fs[3], leave=SIZE // 200)),
                ("one-full", lambda: fill(fs[3])),
                ("two-full", lambda: fill(fs[2])),
                ("freed", lambda: unlink_fillers(fs.values())),
            ]
            for phase, act in phases:
                act()
                time.sleep(RESERVE_CHECK_S)
                brick_free = {i: free(r) for i, r in fs.items()}
                results = operations(mount, phase)
                print(json.dumps({"phase": phase, "brick_free": brick_free, "pending": pending(lab), **results}),
                      flush=True)  # fmt: skip
            start = time.monotonic()

            def healed() -> bool:
                with contextlib.suppress(RuntimeError):
                    lab.gluster("volume", "heal", VOLUME)
                counts = pending(lab)
                return len(counts) == 3 and sum(counts) == 0

            wait_until(healed, 300, "volume healed")
            heal_s = time.monotonic() - start
            held = [names(lab.brick(i, VOLUME)) for i in (1, 2, 3)]
            print(json.dumps({"phase": "healed", "seconds": round(heal_s, 1),
                              "bricks_agree": held[0] == held[1] == held[2],
                              "differ": [sorted(h ^ held[0]) for h in held]}), flush=True)  # fmt: skip
        finally:
            lab.close()


if __name__ == "__main__":
    main()
