"""SIGKILL at every named step of the protocol, then recover: nothing lost, nothing twice."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from invariants import audit

from spoolrender.failpoints import CRASH_POINTS
from spoolrender.layout import SpoolLayout, init_spool

RENDER_PROPS = Path(__file__).resolve().parent.parent / "programs" / "render_props.py"
CMD = [sys.executable, "-m", "spoolrender.cli"]


def make_spool(tmp_path: Path) -> SpoolLayout:
    layout = init_spool(tmp_path / "spool")
    config = {
        "settle_seconds": 0, "heartbeat_seconds": 0.2, "lease_seconds": 2, "rescan_seconds": 0.3, "slots": 1,
        "backoff_base_seconds": 0.05, "backoff_cap_seconds": 0.1,
        "commands": {"props": [sys.executable, str(RENDER_PROPS), "{output}", "{props_file}"]},
    }  # fmt: skip
    (layout.root / "spoolrender.yaml").write_text(yaml.safe_dump(config))
    return layout


def drain(layout: SpoolLayout, env: dict[str, str] | None = None, *options: str) -> int:
    proc = subprocess.run([*CMD, "run", "--drain", "--spool", str(layout.root), *options],
                          env={**os.environ, **(env or {})}, capture_output=True, timeout=120)  # fmt: skip
    return proc.returncode


@pytest.mark.parametrize("point", CRASH_POINTS)
def test_sigkill_at_each_crash_point_loses_nothing(tmp_path: Path, point: str) -> None:
    layout = make_spool(tmp_path)
    props = {"content": "the one video", "fail_until_attempt": 2 if point.startswith("retry") else 0}
    (layout.incoming / "job.yaml").write_text(
        yaml.safe_dump({"renderer": "command", "command": "props", "props": props})
    )
    if point.startswith("retry"):
        # First attempt fails transiently: the job waits in retry/. The backoff is long so
        # that this drain cannot take the retry itself however slowly it runs (a tiny one
        # made the job due before a slow drain's next scan: it went on to done/ at once).
        long_backoff = ("--set", "backoff_base_seconds=600", "--set", "backoff_cap_seconds=600")
        assert drain(layout, None, *long_backoff) == 0
        assert len(os.listdir(layout.retry)) == 1
        # Due now, as an operator makes it: the next drain claims it from retry/.
        subprocess.run([*CMD, "retry", "job", "--spool", str(layout.root)], check=True, capture_output=True)
    assert drain(layout, {"SPOOLRENDER_CRASH_AT": point}) == -9  # SIGKILLed at the point
    # Restart: drains (as cron would start them) until the job is done; at least one.
    deadline = time.monotonic() + 60
    drain(layout)
    while not os.listdir(layout.done) and time.monotonic() < deadline:
        time.sleep(0.1)
        drain(layout)
    result = audit(layout, {"job"}, output_ok={"job": b"the one video"})
    assert result.ok, result.problems()
    assert result.where["job"] == ["done"]
    (entry,) = os.listdir(layout.done)
    record = json.loads((layout.done / entry / "result.json").read_text())
    outcomes = [r["outcome"] for r in record["runs"]]
    assert outcomes[-1] == "publishing" and outcomes.count("publishing") == 1, outcomes
