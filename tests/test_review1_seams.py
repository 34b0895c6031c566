"""Review 1 reproducers at the seams of trustroots (issue 20 items 7, 8, 12) and opcli
(issue 23): each test fails on main 831265d and passes once its bug is fixed."""

from __future__ import annotations

import json
import os
from pathlib import Path

from conftest import command_job, drop, entries, write_spool_config

from spoolrender.api import Spool
from spoolrender.config import load_config
from spoolrender.layout import SpoolLayout
from spoolrender.rerun import RERUN_REFUSED
from spoolrender.runner import Runner


def drain(layout: SpoolLayout) -> None:
    Runner(load_config(layout.root, environ={}), drain=True).run()


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
    assert scratch.stat().st_ino == recorded, "this filesystem did not reuse the inode number"
    os.rename(scratch, output)
    drop(spool, "a2.yaml", {**command_job(content="a's second render"), "id": "a", "output": "report.txt",
                            "rerun": True})  # fmt: skip
    drain(spool)
    assert output.read_bytes() == b"a user's own report, much longer than a's render", "the user's file was replaced"
    assert failure_of(spool, "a")["kind"] == RERUN_REFUSED


def test_spool_rerun_from_python_queues_the_done_job_again(spool: SpoolLayout) -> None:
    """docs/operations.md: "`Spool.rerun(ID)` does the same from Python"; the merge of opcli
    moved rerun() into spoolrender.rerun_done, but api.py (and cli/ops_commands.py) still
    import it from spoolrender.rerun."""
    drop(spool, "recap.yaml", {**command_job(content="first"), "output": "recap.txt"})
    drain(spool)
    queued = Spool(spool.root).rerun("recap")
    assert Path(queued) == spool.incoming / "recap.yaml" and "rerun: true" in queued.read_text()


def test_a_cached_command_never_sees_its_job_id_through_its_working_directory(spool: SpoolLayout) -> None:
    """docs/reliability.md: "A cached command cannot be served an output made from another
    job's id." The run's working directory, $TMPDIR, {work_dir} and {output} are named
    after the running/ entry, which is the job's id: a cached command that writes where it
    runs (a log line, a "rendered in ..." caption) serves job y an output that names job x."""
    write_spool_config(spool, {"render_cache": True, "commands": {"where": ["sh", "-c", 'basename "$PWD" > "$1"',
                                                                            "sh", "{output}"]}})  # fmt: skip
    for job_id in ("x", "y"):
        drop(spool, f"{job_id}.yaml", {"renderer": "command", "command": "where", "id": job_id,
                                       "output": f"{job_id}.txt"})  # fmt: skip
        drain(spool)
    served = (spool.root / "output" / "y.txt").read_text()
    assert not served.startswith("x."), f"job y was served an output made with job x's id: {served!r}"


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
