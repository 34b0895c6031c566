"""`spoolrender init`: finding the Remotion project a new spool renders with, and recording it.

A spool whose ``remotion_project`` silently points at a directory that does not exist
fails its first Remotion job long after set-up, far from the person who could fix it.
So ``init`` takes the project (``--remotion-project DIR``), or finds one where people keep
it (beside the spool as in this repository, or the directory ``init`` runs in), records
it explicitly in ``spoolrender.yaml``, and otherwise says plainly that there is none.
"""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path

from spoolrender import defaults
from spoolrender.errors import ConfigError
from spoolrender.spool.durable import write_atomic

_SETTING = re.compile(r"^remotion_project[ \t]*:.*$", re.MULTILINE)


def project_problem(directory: Path) -> str | None:
    """Why ``directory`` is not a Remotion project, or None if it is one."""
    if not directory.is_dir():
        return f"{directory} is not a directory"
    try:
        manifest = json.loads((directory / "package.json").read_text(encoding="utf-8"))
    except FileNotFoundError:
        return f"{directory} has no package.json (a Remotion project has one)"
    except (OSError, ValueError) as exc:
        return f"{directory}/package.json is unreadable: {exc}"
    deps: dict[str, object] = {}
    for key in ("dependencies", "devDependencies"):
        section = manifest.get(key) if isinstance(manifest, dict) else None
        if isinstance(section, dict):
            deps.update(section)
    if "remotion" not in deps:
        return f"{directory}/package.json does not depend on remotion"
    return None


def install_hint(directory: Path) -> str | None:
    """What to run before ``directory`` can render, or None if its packages are installed."""
    if (directory / "node_modules" / "@remotion" / "renderer").is_dir():
        return None
    return f"its packages are not installed yet: run `npm ci` (or npm install) in {directory}"


def configured_project(config_path: Path) -> str | None:
    """The ``remotion_project`` line's value if the config file sets it, else None."""
    try:
        text = config_path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    m = _SETTING.search(text)
    return m.group(0).split(":", 1)[1].strip() if m else None


def detect_project(spool: Path, cwd: Path) -> Path | None:
    """A Remotion project where one is usually kept: beside the spool, or the current directory."""
    for candidate in (spool.parent / "remotion", cwd):
        if project_problem(candidate) is None:
            return candidate.resolve()
    return None


def record_project(spool: Path, project: Path) -> None:
    """Set ``remotion_project`` in the spool's config file, keeping every other line."""
    config_path = spool / defaults.CONFIG_FILENAME
    mode = 0o644
    try:
        text = config_path.read_text(encoding="utf-8")
        mode = stat.S_IMODE(os.stat(config_path).st_mode)  # keep an operator's 0640
    except FileNotFoundError:
        text = ""
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{config_path}: cannot read: {exc}") from exc
    # A project beside the spool is recorded relative to it (config paths are relative to
    # the spool), so the pair still works when the whole tree moves or is mounted elsewhere.
    value = os.path.relpath(project, spool) if project.parent == spool.parent else str(project)
    line = f"remotion_project: {json.dumps(value)}"  # JSON strings are YAML strings
    if _SETTING.search(text):
        text = _SETTING.sub(lambda _: line, text, count=1)
    else:
        text = (text if not text or text.endswith("\n") else text + "\n") + line + "\n"
    # Written whole and renamed: a runner reading the config never sees half of it.
    write_atomic(config_path, text.encode("utf-8"), mode=mode)
