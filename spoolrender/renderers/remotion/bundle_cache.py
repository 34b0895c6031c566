"""The Remotion bundle cache: bundle the project once per content, for every process on the host.

Key (:func:`~spoolrender.renderers.remotion.project.bundle_key`): the project's Remotion
version, its package, lock and config files, spoolrender's bundling scripts, and its
sources, so editing a composition, remotion.config.ts or upgrading Remotion builds a new
bundle and nothing else does (a cron-started ``run --drain`` reuses the bundle of the
previous run).

Build: ``bundle.mjs`` (shipped in this package) runs the project's own ``remotion
bundle`` when @remotion/cli is installed, so remotion.config.ts counts, and stores the
config's render defaults in the bundle. Under the project's build lock (:func:`build_lock`:
two processes needing the same bundle build it once, the second waits and reuses it, and
no two builds of one project run webpack at once, whichever bundle caches they fill), into
a private temporary directory that is renamed into place only when the build succeeded,
so a failed or killed build is never cached.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import shutil
import stat
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from spoolrender.core.vocabulary import FailureKind
from spoolrender.errors import RenderError
from spoolrender.renderers.remotion.project import WORKER_DIR, bundle_key, check_project, setup_error
from spoolrender.spool.layout import new_token

log = logging.getLogger(__name__)

BUILD_TIMEOUT_S = 600
# Beside webpack's own cache (node_modules/.cache/webpack), in the directory webpack writes.
BUILD_LOCK_NAME = "spoolrender-bundle.lock"


def build_lock(project: Path, bundles: Path) -> FileLock:
    """The lock every build of ``project``'s bundle holds, in the project's
    node_modules/.cache (by its real path), or in ``bundles`` when that cannot be written.

    The lock belongs to the project, not to this bundle cache: what two builds must not
    share is webpack's persistent cache, which Remotion's bundler keeps in
    ``<project>/node_modules/.cache/webpack`` (the first directory up from the project
    with a package.json: the project itself) whatever spoolrender's cache_dir is. A lock
    under cache_dir let two spools (two configs, two caches) on one project run webpack
    at once on that one cache. By its real path, so projects whose node_modules is one
    tree (a symlink) share it, as they share webpack's cache. When the directory cannot be
    made or written, webpack (run as this user) cannot write its cache there either, so
    the only thing left to serialize is this cache's own one-build-per-content (so too
    when the lock file there is a symlink: never followed, whoever planted it).
    """
    webpack_parent = (project / "node_modules").resolve() / ".cache"
    try:
        # What webpack would create at its first build anyway.
        webpack_parent.mkdir(parents=True, exist_ok=True)
        _open_lock_file(webpack_parent / BUILD_LOCK_NAME)
    except OSError as exc:
        log.debug("no build lock in %s (%s): locking in %s", webpack_parent, exc, bundles)
        return FileLock(bundles / ".build.lock", timeout=BUILD_TIMEOUT_S)
    return FileLock(webpack_parent / BUILD_LOCK_NAME, timeout=BUILD_TIMEOUT_S)


def _open_lock_file(path: Path) -> None:
    """Make sure ``path`` exists and this user can lock it (OSError if not), writable by
    whoever may write the directory it is in.

    Whoever can write webpack's cache beside it must be able to take the lock: a lock file
    of the first builder's 0644 in a group-writable node_modules/.cache (a project the
    render group shares) sent every other member to their own cache's lock, so two users
    ran webpack at once on the one cache the lock is for. The directory's group and other
    write bits are given to the file (fchmod: the umask would take them off), by its owner
    (a file an older version made is fixed by its owner's next build). Not in a sticky
    directory: there filelock refuses a lock file of another owner than us or the
    directory's (its owner could replace it during a hold), so such a file is refused here
    (OSError: this cache's lock instead) rather than failing the build when acquired.
    """
    directory = os.stat(path.parent)
    sticky = bool(directory.st_mode & stat.S_ISVTX)
    mode = 0o644 if sticky else 0o644 | (directory.st_mode & (stat.S_IWGRP | stat.S_IWOTH))
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, mode)
    try:
        found = os.fstat(fd)
        if sticky and found.st_uid not in (os.geteuid(), directory.st_uid):
            raise PermissionError(errno.EACCES, "another user's lock file in a sticky directory", str(path))
        if found.st_uid == os.geteuid() and stat.S_IMODE(found.st_mode) != mode:
            os.fchmod(fd, mode)
    finally:
        os.close(fd)


def bundle_dir(project: Path, cache_dir: Path) -> Path:
    """Where the bundle of ``project``'s current content is (or would be) cached."""
    project = project.resolve()
    key = bundle_key(project, check_project(project), cache_dir.expanduser())
    return cache_dir.expanduser() / "bundles" / key


def cached_bundle(project: Path, cache_dir: Path) -> Path | None:
    """The cached bundle of ``project``'s current content, or None when none is built."""
    target = bundle_dir(project, cache_dir)
    return target if (target / "index.html").is_file() else None


def ensure_bundle(project: Path, cache_dir: Path, log_path: Path | None = None) -> Path:
    """The bundle directory for ``project``'s current content, building it if needed."""
    target = bundle_dir(project, cache_dir)
    if (target / "index.html").is_file():
        return target
    project = project.resolve()
    bundles, key = target.parent, target.name
    bundles.mkdir(parents=True, exist_ok=True)
    # The project's lock (build_lock says why it is not this cache's): one build per
    # content however many runners and slots start at once, and never two webpack runs
    # sharing the project's node_modules/.cache.
    with holding(build_lock(project, bundles)):
        if (target / "index.html").is_file():
            return target  # built by someone else while we waited
        building = bundles / f".{key}.{new_token()}.building"
        log.info("bundling %s into %s", project, target)
        env = {**os.environ, "TMPDIR": str(bundles)}
        try:
            proc = subprocess.run(
                ["node", str(WORKER_DIR / "bundle.mjs"), "--project", str(project), "--out", str(building)],
                cwd=project,
                env=env,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=BUILD_TIMEOUT_S,
                check=False,
                start_new_session=True,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            shutil.rmtree(building, ignore_errors=True)
            raise RenderError(
                f"bundling the Remotion project failed: {exc}", transient=True, kind=FailureKind.BUNDLE
            ) from exc
        if log_path is not None:
            with open(log_path, "ab") as fh:
                fh.write(proc.stdout + proc.stderr)
        if proc.returncode != 0 or not (building / "index.html").is_file():
            shutil.rmtree(building, ignore_errors=True)
            raise _bundle_failure(proc)
        # Only a complete build gets the key's name: rename is atomic, so readers see
        # no bundle or a whole one.
        os.rename(building, target)
        return target


@contextmanager
def holding(lock: FileLock) -> Iterator[None]:
    """``lock`` held for the block; a lock that cannot be had is the render's RenderError
    (transient: retried later), never an internal error that leaves the job for recovery."""
    try:
        lock.acquire()
    except Timeout as exc:
        # Another build (any spool, any user) held it all along: a webpack run that hangs,
        # a build far slower than BUILD_TIMEOUT_S, or a queue of builds of the projects
        # whose node_modules is this one tree (they share webpack's cache, so this lock).
        why = (
            f"another bundle build held {lock.lock_file} for {lock.timeout:g} s (one webpack build at "
            "a time per node_modules/.cache: projects sharing one node_modules tree take turns)"
        )
        raise RenderError(
            f"bundling the Remotion project waited too long: {why}", transient=True, kind=FailureKind.BUNDLE
        ) from exc
    except OSError as exc:  # refused by filelock's checks, or an unwritable lock directory
        why = f"cannot take the build lock {lock.lock_file}: {exc.strerror or exc}"
        raise RenderError(
            f"bundling the Remotion project failed: {why}", transient=True, kind=FailureKind.BUNDLE
        ) from exc
    try:
        yield
    finally:
        lock.release()


def last_json_object(stdout: bytes) -> dict[str, Any]:
    """The last line of a Node script's stdout that is a JSON object ({} if none): its
    protocol line, whatever the script's dependencies printed before it."""
    for line in reversed(stdout.decode("utf-8", "replace").splitlines()):
        try:
            parsed = json.loads(line)
        except ValueError:
            continue
        if isinstance(parsed, dict):
            return parsed
    return {}


def _bundle_failure(proc: subprocess.CompletedProcess[bytes]) -> RenderError:
    """The error of a failed build, from bundle.mjs's one JSON line. A ``setup`` failure
    (a package or the CLI missing) is permanent; a compile error may be fixed by the next
    deploy of the project, so it is retried."""
    event = last_json_object(proc.stdout)
    message = str(event.get("message") or "")
    if event.get("kind") == FailureKind.SETUP:
        return setup_error(message)
    if not message:
        tail = (proc.stderr or proc.stdout).decode("utf-8", "replace").strip().splitlines()[-3:]
        message = " | ".join(tail)
    return RenderError(
        f"bundling the Remotion project failed (exit {proc.returncode}): {message}",
        transient=True,
        kind=FailureKind.BUNDLE,
    )
