"""A Remotion job's props checked with its composition's own zod schema, at submit time.

The schema is a zod object (zod 3 or 4) that lives only in the bundle's page, and may
hold refinements no JSON Schema can express, so it is called where it lives: Node opens
the project's cached bundle in Chromium (``worker/check-props.mjs``) and the page runs
``schema.safeParseAsync`` on the default props with the job's props over them, as Remotion
Studio does. What the schema accepts is accepted (a plain ``z.object`` strips keys it
does not know; they pass). The render worker runs the same check before the first frame,
so this one only tells the person submitting sooner. It never bundles: without a cached
bundle (and listing) of the project's current content nothing is checked here.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from spoolrender import defaults
from spoolrender.errors import SpoolrenderError
from spoolrender.renderers.remotion.bundle_cache import last_json_object
from spoolrender.renderers.remotion.project import WORKER_DIR


class PropsNotChecked(SpoolrenderError):
    """The schema could not be called (no browser, the page failed, a timeout): the job
    is queued with a warning and the render's own check decides."""


def schema_problems(
    project: Path, bundle: Path, browser_executable: str, composition: str, props: dict[str, Any]
) -> list[str]:
    """Every way ``props`` break ``composition``'s schema, as ``props.a[0].b: message``
    lines (empty: the schema accepts them, or there is none)."""
    if not Path(browser_executable).exists():
        raise PropsNotChecked(f"browser {browser_executable} not found")
    try:
        proc = subprocess.run(
            ["node", str(WORKER_DIR / "check-props.mjs"), "--project", str(project.resolve()),
             "--serve-url", str(bundle), "--composition", composition, "--browser-executable", browser_executable,
             # The page's own time limit, inside ours: its error says what did not come up.
             "--timeout-ms", str(int(defaults.PROPS_CHECK_TIMEOUT_S * 1000 * 0.8))],
            cwd=project.resolve(), input=json.dumps(props).encode(), capture_output=True,
            timeout=defaults.PROPS_CHECK_TIMEOUT_S, check=False, start_new_session=True,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise PropsNotChecked(str(exc)) from exc
    event = last_json_object(proc.stdout)
    if proc.returncode != 0 or event.get("type") != "props":
        tail = proc.stderr.decode("utf-8", "replace").strip().splitlines()[-1:] or [f"exit status {proc.returncode}"]
        raise PropsNotChecked(str(event.get("message") or tail[0])[:300])
    found = event.get("problems")
    if not isinstance(found, list):
        raise PropsNotChecked("no list of problems in the answer")
    return [f"{p.get('path', 'props')}: {p.get('message', '?')}" for p in found if isinstance(p, dict)]
