"""Issue 20 items 7 and 12, and "store into the render cache only after the run's checks":
the render cache and the scratch tree trust only what the runner alone owns, the cache
keys (or withholds) everything a command can see, and holds only renders whose own run
decided to publish them.

The hostile member of the spool's group is a real second uid (``setpriv`` to nobody), on a
shared output root they may write to (mode 0777 stands for a group-writable one).
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.processes import spoolrender_cmd
from support.spool_jobs import command_job, drop, entries, write_spool_config
from support.waiting import wait_for

from spoolrender.config.spool_config import load_config
from spoolrender.render_cache.entries import cache_root
from spoolrender.runner.loop import Runner
from spoolrender.spool.chunk_names import STORE_DIR
from spoolrender.spool.layout import SpoolLayout, init_spool
from spoolrender.spool.trusted_dirs import ensure_trusted_path

NEEDS_ROOT = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root and setpriv (a second uid)"
)
AS_NOBODY = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", sys.executable, "-c"]


def drain(layout: SpoolLayout) -> None:
    Runner(load_config(layout.root, environ={}), drain=True).run()


def result_of(layout: SpoolLayout, job_id: str) -> dict[str, Any]:
    (entry,) = [e for e in entries(layout, "done") if e.startswith(f"{job_id}.")]
    data: dict[str, Any] = json.loads((layout.done / entry / "result.json").read_text())
    return data


def renders(marker: Path) -> int:
    return len(marker.read_text().splitlines()) if marker.exists() else 0


@pytest.fixture
def shared() -> Iterator[SpoolLayout]:
    """A spool whose output root another user can write to, in a directory nobody can reach."""
    base = Path(tempfile.mkdtemp(prefix="spoolrender-trust-"))
    try:
        os.chmod(base, 0o755)
        layout = init_spool(base / "spool")
        write_spool_config(layout, {"render_cache": True})
        (layout.root / "output").mkdir(mode=0o777)
        os.chmod(layout.root / "output", 0o777)
        yield layout
    finally:
        shutil.rmtree(base, ignore_errors=True)


def as_nobody(script: str, *args: str) -> None:
    done = subprocess.run([*AS_NOBODY, script, *args], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def _moved_aside(output: Path, name: str) -> list[Path]:
    return sorted(output.glob(f"{name}.untrusted-*"))


@NEEDS_ROOT
def test_a_cache_another_user_made_is_moved_aside_and_never_publishes_their_inode(
    shared: SpoolLayout, tmp_path: Path
) -> None:
    """Item 7 (and review 2): the member makes .spoolrender-cache/entries/ before any runner
    did. Refusing it would turn caching off for everyone; instead the runner renames their
    tree aside (kept for the operator) and makes its own, in which the member can plant
    nothing: the next identical job is a hit of the honest bytes, never their inode."""
    output = shared.root / "output"
    cache = cache_root(output)
    as_nobody("import os, sys; os.makedirs(sys.argv[1] + '/entries', 0o777)", str(cache))
    marker = tmp_path / "renders"
    job = command_job(content="the honest video", marker=str(marker))
    drop(shared, "a.yaml", job)
    drain(shared)
    first = result_of(shared, "a")
    assert first["cache"] == "stored", first
    (aside,) = _moved_aside(output, ".spoolrender-cache")
    assert os.stat(aside).st_uid == 65534 and os.stat(cache).st_uid == os.geteuid()
    plant = "import os, sys; os.mkdir(os.path.join(sys.argv[1], 'entries', sys.argv[2] + '.x'))"
    refused = subprocess.run([*AS_NOBODY, plant, str(cache), first["cache_key"]], capture_output=True, text=True)
    assert refused.returncode != 0 and "Permission denied" in refused.stderr
    drop(shared, "b.yaml", job)
    drain(shared)
    second = result_of(shared, "b")
    published = Path(second["output"])
    assert second["cache"] == "hit" and renders(marker) == 1
    assert published.read_bytes() == b"the honest video" and os.stat(published).st_uid == os.geteuid()


def test_a_group_writable_cache_directory_is_refused_with_the_reason(spool: SpoolLayout, tmp_path: Path) -> None:
    """Item 7: the runner's own entries/ left writable by its group (an old umask): not used."""
    write_spool_config(spool, {"render_cache": True})
    entries_dir = cache_root(spool.root / "output") / "entries"
    entries_dir.mkdir(parents=True)
    os.chmod(entries_dir, 0o775)
    marker = tmp_path / "renders"
    for name in ("g1", "g2"):
        drop(spool, f"{name}.yaml", command_job(marker=str(marker)))
        drain(spool)
    assert renders(marker) == 2 and os.listdir(entries_dir) == []
    result = result_of(spool, "g2")
    assert result["cache"] == "refused"
    assert result["cache_refused"] == f"{entries_dir} is writable by its group or others (mode 0775)"
    status = subprocess.run(spoolrender_cmd("status", "--spool", str(spool.root)), capture_output=True, text=True)
    assert f"render cache: not used: {entries_dir} is writable by its group or others" in status.stdout, status


def test_a_command_reading_its_job_id_is_not_served_another_jobs_output(spool: SpoolLayout) -> None:
    """Item 12: $SPOOLRENDER_JOB_ID is not shown to a cached command (identical jobs still
    share its output); a template that names {job_id} sees it, and is keyed by it."""
    reads_env = "import os, sys; open(sys.argv[1], 'w').write(os.environ.get('SPOOLRENDER_JOB_ID', 'no id'))"
    names_id = "import os, sys; open(sys.argv[1], 'w').write(sys.argv[2] + ' ' + os.environ['SPOOLRENDER_JOB_ID'])"
    commands = {
        "env": [sys.executable, "-c", reads_env, "{output}"],
        "named": [sys.executable, "-c", names_id, "{output}", "{job_id}"],
    }
    write_spool_config(spool, {"render_cache": True, "commands": commands})
    for name in ("e1", "e2"):
        drop(spool, f"{name}.yaml", {"renderer": "command", "command": "env"})
        drain(spool)
    assert Path(result_of(spool, "e2")["output"]).read_bytes() == b"no id"
    assert result_of(spool, "e2")["cache"] == "hit"  # honest identical jobs keep their hits
    for name in ("n1", "n2"):
        drop(spool, f"{name}.yaml", {"renderer": "command", "command": "named"})
        drain(spool)
    assert Path(result_of(spool, "n2")["output"]).read_bytes() == b"n2 n2"
    assert result_of(spool, "n2")["cache"] == "stored"


def test_a_render_its_run_did_not_publish_is_never_stored(spool: SpoolLayout, tmp_path: Path) -> None:
    """A verified render whose run is then not decided as published (here: the submitted
    file is appended to during the render, a continued upload that voids the run) leaves no
    cache entry; before,
    the entry was stored first and the run's retry was a hit of its own refused render."""
    # Paths of directories only: an argument that is an existing file is keyed by content.
    edit_once = (  # by the running/ path: the submitter's file, kept beside the copy until the decision
        "import glob, os, sys\n"
        "flag, marker = os.path.join(sys.argv[3], 'edited'), os.path.join(sys.argv[3], 'renders')\n"
        "if not os.path.exists(flag):\n"
        "    open(flag, 'w').close()\n"
        "    (submitted,) = glob.glob(os.path.join(sys.argv[2], '*', 'submitted.yaml'))\n"
        "    open(submitted, 'a').write('# appended during the render\\n')\n"
        "open(sys.argv[1], 'w').write('video')\n"
        "open(marker, 'a').write('rendered\\n')\n"
    )
    state = tmp_path / "state"
    state.mkdir()
    command = [sys.executable, "-c", edit_once, "{output}", str(spool.running), str(state)]
    write_spool_config(spool, {"render_cache": True, "commands": {"edits": command}})
    drop(spool, "x.yaml", {"renderer": "command", "command": "edits"})

    def done() -> bool:
        drain(spool)  # the discarded run is requeued for after the settle time
        return bool(entries(spool, "done"))

    wait_for(done, timeout=60, interval=0.2)
    result = result_of(spool, "x")
    assert [r["outcome"] for r in result["runs"]][-1] == "publishing" and len(result["runs"]) == 2
    assert result["cache"] == "stored" and renders(state / "renders") == 2


@NEEDS_ROOT
@NEEDS_ROOT
def test_a_scratch_tree_another_user_made_is_moved_aside_and_fails_nobodys_job(shared: SpoolLayout) -> None:
    """Item 7 turned around (review 2): in their .spoolrender-tmp/ the member could replace
    a rendered file before its publish, but refusing it failed every other user's job. The
    runner (which owns the output root) renames it aside, never following it, makes its
    own and renders: nothing of theirs is used, nobody's job fails for it."""
    output = shared.root / "output"
    scratch = output / ".spoolrender-tmp"
    as_nobody("import os, sys; os.mkdir(sys.argv[1]); os.chmod(sys.argv[1], 0o777)", str(scratch))
    drop(shared, "s.yaml", {**command_job(), "max_attempts": 1})
    drain(shared)
    assert entries(shared, "failed") == [] and len(entries(shared, "done")) == 1
    (aside,) = _moved_aside(output, ".spoolrender-tmp")
    assert os.stat(aside).st_uid == 65534 and os.listdir(aside) == []
    assert os.stat(scratch).st_uid == os.geteuid() and stat.S_IMODE(os.stat(scratch).st_mode) == 0o755


@NEEDS_ROOT
def test_a_chunk_store_or_a_symlink_another_user_made_is_moved_aside(shared: SpoolLayout, tmp_path: Path) -> None:
    """The same class for the chunk store, and for a symlink planted in place of a tree:
    renamed aside as the name it is (never followed), and the runner's own tree made."""
    output = shared.root / "output"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    as_nobody("import os, sys; os.mkdir(sys.argv[1])", str(output / STORE_DIR))
    as_nobody("import os, sys; os.symlink(sys.argv[2], sys.argv[1])", str(output / ".spoolrender-tmp"), str(elsewhere))
    assert ensure_trusted_path(output, STORE_DIR, "key") == output / STORE_DIR / "key"
    assert ensure_trusted_path(output, ".spoolrender-tmp") == output / ".spoolrender-tmp"
    (store_aside,) = _moved_aside(output, STORE_DIR)
    (link_aside,) = _moved_aside(output, ".spoolrender-tmp")
    assert os.stat(store_aside).st_uid == 65534 and os.path.islink(link_aside)
    assert os.listdir(elsewhere) == [] and not (output / ".spoolrender-tmp").is_symlink()


def test_the_runners_own_group_writable_scratch_tree_is_repaired(spool: SpoolLayout) -> None:
    """A scratch tree an older version made under umask 002 is the runner's: made writable
    by the runner only, and used."""
    scratch = spool.root / "output" / ".spoolrender-tmp"
    scratch.mkdir(parents=True)
    os.chmod(scratch, 0o775)
    drop(spool, "r.yaml", command_job())
    drain(spool)
    assert entries(spool, "done") and stat.S_IMODE(os.stat(scratch).st_mode) == 0o755


def test_a_cache_made_under_umask_002_is_the_runners_alone_and_used(spool: SpoolLayout, tmp_path: Path) -> None:
    """contrib's umask 002 (files the spool's group may write) must not make the cache's
    own directories group-writable, which would have the next lookup refuse them."""
    write_spool_config(spool, {"render_cache": True})
    marker = tmp_path / "renders"
    old = os.umask(0o002)
    try:
        for name in ("u1", "u2"):
            drop(spool, f"{name}.yaml", command_job(marker=str(marker)))
            drain(spool)
    finally:
        os.umask(old)
    assert result_of(spool, "u2")["cache"] == "hit" and renders(marker) == 1
    cache = cache_root(spool.root / "output")
    for path in (cache, cache / "entries", cache / "staging", cache / "inflight", *(cache / "entries").iterdir()):
        assert stat.S_IMODE(os.stat(path).st_mode) & 0o022 == 0, path


def test_a_cached_command_never_sees_its_job_id_through_the_paths_it_is_given(spool: SpoolLayout) -> None:
    """docs/reliability.md: "A cached command cannot be served an output made from another
    job's id." Its working directory, $TMPDIR, {work_dir}, {output} and {job_file} were
    named after the running/ entry (<id>.<uid>.<token>): a cached command that writes where
    it runs (a log line, a "rendered in ..." caption) served job y an output naming job x.
    The job files are identical (the ids come from the file names), so y is a cache hit."""
    write_spool_config(spool, {"render_cache": True, "commands": {"where": [
        "sh", "-c", 'printf "%s\\n%s\\n%s\\n%s\\n" "$PWD" "$TMPDIR" "$2" "$3" > "$1"',
        "sh", "{output}", "{job_file}", "{work_dir}"]}})  # fmt: skip
    for job_id in ("x", "y"):
        drop(spool, f"{job_id}.yaml", {"renderer": "command", "command": "where"})
        drain(spool)
    assert result_of(spool, "y")["cache"] == "hit"
    served = (spool.root / "output" / "y.mp4").read_text()
    names = {part for line in served.split() for part in Path(line).parts}
    assert not any(n == "x" or n.startswith("x.") for n in names), f"job y was served job x's id: {served!r}"


@NEEDS_ROOT
def test_a_foreign_scratch_tree_that_cannot_be_moved_aside_fails_the_job_at_once_with_the_fix(
    shared: SpoolLayout,
) -> None:
    """The output root sticky and not the runner's, so another user's .spoolrender-tmp/
    cannot be renamed aside (a runner without CAP_FOWNER: a non-root runner's position):
    the job retried as `untrusted-dir` and used its attempts, while only an operator can
    act. It fails at once, as `foreign-output-tree`, with the path, the owner and the fix;
    the runner warned at start; `spoolrender retry` works after the fix."""
    output = shared.root / "output"
    os.chown(output, 2, 2)  # uid 2 (bin): neither the runner's nor the member's
    os.chmod(output, 0o1777)
    as_nobody("import os, sys; os.mkdir(sys.argv[1]); os.chmod(sys.argv[1], 0o777)", str(output / ".spoolrender-tmp"))
    drop(shared, "stuck.yaml", command_job())
    no_fowner = ["setpriv", "--bounding-set=-fowner", "--inh-caps=-fowner"]
    run = subprocess.run([*no_fowner, *spoolrender_cmd("run", "--drain", "--spool", str(shared.root))],
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    assert "is writable by others (mode 1777, owner uid 2)" in run.stderr, run.stderr
    assert "the runner cannot move such a tree aside" in run.stderr, run.stderr
    (entry,) = entries(shared, "failed")
    failure = json.loads((shared.failed / entry / "failure.json").read_text())
    assert failure["kind"] == "foreign-output-tree" and failure["attempts"] == 1, failure
    for part in (str(output / ".spoolrender-tmp"), "uid 65534", "sticky (mode 1777)", f"chown 0 {output}"):
        assert part in failure["reason"], failure["reason"]
    shutil.rmtree(output / ".spoolrender-tmp")  # the operator's fix
    os.chown(output, 0, 0)
    os.chmod(output, 0o755)
    retry = subprocess.run(
        spoolrender_cmd("retry", "stuck", "--spool", str(shared.root)), capture_output=True, text=True
    )
    assert retry.returncode == 0, retry.stderr
    drain(shared)
    assert len(entries(shared, "done")) == 1 and entries(shared, "failed") == []
