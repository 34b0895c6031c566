"""Trees removed on a thread of their own (spoolrender.spool.background_removal): the tree goes,
never through a symlink, one removal per tree at a time, and a removal that fails or finds
the tree gone is logged, not raised; the thread ends (joined here before the test ends)."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from spoolrender.spool import background_removal
from spoolrender.spool.background_removal import remove_tree, removing
from spoolrender.spool.tree_removal import remove_tree_at


def join_removal(name: str) -> None:
    for thread in threading.enumerate():
        if thread.name == f"remove {name}":
            thread.join(60)
            assert not thread.is_alive()


def tree(root: Path) -> Path:
    (root / "a" / "b").mkdir(parents=True)
    (root / "a" / "b" / "file").write_bytes(b"x")
    (root / "a" / "link").symlink_to("/")
    return root


def test_a_tree_is_removed_and_a_second_removal_waits_for_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tree(tmp_path / "parked")
    started, go_on = threading.Event(), threading.Event()
    real: Callable[[int, str], None] = remove_tree_at

    def slow(fd: int, name: str) -> None:  # a removal that hangs (a frozen host's locks)
        started.set()
        go_on.wait(60)
        real(fd, name)

    monkeypatch.setattr(background_removal, "remove_tree_at", slow)
    assert remove_tree(tmp_path, "parked")
    assert started.wait(60)
    assert removing(tmp_path, "parked")
    assert not remove_tree(tmp_path, "parked")  # under way: nothing more started
    assert not removing(tmp_path, "other")
    go_on.set()
    join_removal("parked")
    assert not removing(tmp_path, "parked")
    assert not (tmp_path / "parked").exists()
    assert os.path.isdir("/")  # its symlink was removed, not followed


def test_a_parent_swapped_for_a_symlink_removes_nothing_elsewhere(tmp_path: Path) -> None:
    tree(tmp_path / "elsewhere" / "parked")
    (tmp_path / "abandoned").symlink_to(tmp_path / "elsewhere")
    assert remove_tree(tmp_path / "abandoned", "parked")
    join_removal("parked")
    assert (tmp_path / "elsewhere" / "parked" / "a" / "b" / "file").exists()
    assert not removing(tmp_path / "abandoned", "parked")  # ended, and may be tried again


def test_a_tree_gone_meanwhile_is_no_error(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    assert remove_tree(tmp_path, "never-there")
    join_removal("never-there")
    assert not removing(tmp_path, "never-there")
    assert "could not remove" not in caplog.text
