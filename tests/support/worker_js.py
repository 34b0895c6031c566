"""Calling a function of the Node worker's modules (spoolrender/renderers/remotion/worker/*.mjs) from a test:
one ``node`` process (about 50 ms) that imports the module, evaluates a JavaScript
function body with the module as ``m`` and ``input`` as the given JSON, and prints what
it returns as JSON. For the workers' pure rules (classifying a failure, reading a
node_modules tree), which need neither Remotion nor a browser."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

WORKER = Path(__file__).resolve().parents[2] / "spoolrender" / "renderers" / "remotion" / "worker"
NODE_TIMEOUT_S = 60.0  # one import and one call, on a loaded host


def call_worker(module: str, body: str, input: Any = None) -> Any:
    """``body`` (a function body: ``return ...``) run with ``m`` = ``worker/<module>``."""
    script = (
        f"import * as m from {json.dumps((WORKER / module).as_uri())};\n"
        f"const input = JSON.parse(process.argv[1]);\n"
        f"const out = await (async () => {{ {body} }})();\n"
        "process.stdout.write(JSON.stringify(out === undefined ? null : out));\n"
    )
    proc = subprocess.run(["node", "--input-type=module", "-e", script, json.dumps(input)],
                          capture_output=True, text=True, timeout=NODE_TIMEOUT_S, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)
