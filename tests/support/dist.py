"""spoolrender's wheel (and sdist) built from a private copy of the checkout.

``python -m build`` on the checkout itself writes ``build/`` and ``spoolrender.egg-info/``
there (setuptools' staging directories, removed and rewritten by every build), so two
builds at once, on two pytest-xdist workers (tests/remotion/test_projects.py and the README's
own-project block of tests/e2e/test_docs_examples.py), race on the same files: a wheel or sdist
missing files, or a build failing on a directory the other removed. A copy per build has
nothing to share.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# What a build never reads, and what is large or a build's own output.
_NOT_COPIED = {".git", ".venv", ".cache", "build", "dist", "site", "spool", ".mypy_cache", ".ruff_cache"}


def _ignore(directory: str, names: list[str]) -> set[str]:
    at_top = Path(directory) == REPO
    return {
        n
        for n in names
        if n in ("node_modules", "__pycache__", ".pytest_cache")
        or n.endswith(".egg-info")
        or (at_top and n in _NOT_COPIED)
    }


def build_dist(outdir: Path, *flags: str, timeout: float = 600) -> None:
    """``python -m build [flags] --outdir outdir`` on a copy of the checkout (next to outdir)."""
    source = outdir.parent / f"{outdir.name}-source"
    shutil.copytree(REPO, source, ignore=_ignore, symlinks=True)
    subprocess.run([sys.executable, "-m", "build", *flags, "--outdir", str(outdir), str(source)], check=True,
                   capture_output=True, timeout=timeout)  # fmt: skip


def build_traces() -> dict[str, int]:
    """Every file a build on the checkout itself writes (``build/``, ``*.egg-info/``) with
    its mtime in ns: unchanged by :func:`build_dist`."""
    roots = [REPO / "build", *REPO.glob("*.egg-info")]
    return {str(p): p.lstat().st_mtime_ns for root in roots if root.exists() for p in [root, *root.rglob("*")]}
