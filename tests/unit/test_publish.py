"""Publishing rendered files under the output root, and the durable file primitives."""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath

import pytest

from spoolrender.errors import PublishError
from spoolrender.spool.durable import create_exclusive, write_atomic
from spoolrender.spool.publish import (
    SCRATCH_DIR,
    Published,
    RenderedFile,
    output_exists,
    publish_output,
    scratch_dir,
)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    out = tmp_path / "output"
    out.mkdir()
    return out


def rendered(root: Path, data: bytes = b"new video", job_key: str = "clip.aaaaaaaaaaaa") -> Path:
    """A finished render in the job's scratch dir, as the executor leaves it."""
    scratch = scratch_dir(root, job_key)
    scratch.mkdir(parents=True, exist_ok=True)
    temp = scratch / "output.mp4"
    temp.write_bytes(data)
    return temp


def tree(path: Path) -> list[str]:
    """Every path below ``path``, relative, sorted (symlinks listed, not followed)."""
    out = []
    for dirpath, dirnames, filenames in os.walk(path):
        for name in dirnames + filenames:
            out.append(os.path.relpath(os.path.join(dirpath, name), path))
    return sorted(out)


# --- scratch dir -----------------------------------------------------------------------


def test_scratch_dir_is_hidden_under_output_root_and_named_without_the_id(root: Path) -> None:
    path = scratch_dir(root, "clip.abc.def")
    assert path.parent == root / SCRATCH_DIR and "clip" not in path.name
    assert path == scratch_dir(root, "clip.abc.def") != scratch_dir(root, "clip.abc.deg")  # recovery recomputes it
    assert SCRATCH_DIR.startswith(".")


# --- publishing ------------------------------------------------------------------------


def test_publish_creates_parent_dirs(root: Path) -> None:
    temp = rendered(root)
    ino, mtime_ns = temp.stat().st_ino, temp.stat().st_mtime_ns
    rel = PurePosixPath("campaign/2026/q1/clip.mp4")
    assert output_exists(root, rel) is False
    result = publish_output(root, rel, temp, replace=False)
    final = root / "campaign" / "2026" / "q1" / "clip.mp4"
    assert result == Published(final, len(b"new video"), ino, mtime_ns)
    assert final.read_bytes() == b"new video"
    assert final.stat().st_ino == ino
    assert not temp.exists()
    assert output_exists(root, rel) is True


def test_publish_at_top_level(root: Path) -> None:
    temp = rendered(root, b"x" * 1000)
    result = publish_output(root, PurePosixPath("clip.mp4"), temp, replace=False)
    assert result.path == root / "clip.mp4"
    assert result.bytes == 1000
    assert (root / "clip.mp4").read_bytes() == b"x" * 1000


def test_output_exists_does_not_create_dirs(root: Path) -> None:
    assert output_exists(root, PurePosixPath("a/b/c.mp4")) is False
    assert tree(root) == []


def test_output_exists_sees_any_kind_of_entry(root: Path, tmp_path: Path) -> None:
    (root / "dir.mp4").mkdir()
    (root / "dangling.mp4").symlink_to(tmp_path / "nowhere")
    assert output_exists(root, PurePosixPath("dir.mp4")) is True
    assert output_exists(root, PurePosixPath("dangling.mp4")) is True


def test_publish_refuses_to_clobber_existing_output(root: Path) -> None:
    final = root / "clip.mp4"
    final.write_bytes(b"old video")
    temp = rendered(root)
    with pytest.raises(PublishError) as info:
        publish_output(root, PurePosixPath("clip.mp4"), temp, replace=False)
    assert info.value.transient is False
    assert "'clip.mp4' already exists" in str(info.value)
    assert "rerun: true" in str(info.value)
    assert final.read_bytes() == b"old video"
    assert temp.read_bytes() == b"new video"


def test_publish_replace_replaces(root: Path) -> None:
    (root / "sub").mkdir()
    final = root / "sub" / "clip.mp4"
    final.write_bytes(b"old video")
    temp = rendered(root)
    ino, mtime_ns = temp.stat().st_ino, temp.stat().st_mtime_ns
    result = publish_output(root, PurePosixPath("sub/clip.mp4"), temp, replace=True)
    assert result == Published(final, len(b"new video"), ino, mtime_ns)
    assert final.read_bytes() == b"new video"
    assert not temp.exists()


def test_publish_replace_without_existing_output(root: Path) -> None:
    temp = rendered(root)
    publish_output(root, PurePosixPath("new/clip.mp4"), temp, replace=True)
    assert (root / "new" / "clip.mp4").read_bytes() == b"new video"


def test_publish_after_interrupted_link_is_idempotent(root: Path) -> None:
    # The first publish linked the file and died before removing the temp name.
    temp = rendered(root)
    ino, mtime_ns = temp.stat().st_ino, temp.stat().st_mtime_ns
    os.link(temp, root / "clip.mp4")
    result = publish_output(root, PurePosixPath("clip.mp4"), temp, replace=False)
    assert result == Published(root / "clip.mp4", len(b"new video"), ino, mtime_ns)
    assert not temp.exists()
    assert (root / "clip.mp4").read_bytes() == b"new video"


def test_publish_again_after_completed_publish_with_expected_inode(root: Path) -> None:
    temp = rendered(root)
    first = publish_output(root, PurePosixPath("a/clip.mp4"), temp, replace=False)
    assert not temp.exists()
    for replace in (False, True):
        again = publish_output(
            root,
            PurePosixPath("a/clip.mp4"),
            temp,
            replace=replace,
            expect=RenderedFile(first.inode, first.bytes, None),
        )
        assert again == first
    assert (root / "a" / "clip.mp4").read_bytes() == b"new video"


def test_publish_temp_gone_output_is_someone_elses(root: Path) -> None:
    temp = rendered(root)
    ino = temp.stat().st_ino
    # Created while the temp still exists, so the inode numbers cannot coincide.
    (root / "clip.mp4").write_bytes(b"another job's video")
    temp.unlink()
    assert (root / "clip.mp4").stat().st_ino != ino
    with pytest.raises(PublishError) as info:
        publish_output(
            root, PurePosixPath("clip.mp4"), temp, replace=False, expect=RenderedFile(ino, len(b"new video"), None)
        )
    assert info.value.transient is True
    assert "vanished before publishing" in str(info.value)
    assert (root / "clip.mp4").read_bytes() == b"another job's video"


def test_publish_done_is_recognised_by_size_and_mtime_when_inode_numbers_differ(root: Path) -> None:
    # Simulated: a local filesystem keeps one inode number per file, so the recorded
    # number is made wrong here, as sshfs makes it for a host other than the recorder
    # (test_fscheck has the same case on real sshfs mounts).
    temp = rendered(root)
    recorded = RenderedFile.of(temp.stat())
    assert recorded.mtime_ns is not None
    other_host = RenderedFile(recorded.inode + 1, recorded.bytes, recorded.mtime_ns)
    first = publish_output(root, PurePosixPath("clip.mp4"), temp, replace=False)
    again = publish_output(root, PurePosixPath("clip.mp4"), temp, replace=False, expect=other_host)
    assert again == first
    # The same numbers differing, but another file: not ours, not published.
    for not_ours in (
        RenderedFile(recorded.inode + 1, recorded.bytes + 1, recorded.mtime_ns),
        RenderedFile(recorded.inode + 1, recorded.bytes, recorded.mtime_ns - 1),
        RenderedFile(recorded.inode + 1, recorded.bytes, None),  # an older version's record
    ):
        with pytest.raises(PublishError, match="vanished before publishing"):
            publish_output(root, PurePosixPath("clip.mp4"), temp, replace=False, expect=not_ours)


def test_rendered_file_mtime_in_whole_seconds_matches_on_the_second(root: Path) -> None:
    # SFTP carries whole seconds: one side of the comparison may have lost the fraction.
    temp = rendered(root)
    os.utime(temp, ns=(0, 1_700_000_000_250_000_000))
    st = temp.stat()
    assert RenderedFile(st.st_ino + 1, st.st_size, 1_700_000_000_000_000_000).matches(st)
    assert not RenderedFile(st.st_ino + 1, st.st_size, 1_700_000_001_000_000_000).matches(st)
    assert not RenderedFile(st.st_ino + 1, st.st_size, 1_700_000_000_250_000_001).matches(st)
    with pytest.raises(ValueError, match="negative size"):
        RenderedFile(1, -1, None)


def test_publish_temp_gone_and_no_output(root: Path) -> None:
    temp = rendered(root)
    temp.unlink()
    with pytest.raises(PublishError) as info:
        publish_output(root, PurePosixPath("clip.mp4"), temp, replace=False, expect=RenderedFile(12345, 9, None))
    assert info.value.transient is True
    assert not (root / "clip.mp4").exists()


def test_publish_output_root_missing(tmp_path: Path) -> None:
    temp = tmp_path / "t.mp4"
    temp.write_bytes(b"x")
    with pytest.raises(PublishError) as info:
        publish_output(tmp_path / "missing-root", PurePosixPath("clip.mp4"), temp, replace=False)
    assert info.value.transient is True
    assert temp.exists()


# --- hostile trees ---------------------------------------------------------------------


@pytest.mark.parametrize("replace", [False, True])
@pytest.mark.parametrize(
    "rel", ["evil/clip.mp4", "evil/deeper/clip.mp4", "ok/evil/clip.mp4", "ok/evil/deeper/more/clip.mp4"]
)
def test_symlinked_parent_pointing_outside_refused(root: Path, tmp_path: Path, rel: str, replace: bool) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_bytes(b"precious")
    link_dir = root / "ok" if rel.startswith("ok/") else root
    link_dir.mkdir(exist_ok=True)
    (link_dir / "evil").symlink_to(outside, target_is_directory=True)
    before = tree(outside)
    temp = rendered(root)
    with pytest.raises(PublishError) as info:
        publish_output(root, PurePosixPath(rel), temp, replace=replace)
    assert info.value.transient is False
    assert "'evil' is a symlink or not a directory" in str(info.value)
    assert "outside the output root" in str(info.value)
    assert tree(outside) == before
    assert (outside / "keep.txt").read_bytes() == b"precious"
    assert temp.read_bytes() == b"new video"


def test_output_exists_does_not_follow_symlinked_parent(root: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "clip.mp4").write_bytes(b"not ours")
    (root / "evil").symlink_to(outside, target_is_directory=True)
    with pytest.raises(PublishError) as info:
        output_exists(root, PurePosixPath("evil/clip.mp4"))
    assert info.value.transient is False


def test_symlink_at_final_name_is_not_followed(root: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    victim = outside / "victim.txt"
    victim.write_bytes(b"precious")
    (root / "clip.mp4").symlink_to(victim)
    temp = rendered(root)
    with pytest.raises(PublishError) as info:
        publish_output(root, PurePosixPath("clip.mp4"), temp, replace=False)
    assert info.value.transient is False
    assert victim.read_bytes() == b"precious"
    # A re-run replaces the link itself, never writes through it.
    publish_output(root, PurePosixPath("clip.mp4"), temp, replace=True)
    assert not (root / "clip.mp4").is_symlink()
    assert (root / "clip.mp4").read_bytes() == b"new video"
    assert victim.read_bytes() == b"precious"
    assert tree(outside) == ["victim.txt"]


def test_parent_that_is_a_file_refused(root: Path) -> None:
    (root / "a").write_bytes(b"a file")
    temp = rendered(root)
    with pytest.raises(PublishError) as info:
        publish_output(root, PurePosixPath("a/clip.mp4"), temp, replace=False)
    assert info.value.transient is False
    assert (root / "a").read_bytes() == b"a file"
    assert temp.exists()


@pytest.mark.parametrize("replace", [False, True])
def test_output_name_that_is_a_directory_refused(root: Path, replace: bool) -> None:
    (root / "clip.mp4").mkdir()
    (root / "clip.mp4" / "inside").write_bytes(b"x")
    temp = rendered(root)
    with pytest.raises(PublishError) as info:
        publish_output(root, PurePosixPath("clip.mp4"), temp, replace=replace)
    assert info.value.transient is False
    assert "'clip.mp4'" in str(info.value)
    assert (root / "clip.mp4").is_dir()
    assert tree(root / "clip.mp4") == ["inside"]
    assert temp.read_bytes() == b"new video"


def test_output_name_that_is_an_empty_directory_refused_on_replace(root: Path) -> None:
    (root / "clip.mp4").mkdir()
    temp = rendered(root)
    with pytest.raises(PublishError) as info:
        publish_output(root, PurePosixPath("clip.mp4"), temp, replace=True)
    assert info.value.transient is False
    assert "is a directory" in str(info.value)
    assert (root / "clip.mp4").is_dir()


# --- durable primitives ----------------------------------------------------------------


def test_create_exclusive_first_wins(tmp_path: Path) -> None:
    target = tmp_path / "decision"
    assert create_exclusive(target, b"first") is True
    assert create_exclusive(target, b"second") is False
    assert target.read_bytes() == b"first"
    assert os.listdir(tmp_path) == ["decision"]


def test_create_exclusive_does_not_replace_foreign_file(tmp_path: Path) -> None:
    target = tmp_path / "decision"
    target.write_bytes(b"someone else")
    assert create_exclusive(target, b"mine") is False
    assert target.read_bytes() == b"someone else"
    assert os.listdir(tmp_path) == ["decision"]


def test_create_exclusive_does_not_follow_symlink(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    (tmp_path / "decision").symlink_to(victim)
    assert create_exclusive(tmp_path / "decision", b"mine") is False
    assert victim.read_bytes() == b"precious"
    assert sorted(os.listdir(tmp_path)) == ["decision", "victim"]


@pytest.mark.parametrize("durable", [True, False])
def test_write_atomic_writes_and_replaces_without_leftovers(tmp_path: Path, durable: bool) -> None:
    target = tmp_path / "state.json"
    write_atomic(target, b"one", durable=durable)
    assert target.read_bytes() == b"one"
    write_atomic(target, b"two", durable=durable)
    assert target.read_bytes() == b"two"
    write_atomic(target, b"", durable=durable)
    assert target.read_bytes() == b""
    assert os.listdir(tmp_path) == ["state.json"]


def test_write_atomic_replaces_symlink_not_its_target(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    (tmp_path / "state").symlink_to(victim)
    write_atomic(tmp_path / "state", b"new")
    assert not (tmp_path / "state").is_symlink()
    assert (tmp_path / "state").read_bytes() == b"new"
    assert victim.read_bytes() == b"precious"
    assert sorted(os.listdir(tmp_path)) == ["state", "victim"]


def test_write_atomic_failure_leaves_no_temp(tmp_path: Path) -> None:
    target = tmp_path / "busy"
    target.mkdir()
    (target / "inside").write_bytes(b"x")
    with pytest.raises(OSError):
        write_atomic(target, b"data")
    assert os.listdir(tmp_path) == ["busy"]
    assert os.listdir(target) == ["inside"]


# --- two carriers of one decided record ----------------------------------------------------
# Recovery rolls a decided PUBLISHING run forward; its owner may be alive (its heartbeats
# failed on a full GlusterFS volume in a whole-suite run) and carry out the same record at the
# same moment. Whichever of them publishes first, the other must find the output published,
# never fail the job ("vanished", "already exists") after its video went out.


def _record_of(temp: Path) -> RenderedFile:
    st = temp.stat()
    return RenderedFile(st.st_ino, st.st_size, None)


def test_the_other_carrier_publishes_between_our_stat_and_our_link(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    temp = rendered(root)
    expect = _record_of(temp)
    real_link = os.link

    def other_carrier_first(src: Path, dst: str, **kwargs: object) -> None:
        real_link(temp, root / "clip.mp4")  # its whole publish: link, then the temp name goes
        os.unlink(temp)
        real_link(src, dst, **kwargs)  # type: ignore[arg-type]  # ours: ENOENT, the temp is gone

    monkeypatch.setattr(os, "link", other_carrier_first)
    result = publish_output(root, PurePosixPath("clip.mp4"), temp, replace=False, expect=expect)
    assert result.path == root / "clip.mp4" and result.inode == expect.inode
    assert (root / "clip.mp4").read_bytes() == b"new video"


def test_the_other_carrier_removes_the_temp_name_after_our_link_met_its_own(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    temp = rendered(root)
    expect = _record_of(temp)
    real_link = os.link

    def other_links_first_and_unlinks_after_ours(src: Path, dst: str, **kwargs: object) -> None:
        real_link(temp, root / "clip.mp4")
        try:
            real_link(src, dst, **kwargs)  # type: ignore[arg-type]  # ours: EEXIST, its link
        finally:
            os.unlink(temp)  # its unlink, before ours

    monkeypatch.setattr(os, "link", other_links_first_and_unlinks_after_ours)
    result = publish_output(root, PurePosixPath("clip.mp4"), temp, replace=False, expect=expect)
    assert result.inode == expect.inode
    assert not temp.exists() and (root / "clip.mp4").read_bytes() == b"new video"


def test_the_other_carrier_replaces_first_on_a_rerun(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (root / "clip.mp4").write_bytes(b"old video")
    temp = rendered(root)
    expect = _record_of(temp)
    real_rename = os.rename

    def other_carrier_first(src: Path, dst: str, **kwargs: object) -> None:
        real_rename(temp, root / "clip.mp4")
        real_rename(src, dst, **kwargs)  # type: ignore[arg-type]  # ours: ENOENT

    monkeypatch.setattr(os, "rename", other_carrier_first)
    result = publish_output(root, PurePosixPath("clip.mp4"), temp, replace=True, expect=expect)
    assert result.inode == expect.inode and (root / "clip.mp4").read_bytes() == b"new video"


def test_a_temp_gone_mid_publish_with_someone_elses_output_is_still_refused(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    temp = rendered(root)
    expect = _record_of(temp)
    real_link = os.link

    def vanished(src: Path, dst: str, **kwargs: object) -> None:
        os.unlink(temp)
        (root / "clip.mp4").write_bytes(b"another job's video")
        real_link(src, dst, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "link", vanished)
    with pytest.raises(PublishError, match="vanished before publishing"):
        publish_output(root, PurePosixPath("clip.mp4"), temp, replace=False, expect=expect)
    assert (root / "clip.mp4").read_bytes() == b"another job's video"
