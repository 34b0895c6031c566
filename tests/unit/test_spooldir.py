"""spoolrender.spool.spooldir: directory descriptors never follow a swapped name (issue 20, item 6)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from spoolrender.config.queues import NAME
from spoolrender.spool.held_dirs import HeldDir
from spoolrender.spool.queue_dirs import QUEUE_DIR_MODE, IncomingView, add_queue_dir, entry_dir, open_queue_dir
from spoolrender.spool.spooldir import DirHandle, SpoolPathRefused

OTHER_UID = 65534  # nobody: a spool-group member, for ownership (chown needs root)
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="chown to another uid needs root")


@pytest.fixture
def root(tmp_path: Path) -> Iterator[DirHandle]:
    (tmp_path / "d").mkdir()
    with DirHandle.open(tmp_path) as handle:
        yield handle


def test_open_refuses_a_symlink_and_a_file(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    (tmp_path / "file").write_text("x")
    for name in ("link", "file"):
        with pytest.raises(SpoolPathRefused, match="symlink or not a directory"):
            DirHandle.open(tmp_path / name)


def test_sub_refuses_symlinks_names_that_walk_and_wrong_owners(root: DirHandle, tmp_path: Path) -> None:
    (tmp_path / "sw").symlink_to(tmp_path / "d")
    with pytest.raises(SpoolPathRefused):
        root.sub("sw")
    for bad in ("d/..", "..", ".", "", "a/b"):
        with pytest.raises(SpoolPathRefused, match="not a single file name"):
            root.sub(bad)
    with pytest.raises(SpoolPathRefused, match="owned by uid"):
        root.sub("d", owners={os.geteuid() + 1})
    with root.sub("d", owners={os.geteuid()}) as d:
        assert d.names() == []


def test_a_swap_after_open_changes_nothing(root: DirHandle, tmp_path: Path) -> None:
    """The point of descriptors: the directory checked is the directory used."""
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "job.yaml").write_text("secret")
    with root.sub("d") as d:
        d.write_file("job.yaml", b"mine", durable=False)
        os.rename(tmp_path / "d", tmp_path / "d.old")
        (tmp_path / "d").symlink_to(tmp_path / "elsewhere")
        assert d.read_file("job.yaml", 100)[0] == b"mine"
        d.unlink("job.yaml")
    assert (tmp_path / "elsewhere" / "job.yaml").read_text() == "secret"


def test_files_are_never_followed_and_reads_are_capped(root: DirHandle, tmp_path: Path) -> None:
    (tmp_path / "secret").write_text("root only")
    (tmp_path / "link").symlink_to(tmp_path / "secret")
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(OSError):  # ELOOP
        root.read_file("link", 100)
    with pytest.raises(SpoolPathRefused, match="not a regular file"):
        root.read_file("fifo", 100)  # O_NONBLOCK: does not hang
    with pytest.raises(SpoolPathRefused, match="larger than 4 bytes"):
        root.read_file("secret", 4)
    data, st = root.read_file("secret", 100)
    assert data == b"root only" and st.st_size == 9
    assert root.stat("link").st_mode & 0o170000 == 0o120000  # the link itself


def test_rename_noreplace_and_rmtree(root: DirHandle, tmp_path: Path) -> None:
    (tmp_path / "a").write_text("a")
    (tmp_path / "b").write_text("b")
    with pytest.raises(FileExistsError):
        root.rename("a", root, "b", replace=False)
    assert (tmp_path / "b").read_text() == "b"
    root.rename("a", root, "c", replace=False)
    root.rename("c", root, "b")
    assert (tmp_path / "b").read_text() == "a"
    (tmp_path / "victim").mkdir()
    (tmp_path / "victim" / "keep").write_text("k")
    with root.mkdir("tree", 0o2755) as tree:
        assert os.fstat(tree.fd).st_mode & 0o7777 == 0o2755
        with tree.mkdir("sub", 0o755) as sub:
            sub.write_file("f", b"x", durable=False)
        os.symlink(tmp_path / "victim", tmp_path / "tree" / "link")
    root.rmtree("tree")
    assert not (tmp_path / "tree").exists()
    assert (tmp_path / "victim" / "keep").read_text() == "k"


def _incoming(tmp_path: Path) -> Path:
    incoming = tmp_path / "incoming"
    incoming.mkdir()
    os.chmod(incoming, 0o3775)
    return incoming


def _queue_name(name: str) -> bool:
    return NAME.fullmatch(name) is not None


@needs_root
def test_a_member_made_queue_dir_is_not_honoured(tmp_path: Path) -> None:
    incoming = _incoming(tmp_path)
    (incoming / "top.yaml").write_text("a")
    for name, uid, mode in (("ops", 0, QUEUE_DIR_MODE), ("q1", OTHER_UID, 0o2775), ("open", 0, 0o777)):
        (incoming / name).mkdir()
        os.chown(incoming / name, uid, -1)
        os.chmod(incoming / name, mode)
        (incoming / name / "j.yaml").write_text("x")
    (incoming / "sw").symlink_to(incoming / "ops")
    with IncomingView.open(incoming, _queue_name) as listing:
        assert sorted(listing.names) == ["ops/j.yaml", "sw", "top.yaml"]
        assert "incoming/q1 is owned by uid 65534, not by the runner" in listing.refused["q1"]
        assert "spoolrender queue add q1" in listing.refused["q1"]
        assert "not sticky" in listing.refused["open"]
        with pytest.raises(SpoolPathRefused, match="owned by uid"):
            open_queue_dir(listing.incoming, "q1")
        with pytest.raises(SpoolPathRefused):
            open_queue_dir(listing.incoming, "sw")
        with pytest.raises(SpoolPathRefused, match="not listed"):
            listing.where("q1/j.yaml")
    assert (incoming / "q1" / "j.yaml").exists()  # refused, not deleted


def test_a_swap_of_a_queue_dir_after_the_listing_changes_nothing(tmp_path: Path) -> None:
    """Listing, then the queue dir swapped for a symlink, then the use: the listed one,
    through its descriptor (the view), or refused (a fresh look, entry_dir)."""
    incoming = _incoming(tmp_path)
    (incoming / "q1").mkdir()
    (incoming / "q1" / "x.yaml").write_text("mine")
    (tmp_path / "victim").mkdir()
    (tmp_path / "victim" / "x.yaml").write_text("someone else's")
    with IncomingView.open(incoming, _queue_name) as listing:
        assert listing.names == ["q1/x.yaml"]
        os.rename(incoming / "q1", tmp_path / "q1.aside")
        (incoming / "q1").symlink_to(tmp_path / "victim")
        where, base = listing.where("q1/x.yaml")
        assert where.read_file(base, 100)[0] == b"mine"
        assert listing.anchored("q1/x.yaml").read_text() == "mine"
        with pytest.raises(SpoolPathRefused), entry_dir(listing.incoming, "q1/x.yaml"):
            pass
        with entry_dir(listing.incoming, "top.yaml") as (top, name):
            assert top is listing.incoming and name == "top.yaml"
    assert (tmp_path / "victim" / "x.yaml").read_text() == "someone else's"


@needs_root
def test_queue_add_makes_queue_dirs_with_the_rules_of_incoming(tmp_path: Path) -> None:
    from spoolrender.cli.main import main

    spool = tmp_path / "spool"
    assert main(["init", str(spool), "--queue", "urgent"]) == 0
    incoming = spool / "incoming"
    st = os.stat(incoming / "urgent")
    assert (st.st_mode & 0o7777, st.st_uid, st.st_gid) == (QUEUE_DIR_MODE, os.geteuid(), os.stat(incoming).st_gid)
    (incoming / "batch").mkdir(mode=0o775)  # the operator's own mkdir: kept, mode fixed
    os.chmod(incoming / "batch", 0o775)
    (incoming / "theirs").mkdir()
    os.chown(incoming / "theirs", OTHER_UID, -1)
    assert add_queue_dir(incoming, "batch") == "kept"
    assert os.stat(incoming / "batch").st_mode & 0o7777 == QUEUE_DIR_MODE
    with pytest.raises(SpoolPathRefused, match=r"owned by uid 65534.*move its files to incoming/ and remove it"):
        add_queue_dir(incoming, "theirs")
    assert main(["queue", "add", "batch", "--spool", str(spool)]) == 0
    with IncomingView.open(incoming, _queue_name) as listing:
        assert set(listing.refused) == {"theirs"}


def test_a_held_dir_is_reused_until_its_name_is_another_directory(tmp_path: Path) -> None:
    """The runner holds incoming/ and running/ open (one lstat per pass, no open per job);
    a directory the operator made anew under the name is opened again, never the old one
    used, and a symlink put there is refused."""
    path = tmp_path / "incoming"
    path.mkdir()
    held = HeldDir(path)
    try:
        first = held.get()
        (path / "a.yaml").write_text("x")
        assert held.get() is first and first.exists("a.yaml")
        os.rename(path, tmp_path / "incoming.old")  # a restore renames a copy into place
        path.mkdir()
        assert held.get() is first, "checked once per pass: the same handle until recheck()"
        held.recheck()
        again = held.get()
        assert again is not first and first.fd == -1 and not again.exists("a.yaml")
        held.recheck()
        path.rmdir()
        os.symlink(tmp_path / "incoming.old", path)
        with pytest.raises(SpoolPathRefused):
            held.get()
        assert again.fd == -1
        os.unlink(path)
        held.recheck()
        with pytest.raises(FileNotFoundError):
            held.get()
    finally:
        held.drop()
