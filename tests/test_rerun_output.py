"""Issue 20 item 8: ``rerun: true`` replaces only an output that its own id published last
(the inode recorded in that id's done record); anything else fails with RERUN_REFUSED."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from conftest import command_job, drop, entries, wait_for

from spoolrender.config import load_config
from spoolrender.layout import SpoolLayout
from spoolrender.rerun import RERUN_REFUSED
from spoolrender.runner import Runner


def drain(layout: SpoolLayout) -> None:
    Runner(load_config(layout.root, environ={}), drain=True).run()


def record(layout: SpoolLayout, state: str, job_id: str, name: str) -> dict[str, Any]:
    found = sorted(e for e in entries(layout, state) if e.startswith(f"{job_id}."))
    data: dict[str, Any] = json.loads((getattr(layout, state) / found[-1] / name).read_text())
    return data


def job(job_id: str, content: str, **fields: Any) -> dict[str, Any]:
    return {**command_job(content=content), "id": job_id, "output": "shared.mp4", **fields}


def test_rerun_replaces_its_own_output_and_never_another_ids(spool: SpoolLayout) -> None:
    output = spool.root / "output" / "shared.mp4"
    drop(spool, "a.yaml", job("a", "first render of a"))
    drain(spool)
    assert output.read_bytes() == b"first render of a"
    # Another id that asks to re-run, naming a's output: refused, a's video untouched.
    drop(spool, "b.yaml", job("b", "b's bytes", rerun=True))
    drain(spool)
    failure = record(spool, "failed", "b", "failure.json")
    assert failure["kind"] == RERUN_REFUSED and "no done record of job 'b' published it" in failure["reason"]
    assert output.read_bytes() == b"first render of a"
    # a itself re-runs: its output is replaced.
    drop(spool, "a2.yaml", job("a", "second render of a", rerun=True))
    drain(spool)
    assert output.read_bytes() == b"second render of a"
    # Someone puts another file in its place: not the file a published last, so not a's to replace.
    planted = output.with_name("planted")
    planted.write_bytes(b"a user's file")
    os.rename(planted, output)
    drop(spool, "a3.yaml", job("a", "third render of a", rerun=True))
    drain(spool)
    failure = record(spool, "failed", "a", "failure.json")
    assert failure["kind"] == RERUN_REFUSED and "is no longer the file job 'a' published" in failure["reason"]
    assert output.read_bytes() == b"a user's file"


def test_the_publish_itself_refuses_an_output_replaced_during_the_rerun(
    spool: SpoolLayout, tmp_path: Path, start_runner: Callable[..., subprocess.Popen[bytes]]
) -> None:
    """The check at the run's start is not the last word: an output swapped while the
    re-run renders is refused when it would be replaced, and the job fails with the reason."""
    output = spool.root / "output" / "shared.mp4"
    drop(spool, "a.yaml", job("a", "first render of a"))
    drain(spool)
    release = tmp_path / "release"
    drop(spool, "a2.yaml", job("a", "second render of a", rerun=True, props={"until_file": str(release),
                                                                            "content": "second"}))  # fmt: skip
    start_runner()
    wait_for(lambda: bool(entries(spool, "running")), timeout=60)
    planted = output.with_name("planted")
    planted.write_bytes(b"swapped in during the render")
    os.rename(planted, output)
    release.touch()
    wait_for(lambda: bool(entries(spool, "failed")), timeout=60)
    failure = record(spool, "failed", "a", "failure.json")
    assert failure["kind"] == RERUN_REFUSED and "is no longer the file job 'a' published" in failure["reason"]
    assert "rendered, but not published" in failure["reason"]
    assert output.read_bytes() == b"swapped in during the render"
