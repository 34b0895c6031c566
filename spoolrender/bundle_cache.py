"""The Remotion bundle cache: bundle the project once per content, for every process on the host.

Key: a SHA-256 over the Remotion project's sources, package files, lockfile and bundle
script, so editing a composition or upgrading a package builds a new bundle and nothing
else does (a cron-started ``run --drain`` reuses the bundle of the previous run).

Build: under a per-key filelock (two processes needing the same bundle build it once;
the second waits and reuses it), into a private temporary directory that is renamed into
place only when the build succeeded, so a failed or killed build is never cached.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import subprocess
from pathlib import Path

from filelock import FileLock

from spoolrender.errors import RenderError
from spoolrender.layout import new_token

log = logging.getLogger(__name__)

HASHED_FILES = (
    "package.json",
    "package-lock.json",
    "tsconfig.json",
    "remotion.config.ts",
    "worker/bundle.mjs",
)
HASHED_DIRS = ("src", "public")
BUILD_TIMEOUT_S = 600


def project_hash(project: Path) -> str:
    digest = hashlib.sha256()
    paths: list[Path] = [project / name for name in HASHED_FILES]
    for d in HASHED_DIRS:
        root = project / d
        if root.is_dir():
            paths.extend(p for p in root.rglob("*") if p.is_file())
    for path in sorted(paths):
        if not path.is_file():
            continue
        # The relative name is hashed too: renaming a file changes the bundle.
        digest.update(str(path.relative_to(project)).encode() + b"\0")
        digest.update(path.read_bytes())
        digest.update(b"\0")
    return digest.hexdigest()[:24]


def ensure_bundle(project: Path, cache_dir: Path, log_path: Path | None = None) -> Path:
    """The bundle directory for ``project``'s current content, building it if needed."""
    if not (project / "node_modules").is_dir():
        raise RenderError(
            f"{project}/node_modules is missing: run `npm ci` in the Remotion project (scripts/setup.sh does)",
            transient=True,
            kind="setup",
        )
    key = project_hash(project)
    bundles = cache_dir.expanduser() / "bundles"
    target = bundles / key
    if (target / "index.html").is_file():
        return target
    bundles.mkdir(parents=True, exist_ok=True)
    # One lock for all builds on the host: one build per content however many runners
    # and slots start at once, and never two webpack runs sharing node_modules/.cache.
    with FileLock(bundles / ".build.lock", timeout=BUILD_TIMEOUT_S):
        if (target / "index.html").is_file():
            return target  # built by someone else while we waited
        building = bundles / f".{key}.{new_token()}.building"
        log.info("bundling %s into %s", project, target)
        env = {**os.environ, "TMPDIR": str(bundles)}
        try:
            proc = subprocess.run(
                ["node", str(project / "worker" / "bundle.mjs"), "--out", str(building)],
                cwd=project,
                env=env,
                capture_output=True,
                timeout=BUILD_TIMEOUT_S,
                check=False,
                start_new_session=True,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            shutil.rmtree(building, ignore_errors=True)
            raise RenderError(f"bundling the Remotion project failed: {exc}", transient=True, kind="bundle") from exc
        if log_path is not None:
            with open(log_path, "ab") as fh:
                fh.write(proc.stdout + proc.stderr)
        if proc.returncode != 0 or not (building / "index.html").is_file():
            shutil.rmtree(building, ignore_errors=True)
            tail = (proc.stderr or proc.stdout).decode("utf-8", "replace").strip().splitlines()[-3:]
            raise RenderError(
                f"bundling the Remotion project failed (exit {proc.returncode}): {' | '.join(tail)}",
                transient=True,
                kind="bundle",
            )
        # Only a complete build gets the key's name: rename is atomic, so readers see
        # no bundle or a whole one.
        os.rename(building, target)
        return target
