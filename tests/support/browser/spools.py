"""Spools for the server tests: finished jobs written straight into their state, a write token."""

from __future__ import annotations

import json
import os

from spoolrender.spool.layout import SpoolLayout
from support.spool_jobs import write_spool_config

KINDS = ("command-exit", "timeout", "browser-crashed")  # failed entries cycle through these


def finished_entries(layout: SpoolLayout, state: str, count: int, start_time: float, prefix: str = "job") -> None:
    """``count`` finished jobs written straight into done/ or failed/, in the layout the runner
    writes (job.yaml, result.json or failure.json), one second apart: running 10k real renders
    would take an hour; the server only reads these files. Ids: ``<prefix>-0000000``..."""
    for i in range(count):
        job_id, uid = f"{prefix}-{i:07d}", f"{i:012x}"
        d = layout.state_dir(state) / f"{job_id}.{uid}"
        d.mkdir()
        (d / "job.yaml").write_text("renderer: command\ncommand: props\n")
        stamp = d / ("result.json" if state == "done" else "failure.json")
        if state == "done":
            stamp.write_text(json.dumps({"id": job_id, "uid": uid, "output": f"out/{job_id}.txt", "bytes": i}))
        else:
            stamp.write_text(json.dumps({"id": job_id, "uid": uid, "kind": KINDS[i % 3], "reason": f"reason {i}"}))
        os.utime(stamp, (start_time + i, start_time + i))


def with_token(layout: SpoolLayout, token: str, extra: dict[str, object] | None = None) -> None:
    """Write actions on: ``token`` in a private file the spool's config names."""
    token_file = layout.root / "serve-token"
    token_file.write_text(token + "\n")
    token_file.chmod(0o600)
    write_spool_config(layout, {"serve_token_file": "serve-token", **(extra or {})})
