"""The bundle build lock belongs to the project (what webpack writes into), not to a
spoolrender bundle cache: two spools with their own cache_dir on one Remotion project
must never run webpack at once on its node_modules/.cache."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

from filelock import FileLock, Timeout
from support.processes import MEMBER_UID, as_member

from spoolrender.renderers.remotion.bundle_cache import BUILD_LOCK_NAME, build_lock


def project(root: Path, node_modules: Path | None = None) -> Path:
    root.mkdir(parents=True)
    (root / "package.json").write_text("{}")
    if node_modules is None:
        (root / "node_modules").mkdir()
    else:
        (root / "node_modules").symlink_to(node_modules)
    return root


def blocked(held: FileLock, other: FileLock) -> bool:
    """Whether ``other`` cannot be taken while ``held`` is (flock: per open file, so two
    FileLock objects of one process exclude each other like two processes)."""
    with held:
        try:
            other.acquire(timeout=0)
        except Timeout:
            return True
        other.release()
        return False


def test_two_bundle_caches_on_one_project_share_one_lock(tmp_path: Path) -> None:
    shared = project(tmp_path / "project")
    first, second = build_lock(shared, tmp_path / "cache-a"), build_lock(shared, tmp_path / "cache-b")
    assert Path(first.lock_file) == shared / "node_modules" / ".cache" / BUILD_LOCK_NAME
    assert blocked(first, second)


def test_projects_on_one_node_modules_tree_share_its_lock(tmp_path: Path) -> None:
    tree = tmp_path / "installed" / "node_modules"
    tree.mkdir(parents=True)
    one, two = project(tmp_path / "one", tree), project(tmp_path / "two", tree)
    first, second = build_lock(one, tmp_path / "cache"), build_lock(two, tmp_path / "other-cache")
    assert Path(first.lock_file) == Path(second.lock_file) == tree / ".cache" / BUILD_LOCK_NAME
    assert blocked(first, second)


def test_projects_of_their_own_build_at_once(tmp_path: Path) -> None:
    one, two = project(tmp_path / "one"), project(tmp_path / "two")
    cache = tmp_path / "cache"
    assert not blocked(build_lock(one, cache / "bundles"), build_lock(two, cache / "bundles"))


def test_without_a_writable_node_modules_the_cache_locks(tmp_path: Path) -> None:
    broken = project(tmp_path / "project")
    (broken / "node_modules").rmdir()
    (broken / "node_modules").write_text("not a directory")  # webpack could not cache here either
    bundles = tmp_path / "cache" / "bundles"
    bundles.mkdir(parents=True)
    lock = build_lock(broken, bundles)
    assert Path(lock.lock_file) == bundles / ".build.lock"
    assert blocked(lock, build_lock(broken, bundles))


def test_every_user_who_can_write_the_webpack_cache_takes_its_lock() -> None:
    # A project the render group shares: node_modules/.cache writable by every member. The
    # first builder (root here) makes the lock file; another member (uid 65534) must lock
    # that file too, not fall back to its own cache's lock and run webpack at once on the
    # one cache. In a directory every uid can traverse (pytest's tmp is 0700).
    base = Path(tempfile.mkdtemp(prefix="spoolrender-lock-"))
    try:
        os.chmod(base, 0o755)
        shared = project(base / "project")
        (shared / "node_modules" / ".cache").mkdir(mode=0o777)
        os.chmod(shared / "node_modules" / ".cache", 0o777)
        first = build_lock(shared, base / "root-cache")
        theirs = base / "member-cache"
        theirs.mkdir()
        os.chown(theirs, MEMBER_UID, -1)
        code = (
            "import sys; from pathlib import Path; from spoolrender.renderers.remotion.bundle_cache import build_lock; "
        )
        code += "print(build_lock(Path(sys.argv[1]), Path(sys.argv[2])).lock_file)"
        seen = as_member(sys.executable, "-c", code, str(shared), str(theirs)).stdout.strip()
        assert Path(seen) == Path(first.lock_file) == shared / "node_modules" / ".cache" / BUILD_LOCK_NAME
    finally:
        shutil.rmtree(base)


def test_a_lock_file_that_is_a_symlink_is_not_followed(tmp_path: Path) -> None:
    shared = project(tmp_path / "project")
    (shared / "node_modules" / ".cache").mkdir()
    elsewhere = tmp_path / "elsewhere"
    (shared / "node_modules" / ".cache" / BUILD_LOCK_NAME).symlink_to(elsewhere)
    bundles = tmp_path / "cache" / "bundles"
    bundles.mkdir(parents=True)
    assert Path(build_lock(shared, bundles).lock_file) == bundles / ".build.lock"
    assert not elsewhere.exists()


def test_another_users_lock_file_in_a_sticky_cache_is_not_taken() -> None:
    # filelock refuses, when acquired, a lock file under a sticky directory owned by neither
    # this user nor the directory's owner: the build must lock elsewhere, not fail.
    base = Path(tempfile.mkdtemp(prefix="spoolrender-lock-"))
    try:
        os.chmod(base, 0o755)
        shared = project(base / "project")
        (shared / "node_modules" / ".cache").mkdir()
        os.chmod(shared / "node_modules" / ".cache", 0o1777)
        code = (
            "import sys; from pathlib import Path; from spoolrender.renderers.remotion.bundle_cache import build_lock; "
        )
        code += "print(build_lock(Path(sys.argv[1]), Path(sys.argv[2])).lock_file)"
        theirs = base / "member-cache"
        theirs.mkdir()
        os.chown(theirs, MEMBER_UID, -1)
        as_member(sys.executable, "-c", code, str(shared), str(theirs))  # the member's build made it
        assert (shared / "node_modules" / ".cache" / BUILD_LOCK_NAME).stat().st_uid == MEMBER_UID
        bundles = base / "cache" / "bundles"
        bundles.mkdir(parents=True)
        lock = build_lock(shared, bundles)
        with lock:  # acquired: no PermissionError
            assert Path(lock.lock_file) == bundles / ".build.lock"
    finally:
        shutil.rmtree(base)


def test_a_build_lock_held_too_long_is_the_renders_transient_error(tmp_path: Path) -> None:
    import pytest

    from spoolrender.errors import RenderError
    from spoolrender.renderers.remotion.bundle_cache import holding

    path = tmp_path / "node_modules" / ".cache" / BUILD_LOCK_NAME
    path.parent.mkdir(parents=True)
    other_build = FileLock(path)  # flock is per open file: this process counts as another builder
    late = FileLock(path, timeout=0.05)
    with other_build, pytest.raises(RenderError, match=r"held .* for 0\.05 s") as waited, holding(late):
        raise AssertionError("the block must not run without the lock")
    assert waited.value.transient and waited.value.kind == "bundle"
    with holding(FileLock(path, timeout=1)):  # free again: held for the block, released after it
        assert held_elsewhere(path)
    assert not held_elsewhere(path)


def held_elsewhere(path: Path) -> bool:
    probe = FileLock(path)
    try:
        probe.acquire(timeout=0)
    except Timeout:
        return True
    probe.release()
    return False
