"""Issue 20 item 8: ``rerun: true`` replaces only an output that its own id published last
(the spool's outputs index names the id, and the file is still the one it published);
anything else fails with RERUN_REFUSED."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from support.spool_jobs import command_job, drop, entries, write_spool_config
from support.waiting import wait_for

from spoolrender.config.spool_config import load_config
from spoolrender.lifecycle.rerun import RERUN_REFUSED
from spoolrender.runner.loop import Runner
from spoolrender.spool.layout import SpoolLayout


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
    assert failure["kind"] == RERUN_REFUSED and "job 'b' did not publish it last" in failure["reason"]
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
    release, started = tmp_path / "release", tmp_path / "started"
    props = {"until_file": str(release), "pidfile": str(started), "content": "second"}
    drop(spool, "a2.yaml", job("a", "second render of a", rerun=True, props=props))
    start_runner()
    # The render has begun (the run's own start check is behind it), not just the claim.
    wait_for(started.exists, timeout=60)
    planted = output.with_name("planted")
    planted.write_bytes(b"swapped in during the render")
    os.rename(planted, output)
    release.touch()
    wait_for(lambda: bool(entries(spool, "failed")), timeout=60)
    failure = record(spool, "failed", "a", "failure.json")
    assert failure["kind"] == RERUN_REFUSED and "is no longer the file job 'a' published" in failure["reason"]
    assert "rendered, but not published" in failure["reason"]
    assert output.read_bytes() == b"swapped in during the render"


def failure_of(layout: SpoolLayout, job_id: str) -> dict[str, str]:
    (name,) = [e for e in entries(layout, "failed") if e.startswith(f"{job_id}.")]
    found: dict[str, str] = json.loads((layout.failed / name / "failure.json").read_text())
    return found


def test_rerun_never_replaces_another_ids_output_that_shares_its_inode_through_the_cache(
    spool: SpoolLayout,
) -> None:
    """a renders shared.txt (stored in the render cache); a consumer takes it away; job m,
    another id with identical inputs, publishes shared.txt from the cache: a hard link to
    the same inode that a's done record names. A rerun of a then may not replace it: the
    file at the name is m's output, not the one a published last."""
    write_spool_config(spool, {"render_cache": True})
    output = spool.root / "output" / "shared.txt"
    drop(spool, "a.yaml", {**command_job(content="same"), "id": "a", "output": "shared.txt"})
    drain(spool)
    os.unlink(output)  # consumed
    drop(spool, "m.yaml", {**command_job(content="same"), "id": "m", "output": "shared.txt"})
    drain(spool)
    (m_done,) = [e for e in entries(spool, "done") if e.startswith("m.")]
    assert json.loads((spool.done / m_done / "result.json").read_text())["cache"] == "hit"
    drop(spool, "a2.yaml", {**command_job(content="a's new bytes"), "id": "a", "output": "shared.txt",
                            "rerun": True, "cache": False})  # fmt: skip
    drain(spool)
    assert output.read_bytes() == b"same", "a's rerun replaced the output that job m published"
    assert failure_of(spool, "a")["kind"] == RERUN_REFUSED


def test_rerun_never_replaces_a_users_file_that_got_the_old_outputs_inode_number(spool: SpoolLayout) -> None:
    """ext4 (and most filesystems) hand a freed inode number to the next new file: a's
    output is deleted, a user writes their own file under the name, and it gets the number
    a's done record holds. RenderedFile.matches takes the number alone as proof."""
    output = spool.root / "output" / "report.txt"
    drop(spool, "a.yaml", {**command_job(content="a's render"), "id": "a", "output": "report.txt"})
    drain(spool)
    recorded = output.stat().st_ino
    os.unlink(output)  # consumed
    scratch = output.with_name("scratch")
    for _ in range(1000):  # until the filesystem hands out the freed number again
        scratch.write_bytes(b"a user's own report, much longer than a's render")
        if scratch.stat().st_ino == recorded:
            break
        os.rename(scratch, output.with_name(f"keep-{scratch.stat().st_ino}"))  # hold the other numbers
    else:
        scratch.write_bytes(b"a user's own report, much longer than a's render")
    os.rename(scratch, output)
    if output.stat().st_ino != recorded:
        # Another process on a busy machine took the freed number first: give the index the
        # state the reuse makes (the publisher's entry naming the user's file's number), so
        # the rule is tested either way. Said here because this is the one edited record.
        (entry,) = (spool.root / ".spoolrender" / "outputs").iterdir()
        data = json.loads(entry.read_text())
        entry.write_text(json.dumps({**data, "inode": output.stat().st_ino}))
    drop(spool, "a2.yaml", {**command_job(content="a's second render"), "id": "a", "output": "report.txt",
                            "rerun": True})  # fmt: skip
    drain(spool)
    assert output.read_bytes() == b"a user's own report, much longer than a's render", "the user's file was replaced"
    assert failure_of(spool, "a")["kind"] == RERUN_REFUSED


def test_a_refused_rerun_leaves_the_done_job_holding_its_id(spool: SpoolLayout) -> None:
    """docs/reliability.md: "a job id is published at most once unless it says rerun: true".
    A rerun takes the id's reservation over from the done job; when it fails (here
    rerun-refused: a user's file at the output) the failure releases the reservation, the
    done job holds its id no more, and a plain job of that id dropped into incoming/ is
    published again."""
    drop(spool, "a.yaml", {**command_job(content="1"), "id": "a", "output": "a.txt"})
    drain(spool)
    (spool.root / "output" / "c.txt").write_text("a user's file")
    drop(spool, "a2.yaml", {**command_job(content="2"), "id": "a", "output": "c.txt", "rerun": True})
    drain(spool)
    assert failure_of(spool, "a")["kind"] == RERUN_REFUSED
    drop(spool, "a3.yaml", {**command_job(content="3"), "id": "a", "output": "d.txt"})  # no rerun
    drain(spool)
    assert not (spool.root / "output" / "d.txt").exists(), "id 'a' was published again without rerun: true"
    assert len([e for e in entries(spool, "done") if e.startswith("a.")]) == 1
