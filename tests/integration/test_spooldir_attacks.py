"""Issue 20, item 6: a name re-resolved after it was checked can point elsewhere.

Each test plays the hostile spool-group member of the reproduced attack (a queue directory
swapped for a symlink between the listing and the use, entries that are symlinks) and
fails on fe27397, which used listed names by path. The swap is injected in-process right
after the real listing, so it always lands in the window (the attack needs a race; the
test must not). Ownership by a second uid is set with chown (tests run as root).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.processes import as_member
from support.spool_jobs import command_job, drop

import spoolrender.intake.scan
import spoolrender.serve.api
from spoolrender.config.spool_config import SpoolConfig
from spoolrender.errors import SpoolrenderError
from spoolrender.intake.scan import SpoolScanner
from spoolrender.ops.control import cancel, retry
from spoolrender.ops.purge import purge
from spoolrender.serve.readmodel import ApiError
from spoolrender.spool.clock import SystemClock
from spoolrender.spool.layout import SpoolLayout, new_token
from spoolrender.spool.tree_removal import remove_tree_at

MEMBER_UID = 65534  # nobody: the hostile spool-group member
SECRET = b"id: root-only\nsecret: the vault's bytes\n"
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="a second uid needs root (chown)")


def _queue_dir(spool: SpoolLayout, name: str, *, owner: int = 0) -> Path:
    path = spool.incoming / name
    path.mkdir()
    os.chmod(path, 0o3775)  # as `spoolrender queue add` makes it
    os.chown(path, owner, -1)
    return path


def _vault(tmp_path: Path, name: str) -> Path:
    """A root-only directory holding a 0600 file of the name the attacker listed."""
    vault = tmp_path / "vault"
    vault.mkdir(mode=0o700)
    (vault / name).write_bytes(SECRET)
    os.chmod(vault / name, 0o600)
    return vault


def _swap(queue: Path, target: Path) -> None:
    """The attacker's move: the listed queue directory aside, a symlink in its place."""
    os.rename(queue, queue.with_name(queue.name + ".aside"))
    queue.symlink_to(target)


def _after(monkeypatch: pytest.MonkeyPatch, module: Any, names: tuple[str, ...], then: Callable[[], None]) -> None:
    """Run ``then`` right after the first of ``module``'s listing functions ``names`` it has."""
    attr = next(n for n in names if hasattr(module, n))
    real = getattr(module, attr)

    def listed(*args: Any, **kwargs: Any) -> Any:
        result = real(*args, **kwargs)
        then()
        return result

    monkeypatch.setattr(module, attr, listed)


def test_serve_job_file_never_reads_through_a_swapped_queue_dir(
    spool: SpoolLayout, config: SpoolConfig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reproduced leak: GET /jobs/<name>/file returned a root-only 0600 file."""
    queue = _queue_dir(spool, "q1")
    (queue / "leak.yaml").write_text(yaml.safe_dump(command_job()))
    vault = _vault(tmp_path, "leak.yaml")
    _after(monkeypatch, spoolrender.serve.api, ("find_entries",), lambda: _swap(queue, vault))
    with pytest.raises(ApiError) as refused:
        spoolrender.serve.api.job_file(config, "leak")
    assert refused.value.status == 404
    assert (vault / "leak.yaml").read_bytes() == SECRET  # untouched


def test_the_scan_never_reads_through_a_swapped_queue_dir(
    spool: SpoolLayout, config: SpoolConfig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Listed, then swapped: the scan stats and parses the file it listed, not the vault's
    (fe27397 took the job's id, priority and route from the file elsewhere)."""
    queue = _queue_dir(spool, "q1")
    (queue / "x.yaml").write_text(yaml.safe_dump({**command_job(), "id": "mine"}))
    old = time.time() - 60
    os.utime(queue / "x.yaml", (old, old))  # settled
    vault = _vault(tmp_path, "x.yaml")
    _after(monkeypatch, spoolrender.intake.scan, ("incoming_view", "list_incoming"), lambda: _swap(queue, vault))
    scanner = SpoolScanner(spool, config, SystemClock())
    found = scanner.scan(lambda: None).candidates
    assert [(c.name, c.job_id) for c in found] == [("q1/x.yaml", "mine")]


@needs_root
def test_a_member_made_queue_dir_is_not_honoured(spool: SpoolLayout, config: SpoolConfig) -> None:
    """Their directory: they could delete or replace the others' drops in it, or swap it.
    Its files are not claimed (and not deleted); the runner says why and how to fix it."""
    queue = _queue_dir(spool, "q1", owner=MEMBER_UID)
    drop(spool, "ok.yaml", command_job())
    (queue / "other.yaml").write_text(yaml.safe_dump(command_job()))
    old = time.time() - 60
    os.utime(queue / "other.yaml", (old, old))
    scanner = SpoolScanner(spool, config, SystemClock())
    assert [c.name for c in scanner.scan(lambda: None).candidates] == ["ok.yaml"]
    reason = scanner.blocked()["q1/"]
    assert "incoming/q1 is owned by uid 65534, not by the runner" in reason
    assert "spoolrender queue add q1" in reason
    assert (queue / "other.yaml").exists()
    with pytest.raises(ApiError):  # serve does not show it either
        spoolrender.serve.api.job_file(config, "other")


def _entry_symlink(spool: SpoolLayout, state: str, name: str, target: Path) -> Path:
    link = spool.state_dir(state) / name
    link.symlink_to(target)
    os.utime(link, (0, 0), follow_symlinks=False)  # old by its own mtime
    return link


def test_purge_retry_and_cancel_never_act_through_a_symlink(
    spool: SpoolLayout, config: SpoolConfig, tmp_path: Path
) -> None:
    """Entries that are symlinks (to a directory full of someone's files) are never
    followed: retry writes no run record into it, cancel no cancel file, purge removes
    the link and nothing it points to."""
    uid = new_token()
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "job.yaml").write_text(yaml.safe_dump(command_job()))
    (victim / "keep").write_text("k")
    before = sorted(os.listdir(victim))
    _entry_symlink(spool, "failed", f"f1.{uid}", victim)
    _entry_symlink(spool, "running", f"r1.{uid}.{new_token()}", victim)

    with pytest.raises(SpoolrenderError):
        retry(config, "f1")  # nothing to retry: the link is no job directory
    assert sorted(os.listdir(victim)) == before
    assert os.listdir(spool.retry) == []
    with pytest.raises(SpoolrenderError, match="no queued or running job"):
        cancel(config, "r1", "test")
    assert sorted(os.listdir(victim)) == before

    done_link = _entry_symlink(spool, "done", f"d1.{uid}", victim)
    assert purge(config, 3600) == [f"done/d1.{uid}", f"failed/f1.{uid}"]
    assert not os.path.lexists(done_link)
    assert sorted(os.listdir(victim)) == before


@needs_root
def test_a_dropped_directory_fails_with_a_record_and_is_never_moved_into_failed(
    member_spool: SpoolLayout, start_member_runner: Callable[..., Any]
) -> None:
    """Review 2: a member's ``incoming/d.yaml/`` was renamed into running/ and kept as
    ``failed/<entry>/submitted.yaml/``, still theirs: a directory they could write in
    inside a runner-owned state directory. Now it fails with a record that says what it
    was, in an entry the runner made, and is removed from incoming/."""
    spool = member_spool
    dropped = spool.incoming / "d.yaml"
    as_member("mkdir", "-m", "0755", str(dropped))
    as_member("mkdir", str(dropped / "sub"))
    os.utime(dropped, (1, 1))
    start_member_runner("--drain").wait(timeout=120)
    (entry,) = os.listdir(spool.failed)
    failure = json.loads((spool.failed / entry / "failure.json").read_text())
    assert (failure["kind"], failure["reason"]) == ("invalid-job", "job file: expected a regular file, got a directory")
    assert not os.path.lexists(dropped)
    for path in [spool.failed / entry, *(spool.failed / entry).iterdir()]:
        assert os.lstat(path).st_uid == os.geteuid(), path
    planted = as_member("touch", str(spool.failed / entry / "planted-by-member"), check=False)
    assert planted.returncode != 0


def test_purge_removes_a_tree_deeper_than_the_recursion_limit(spool: SpoolLayout, config: SpoolConfig) -> None:
    """Review 2: shutil.rmtree recursed per level, so a tree 1,500 levels deep in a failed/
    entry (left by an older version's evidence) ended every purge in RecursionError. The
    removal is iterative; a symlink in it is unlinked, never followed."""
    outside = spool.root.parent / "outside"
    outside.mkdir()
    (outside / "keep").write_text("kept")
    entry = spool.failed / f"deep.{new_token()}"
    entry.mkdir()
    fd = os.open(entry, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(1500):
            os.mkdir("a", dir_fd=fd)
            child = os.open("a", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = child
        os.symlink(outside, "link", dir_fd=fd)
    finally:
        os.close(fd)
    purge(config, 0)
    assert os.listdir(spool.failed) == [] and (outside / "keep").read_text() == "kept"


def test_tree_removal_works_with_two_descriptors(tmp_path: Path) -> None:
    """The walk holds at most ``max_fds`` descriptors whatever the depth: levels whose
    descriptor was closed are opened again by name (checked to be the same directory)."""
    top = tmp_path / "top"
    (top / "a" / "b" / "c" / "d" / "e").mkdir(parents=True)
    (top / "a" / "b" / "c" / "f").write_text("x")
    parent = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        remove_tree_at(parent, "top", max_fds=2)
    finally:
        os.close(parent)
    assert not top.exists()
