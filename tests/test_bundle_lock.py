"""The bundle build lock belongs to the project (what webpack writes into), not to a
spoolrender bundle cache: two spools with their own cache_dir on one Remotion project
must never run webpack at once on its node_modules/.cache."""

from __future__ import annotations

from pathlib import Path

from filelock import FileLock, Timeout

from spoolrender.bundle_cache import BUILD_LOCK_NAME, build_lock


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
