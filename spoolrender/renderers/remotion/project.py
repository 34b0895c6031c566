"""A user's Remotion project as spoolrender sees it: where Remotion is installed, which
version, and what its bundle depends on.

spoolrender adds nothing to the project: the Node scripts it runs there (``WORKER_DIR``)
ship inside this Python package and load Remotion from the project's own node_modules.
The checks here are the cheap ones Python can do before starting Node, so that a project
that cannot work fails at once with a permanent error naming the fix (a retry would only
fail again: a cron-run ``run --drain`` must exit non-zero instead of parking the job).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from spoolrender.core.vocabulary import FailureKind
from spoolrender.errors import RenderError

WORKER_DIR = Path(__file__).resolve().parent / "worker"

# What the bundle is built from besides the project's own sources.
PROJECT_FILES = (
    "package.json",
    "package-lock.json",
    "npm-shrinkwrap.json",
    "pnpm-lock.yaml",
    "yarn.lock",
    "bun.lock",
    "bun.lockb",
    "tsconfig.json",
    "remotion.config.ts",
    "remotion.config.js",
)
# Never part of a bundle: dependencies, outputs of builds and renders, VCS and tool dirs.
SKIPPED_DIRS = frozenset({"node_modules", "build", "out", "dist", "coverage", "__pycache__"})
LOCKFILES = (("pnpm-lock.yaml", "pnpm install"), ("yarn.lock", "yarn install"), ("bun.lockb", "bun install"),
             ("bun.lock", "bun install"), ("package-lock.json", "npm ci"))  # fmt: skip


def setup_error(message: str) -> RenderError:
    """A project problem no retry can fix: the job fails for good and says what to run."""
    return RenderError(message, transient=False, kind=FailureKind.SETUP)


def install_command(project: Path) -> str:
    for name, command in LOCKFILES:
        if (project / name).is_file():
            return command
    return "npm install"


def remotion_version(project: Path) -> str | None:
    """The version of ``remotion`` that Node would load from ``project``: the first
    ``node_modules/remotion`` of the project or an ancestor (workspaces hoist there)."""
    for d in (project, *project.parents):
        manifest = d / "node_modules" / "remotion" / "package.json"
        try:
            version = json.loads(manifest.read_bytes()).get("version")
        except (OSError, ValueError):
            continue
        return str(version) if version else None
    return None


def check_project(project: Path) -> str:
    """The project's Remotion version; a permanent ``setup`` error when it has none."""
    if not project.is_dir():
        raise setup_error(
            f"the Remotion project {project} does not exist: "
            "set remotion_project (or its entry in projects:) in spoolrender.yaml"
        )
    if not (project / "package.json").is_file():
        raise setup_error(
            f"{project} is not a Remotion project: it has no package.json "
            "(set remotion_project or its entry in projects:)"
        )
    version = remotion_version(project)
    if version is None:
        where = "it has no remotion package" if (project / "node_modules").is_dir() else "its node_modules is missing"
        raise setup_error(f"Remotion is not installed in {project}: {where}; run `{install_command(project)}` there")
    return version


def _source_files(project: Path, skip: set[Path]) -> list[tuple[str, int, int]]:
    """(relative path, size, mtime) of the files a bundle may be built from.

    Stat, not content: this runs before every job, and a project's public/ may hold
    gigabytes of media. Dot-dirs, dependency and output dirs are skipped, and so are
    directories that are a spool (a spool inside the project must not rebundle per job).
    """
    found = []
    for root, dirs, files in os.walk(project):
        here = Path(root)
        dirs[:] = sorted(
            d for d in dirs
            if not d.startswith(".") and d not in SKIPPED_DIRS and here / d not in skip
            and not (here / d / "spoolrender.yaml").is_file()
        )  # fmt: skip
        for name in files:
            path = here / name
            try:
                st = path.stat()
            except OSError:
                continue  # removed meanwhile
            found.append((str(path.relative_to(project)), st.st_size, st.st_mtime_ns))
    return sorted(found)


def bundle_key(project: Path, version: str, cache_dir: Path) -> str:
    """The bundle cache key: the Remotion version, the package and config files' content,
    the bundling scripts, and every source file's name, size and mtime."""
    digest = hashlib.sha256(f"remotion {version}\0".encode())
    for name in PROJECT_FILES:
        path = project / name
        if path.is_file():
            digest.update(name.encode() + b"\0" + path.read_bytes() + b"\0")
    for script in sorted(WORKER_DIR.glob("*.mjs")):
        digest.update(script.name.encode() + b"\0" + script.read_bytes() + b"\0")
    for rel, size, mtime in _source_files(project, {cache_dir.resolve()}):
        digest.update(f"{rel}\0{size}\0{mtime}\0".encode())
    return digest.hexdigest()[:24]
