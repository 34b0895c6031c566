"""A finished job whose record cannot be removed is reported as kept, with why, by `purge
--older-than` and by retention, never counted as purged (the purge goes on past it)."""

from __future__ import annotations

import array
import contextlib
import fcntl
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from spoolrender.cli import main
from spoolrender.config.spool_config import load_config
from spoolrender.ops.purge import Purged, purge, purge_older
from spoolrender.ops.retention import apply_retention
from spoolrender.ops.retention_lease import RetentionPolicy
from spoolrender.spool.layout import SpoolLayout
from spoolrender.spool.spooldir import DirHandle

FS_IOC_GETFLAGS = 0x80086601
FS_IOC_SETFLAGS = 0x40086602
FS_IMMUTABLE_FL = 0x10


def _set_immutable(path: Path, on: bool) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        flags = array.array("i", [0])
        fcntl.ioctl(fd, FS_IOC_GETFLAGS, flags, True)
        flags[0] = flags[0] | FS_IMMUTABLE_FL if on else flags[0] & ~FS_IMMUTABLE_FL
        fcntl.ioctl(fd, FS_IOC_SETFLAGS, flags, True)
    finally:
        os.close(fd)


@contextlib.contextmanager
def unremovable(entry: Path) -> Iterator[None]:
    """``entry`` (a job directory) cannot be removed while the block runs: a file in it is
    immutable for root (chattr +i), the directory unwritable for anyone else."""
    pinned = entry / "result.json"
    if os.geteuid() == 0:
        try:
            _set_immutable(pinned, True)
        except OSError as exc:
            pytest.skip(f"this filesystem has no immutable flag for root to pin a file with: {exc}")
        try:
            yield
        finally:
            _set_immutable(pinned, False)
    else:
        entry.chmod(0o500)
        try:
            yield
        finally:
            entry.chmod(0o700)


def old_entry(spool: SpoolLayout, state: str, name: str, age_seconds: float = 7200) -> Path:
    path = spool.root / state / name
    path.mkdir()
    (path / "result.json").write_text("{}")
    then = time.time() - age_seconds
    os.utime(path, (then, then))
    return path


def test_purge_reports_an_unremovable_record_as_kept_and_fails(
    spool: SpoolLayout, capsys: pytest.CaptureFixture[str]
) -> None:
    pinned = old_entry(spool, "done", "pinned.0001")
    old_entry(spool, "done", "gone.0002")
    old_entry(spool, "failed", "bad.0003")
    with unremovable(pinned):
        code = main(["purge", "--older-than", "1h", "--spool", str(spool.root)])
        out = capsys.readouterr().out
        assert pinned.is_dir()
    assert code == 1, out
    assert "done/gone.0002\n" in out and "failed/bad.0003\n" in out
    assert "done/pinned.0001: could not delete its record: Operation not permitted (kept)" in out or (
        "done/pinned.0001: could not delete its record: Permission denied (kept)" in out
    ), out
    assert "purged 2 job(s); 1 could not be removed" in out
    assert sorted(os.listdir(spool.done)) == ["pinned.0001"]
    assert os.listdir(spool.failed) == []


def test_the_api_and_retention_count_only_what_was_removed(spool: SpoolLayout) -> None:
    config = load_config(spool.root)
    pinned = old_entry(spool, "done", "pinned.0001")
    old_entry(spool, "done", "gone.0002")
    with unremovable(pinned):
        assert purge(config, 3600) == ["done/gone.0002"]
        old_entry(spool, "failed", "bad.0003")
        policy = RetentionPolicy(keep_done=3600, keep_failed=3600, keep_done_max=None, keep_failed_max=None)
        purged = apply_retention(config, policy)
    assert purged["done"].removed == () and [entry for entry, _ in purged["done"].kept] == ["done/pinned.0001"]
    assert purged["failed"].removed == ("failed/bad.0003",) and purged["failed"].kept == ()
    # Once it can be removed, the next purge does.
    assert purge_older(config, 3600).removed == ("done/pinned.0001",)


def test_retention_by_age_and_count_reports_an_unremovable_record_once(spool: SpoolLayout) -> None:
    """Kept by the age limit and then beyond the count limit too: one record kept, not two (the
    warning's count and list were of attempts, not of records)."""
    config = load_config(spool.root)
    pinned = old_entry(spool, "done", "pinned.0001")
    old_entry(spool, "done", "gone.0002")
    with unremovable(pinned):
        policy = RetentionPolicy(keep_done=3600, keep_failed=None, keep_done_max=0, keep_failed_max=None)
        purged = apply_retention(config, policy)
    assert purged["done"].removed == ("done/gone.0002",)
    assert [entry for entry, _ in purged["done"].kept] == ["done/pinned.0001"]


def test_a_record_removed_meanwhile_by_another_purge_is_neither_purged_nor_kept(
    spool: SpoolLayout, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The race is narrow (another purge removes the entry between this one's stat and its
    removal), so the other purge is played by rmtree itself: it removes the tree, then fails
    as the loser of that race does (ENOENT at its first open)."""
    config = load_config(spool.root)
    old_entry(spool, "done", "raced.0001")
    real_rmtree = DirHandle.rmtree

    def lose_the_race(self: DirHandle, name: str) -> None:
        real_rmtree(self, name)
        raise FileNotFoundError(2, "No such file or directory", name)

    monkeypatch.setattr(DirHandle, "rmtree", lose_the_race)
    assert purge_older(config, 3600) == Purged()
