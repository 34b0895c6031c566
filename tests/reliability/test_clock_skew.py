"""Skewed and stepped wall clocks never make a retry early, starve it, or defeat retry
elsewhere (issue 21 item 3): due times are on the spool filesystem's clock.

Each "host" is a runner in its own UTS and PID namespace (test_hosts.Host). A host's wall
clock is moved by a ``sitecustomize`` module (Python's ``time.time`` only: its monotonic
clock and the kernel's file times stay sound, as on a real host with a wrong clock);
libfaketime is not used because under it ``threading.Event().wait`` never returns here
(docs/reliability.md, "Skewed clocks in tests"). The offset is read from a file, so the
test can step the clock while the runner runs. Real time comes from ``date`` in the
render command, which the module does not touch.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from test_hosts import Host, _can_simulate, wait_until

from spoolrender.spool.layout import init_spool

pytestmark = pytest.mark.skipif(_can_simulate() is not None, reason=str(_can_simulate()))

DAY = 86400.0
# For conditions that come within seconds on an idle host; generous for a host far past its
# cores (a full run on 4 pytest-xdist workers beside other developers: load average 95).
WAIT_S = 300.0
SKEW_MODULE = """\
import time
_time, _time_ns, _mono = time.time, time.time_ns, time.monotonic
_state = [0.0, -1.0]  # the offset, and when to read its file again (monotonic)


def _offset():
    if _mono() >= _state[1]:
        try:
            with open({path!r}) as fh:
                _state[0] = float(fh.read() or 0)
        except (OSError, ValueError):
            pass
        _state[1] = _mono() + 0.1
    return _state[0]


time.time = lambda: _time() + _offset()
time.time_ns = lambda: _time_ns() + int(_offset() * 1e9)
"""
# argv: OUTPUT JOB ATTEMPT MARKER. Attempt 1 fails (EX_TEMPFAIL: transient) after a second,
# so that each host takes first attempts; every start is logged with the real time.
RENDER = (
    'echo "$(date +%s.%N) $(hostname) $2 $3" >> "$4"; '
    'if [ "$3" -lt 2 ]; then sleep 1; echo "flaky on $(hostname)"; exit 75; fi; echo ok > "$1"'
)
BACKOFF = 6.0  # equal jitter: the retry is due 3-6 s after the failure


def skewed_python(directory: Path, offset: float) -> tuple[dict[str, str], Path]:
    """A PYTHONPATH whose sitecustomize moves the wall clock by the number in a file."""
    directory.mkdir()
    offset_file = directory / "offset"
    offset_file.write_text(repr(offset))
    (directory / "sitecustomize.py").write_text(SKEW_MODULE.format(path=str(offset_file)))
    return {"PYTHONPATH": str(directory)}, offset_file


def starts(marker: Path) -> dict[tuple[str, int], tuple[float, str]]:
    """(job, attempt) -> (real time the render started, host)."""
    out = {}
    for line in marker.read_text().splitlines():
        at, host, job, attempt = line.split()
        out[(job, int(attempt))] = (float(at), host)
    return out


def spool_due(job_dir: Path) -> float:
    """When run 1's retry was due on the spool's clock: its decided delay after its mtime."""
    path = job_dir / "run-0001.json"
    record = json.loads(path.read_text())
    return path.stat().st_mtime + float(record["due"]) - float(record["ended"])


def status(spool: Path, env: dict[str, str], *args: str) -> str:
    return subprocess.run(
        [sys.executable, "-m", "spoolrender.cli", "status", *args, "--spool", str(spool)],
        capture_output=True, text=True, check=True, timeout=WAIT_S, env={**os.environ, **env},
    ).stdout  # fmt: skip


def test_a_day_ahead_and_a_stepped_clock_neither_run_retries_early_nor_starve_them(tmp_path: Path) -> None:
    layout = init_spool(tmp_path / "spool")
    marker = tmp_path / "starts.txt"
    config = {
        "settle_seconds": 0.3, "heartbeat_seconds": 0.3, "lease_seconds": 8, "rescan_seconds": 0.5,
        "poll_seconds": 0.3, "backoff_base_seconds": BACKOFF, "backoff_cap_seconds": BACKOFF, "slots": 2,
        "retry_elsewhere_seconds": 120, "host_block_jobs": 50,
        "commands": {"flaky": ["sh", "-c", RENDER, "sh", "{output}", "{job_id}", "{attempt}", str(marker)]},
    }  # fmt: skip
    (layout.root / "spoolrender.yaml").write_text(yaml.safe_dump(config))
    ahead_env, offset_file = skewed_python(tmp_path / "ahead", DAY)
    log = tmp_path / "hosts.log"
    # Claims held until both hosts are up: then each takes first attempts.
    (layout.private / "paused").write_text("test: wait for both hosts\n")
    jobs = [f"j{i}" for i in range(4)]
    for job in jobs:
        (layout.incoming / f"{job}.yaml").write_text(yaml.safe_dump({"renderer": "command", "command": "flaky"}))
    hosts = [Host("host-ok", layout.root, log), Host("host-ahead", layout.root, log, env=ahead_env)]
    try:
        wait_until(lambda: len(list(layout.runners.glob("*.json"))) == 2, timeout=WAIT_S)
        (layout.private / "paused").unlink()
        wait_until(lambda: len(os.listdir(layout.retry)) == len(jobs), timeout=WAIT_S)
        # Mid-backoff, host-ahead's clock is stepped forward another day.
        offset_file.write_text(repr(2 * DAY))
        # status on a host a day ahead shows due times as they are, on the spool's clock.
        shown: dict[str, Any] = json.loads(status(layout.root, ahead_env, "--json"))
        assert shown["retry"] and all(-1 <= r["due_in_seconds"] <= BACKOFF + 1 for r in shown["retry"])
        offsets = {r["host"]: r["clock_offset_seconds"] for r in shown["runners"]}
        # host-ahead's beacon was written a day or (after the step) two days ahead.
        assert abs(offsets["host-ok"]) < 5 and min(abs(offsets["host-ahead"] - d) for d in (DAY, 2 * DAY)) < 5, offsets
        text = status(layout.root, ahead_env)
        # Two days measured a moment short of them read "48.0h" (status shows days from 48 h).
        said = r"CLOCK host host-ahead: its wall clock is (24\.0h|48\.0h|2\.0d) ahead of the spool's"
        assert re.search(said, text), text
        assert "CLOCK host host-ok" not in text
        wait_until(lambda: len(os.listdir(layout.done)) == len(jobs), timeout=WAIT_S)
    finally:
        for h in hosts:
            h.stop()
    seen = starts(marker)
    first_hosts = {seen[(job, 1)][1] for job in jobs}
    assert first_hosts == {"host-ok", "host-ahead"}, seen  # each host failed some first attempts
    for entry in os.listdir(layout.done):
        job = entry.rsplit(".", 1)[0]
        due = spool_due(layout.done / entry)
        (first_at, first_on), (second_at, second_on) = seen[(job, 1)], seen[(job, 2)]
        # Never early on any host (ext4 stamps mtimes from a coarse tick: 20 ms of slack).
        assert second_at >= due - 0.02, (job, first_on, second_on, second_at - due)
        # Retried elsewhere although a host's clock is off: the other host took it...
        assert second_on != first_on, (job, first_on, second_on)
        # ...soon after it was due, not a day later (a loaded machine: generous).
        assert second_at - due < 20, (job, first_on, second_on, second_at - due)
        assert 3 - 0.05 <= due - first_at <= BACKOFF + 3, (job, due - first_at)
