"""Durability, shown with strace: every acknowledged state change is fsynced in the right
order (file data, then the name that publishes it, then the directory holding the name).

A power cut can only lose what was not yet acknowledged: at worst a claim (the job is
found again in incoming/ or recovered from running/), never a submitted, decided or
finished job, and never a published output.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from spoolrender.spool.layout import init_spool

RENDER_PROPS = Path(__file__).resolve().parent.parent / "programs" / "render_props.py"
SYSCALL = re.compile(r"^(?:\d+ +)?(\w+)\((.*)\) += (-?\d+)")
PATHS = re.compile(r'"([^"]*)"|<([^>]*)>')

pytestmark = pytest.mark.skipif(shutil.which("strace") is None, reason="strace not installed (setup.sh --test)")


def trace(argv: list[str], out: Path) -> list[tuple[str, list[str]]]:
    subprocess.run(["strace", "-f", "-qq", "-y", "-e", "signal=none", "-o", str(out),
                    "-e", "trace=rename,renameat,renameat2,link,linkat,fsync,fdatasync", *argv],
                   check=False, capture_output=True, timeout=120)  # fmt: skip
    calls = []
    for line in out.read_text().splitlines():
        m = SYSCALL.match(line)
        if m and m.group(3) == "0":
            paths = [a or b for a, b in PATHS.findall(m.group(2))]
            calls.append((m.group(1), paths))
    return calls


def index(calls: list[tuple[str, list[str]]], name: str, *parts: str, after: int = -1) -> int:
    """Index of the first call named ``name`` after ``after`` whose paths contain ``parts``, in order."""
    for i, (call, paths) in enumerate(calls):
        if i <= after or not call.startswith(name):
            continue
        joined = " | ".join(paths)
        if all(p in joined for p in parts) and joined.find(parts[-1]) >= joined.find(parts[0]):
            return i
    raise AssertionError(f"no {name} {parts} after #{after}:\n" + "\n".join(f"{c} {p}" for c, p in calls))


def test_state_changes_fsync_data_then_name_then_directory(tmp_path: Path) -> None:
    layout = init_spool(tmp_path / "spool")
    config = {
        "settle_seconds": 0,
        "commands": {"props": [sys.executable, str(RENDER_PROPS), "{output}", "{props_file}"]},
    }
    (layout.root / "spoolrender.yaml").write_text(yaml.safe_dump(config))
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump({"renderer": "command", "command": "props", "output": "v/out.mp4"}))
    cli = [sys.executable, "-m", "spoolrender.cli"]

    # submit: data fsynced, then renamed into incoming/, then incoming/ fsynced.
    sub = trace([*cli, "submit", "--spool", str(layout.root), str(job)], tmp_path / "submit.trace")
    data = index(sub, "fsync", ".job.yaml.")
    name = index(sub, "rename", ".job.yaml.", "incoming/job.yaml", after=data)
    index(sub, "fsync", str(layout.incoming), after=name)

    run = trace([*cli, "run", "--drain", "--spool", str(layout.root)], tmp_path / "run.trace")
    run = [c for c in run if not any(k in " ".join(c[1]) for k in ("heartbeat", "clock-", "runners/", "liveness"))]
    # The rendered file is on disk before the decision that will publish it is recorded.
    out_data = index(run, "fsync", ".spoolrender-tmp/", "output.mp4")
    decision_data = index(run, "fsync", ".run-0001.json.", after=out_data)
    decision = index(run, "link", ".run-0001.json.", "run-0001.json", after=decision_data)
    index(run, "fsync", str(layout.running) + "/job.", after=decision)
    # Publish: one link() into the output tree, then that directory fsynced.
    publish = index(run, "link", "output.mp4", "out.mp4", after=decision)
    index(run, "fsync", str(layout.root / "output" / "v"), after=publish)
    # The result record, then the move to done/, then both directories.
    result_data = index(run, "fsync", ".result.json.", after=publish)
    result = index(run, "rename", ".result.json.", "result.json", after=result_data)
    move = index(run, "rename", str(layout.running), str(layout.done), after=result)
    index(run, "fsync", str(layout.done), after=move)
    index(run, "fsync", str(layout.running), after=move)
