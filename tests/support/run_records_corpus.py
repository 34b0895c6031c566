"""Run records of every error shape spoolrender writes, made by the real code (no subprocess).

One spool in a temporary directory, one slot, spoolrender.testing's FakeRenderer: jobs that
fail for good (with a kind of spoolrender's and with a renderer's own), run out of attempts,
time out, are refused (unparsable, too big, output taken, chunks asked of a renderer that
cannot split), are cancelled by ``spoolrender cancel`` (ops/control.py), are retried and then done;
the recoverer's records of a dead owner (runner-died with attempts left and without, a
spool I/O stop, an abandoned claim); and a decided publish that cannot be carried out (the
follow-up record of transitions.carry_out). Every ``run-NNNN.json``, ``failure.json`` and
``result.json`` is collected, with what varies per run (times, pids, tokens, uids, the
host, temporary paths) replaced by fixed values, so that two versions of the code can be
compared record by record (tests/unit/test_run_error.py does, against
tests/data/run_records.json, which this module wrote with the code before RunError).

Regenerate, from the repository root (only when a change of the records is meant)::

    PYTHONPATH=tests .venv/bin/python -m support.run_records_corpus tests/data/run_records.json
"""

from __future__ import annotations

import json
import logging
import random
import re
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from spoolrender import Spool, defaults
from spoolrender.lifecycle.recovery import Recoverer
from spoolrender.lifecycle.transitions import carry_out
from spoolrender.runner.loop import Runner
from spoolrender.spool.clock import SystemClock
from spoolrender.spool.heartbeat import HOSTNAME, Heartbeat
from spoolrender.spool.layout import SpoolLayout
from spoolrender.spool.records import PUBLISHING, RUN_FILE, RunRecord, decide
from spoolrender.testing import Fail, FakeRenderer, Hang, Succeed, make_spool

QUICK: dict[str, Any] = {
    "slots": 1,
    "settle_seconds": 0.05,
    "heartbeat_seconds": 0.2,
    "lease_seconds": 5.0,
    "rescan_seconds": 0.2,
    "backoff_base_seconds": 0.01,
    "backoff_cap_seconds": 0.02,
    "max_job_bytes": 4096,
}
_TIMES = {"started", "ended", "due", "failed_at", "finished", "duration_seconds", "clock_offset_seconds"}
_FILE_IDS = {"inode", "mtime_ns"}  # of a scratch output
_SCRATCH_KEY = re.compile(r"(?<![0-9a-f])[0-9a-f]{32}(?![0-9a-f])")  # a run's scratch directory (a uuid4's hex)


def _job(job_id: str, **extra: Any) -> dict[str, Any]:
    return {"id": job_id, "composition": "Intro", "output": f"{job_id}.mp4", **extra}


def _normalized(value: Any, replace: dict[str, str]) -> Any:
    """``value`` with what differs per run fixed (see the module docstring)."""
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            if key in _TIMES and isinstance(item, int | float) and not isinstance(item, bool):
                out[key] = 0.0
            elif key in _FILE_IDS:
                out[key] = 0
            elif key == "pid":
                out[key] = 1
            elif key in ("token", "uid"):
                out[key] = f"<{key}>"
            else:
                out[key] = _normalized(item, replace)
        return out
    if isinstance(value, list):
        return [_normalized(item, replace) for item in value]
    if isinstance(value, str):
        for old, new in replace.items():
            value = value.replace(old, new)
        return _SCRATCH_KEY.sub("<scratch>", value)
    return value


def _records(spool: Path, replace: dict[str, str]) -> dict[str, Any]:
    """Every record file under ``spool``'s state directories, by ``state/job-id/file``."""
    found: dict[str, Any] = {}
    for state in defaults.STATE_DIRS:
        for entry in sorted((spool / state).glob("*")):
            if not entry.is_dir():
                continue
            job_id = entry.name.split(".")[0]
            for path in sorted(entry.iterdir()):
                if RUN_FILE.fullmatch(path.name) or path.name in (defaults.FAILURE_FILENAME, defaults.RESULT_FILENAME):
                    found[f"{state}/{job_id}/{path.name}"] = _normalized(json.loads(path.read_bytes()), replace)
    return found


def _runner_jobs(config_dir: Path) -> None:
    config = make_spool(config_dir, QUICK)
    fake = FakeRenderer(default=Succeed(size=512))
    fake.script("permanent", Fail("invalid-props", transient=False, message="props: title is required"))
    fake.script("none-left", Fail("worker-died", transient=True, message="the worker died"))
    fake.script("retried", Fail("browser-crashed", message="the browser crashed"), Succeed(size=256))
    fake.script("timed-out", Hang())
    fake.script("own-kind", Fail("render-farm-quota", transient=False, message="over quota"))  # passed through
    spool = Spool(config.spool)
    spool.submit(_job("permanent"), props_check=False)
    spool.submit(_job("none-left", max_attempts=1), props_check=False)
    spool.submit(_job("retried", max_attempts=2), props_check=False)
    spool.submit(_job("timed-out", timeout=0.2, max_attempts=1), props_check=False)
    spool.submit(_job("own-kind"), props_check=False)
    spool.submit(_job("unsplittable", chunks=2), props_check=False)  # the fake renders whole only
    config.output_root.mkdir(parents=True, exist_ok=True)
    (config.output_root / "taken.mp4").write_bytes(b"someone else's")
    incoming = config.spool / "incoming"
    (incoming / "taken.yaml").write_text(yaml.safe_dump(_job("taken")))  # submit would refuse it
    (incoming / "unparsable.yaml").write_text("id: unparsable\ncomposition: [\n")
    (incoming / "too-big.yaml").write_text(yaml.safe_dump(_job("too-big", props={"pad": "x" * 5000})))
    cancelled = spool.submit(_job("cancelled", not_before="2099-01-01T00:00:00Z"), props_check=False)
    cancelled.cancel(by="operator@host")
    Runner(config, drain=True, rng=random.Random(7), make_renderer=fake.factory).run()


def _recovered(spool_dir: Path) -> None:
    """The recoverer's records of dead owners, decided into running/ entries of their own."""
    config = make_spool(spool_dir, QUICK)
    layout = SpoolLayout(config.spool)
    recoverer = Recoverer(layout, config, SystemClock(), random.Random(7))
    one_attempt = yaml.safe_dump(_job("x", max_attempts=1)).encode()
    owner = Heartbeat(host="deadhost", pid=99, token="t", run=1, counter=3)
    full = Heartbeat(host="deadhost", pid=99, token="t", run=1, counter=3, spool_io="No space left on device")
    cases: dict[str, tuple[bytes | None, Callable[[Path], RunRecord]]] = {
        "runner-died-retry": (None, lambda d: recoverer._dead_run_record(d, 1, "t", "its heartbeat stopped", owner)),
        "runner-died-failed": (
            one_attempt,
            lambda d: recoverer._dead_run_record(d, 1, "t", "its heartbeat stopped", owner),
        ),
        "spool-io-requeue": (None, lambda d: recoverer._dead_run_record(d, 1, "t", "its heartbeat stopped", full)),
        "claim-abandoned": (None, lambda d: recoverer._requeue_record(d, 1, "t", "its claim stopped")),
    }
    for name, (job_file, make) in cases.items():
        job_dir = layout.running / f"{name}.case"
        job_dir.mkdir()
        if job_file is not None:
            (job_dir / defaults.JOB_FILENAME).write_bytes(job_file)
        assert decide(job_dir, make(job_dir))
    # A decided publish whose scratch output is gone: carry_out fails the job with a follow-up record.
    job_dir = layout.running / "unpublishable.0000000000000-0000000000-u1-tok"
    job_dir.mkdir()
    record = RunRecord(
        run=1, outcome=PUBLISHING, host="h", pid=1, token="tok", ended=1.0, started=0.5, attempt=1,
        publish={"temp": ".scratch/gone/output.mp4", "output": "unpublishable.mp4", "bytes": 5, "inode": 1,
                 "mtime_ns": 1},
    )  # fmt: skip
    assert decide(job_dir, record)
    carry_out(layout, config.output_root, job_dir, "unpublishable", "u1", record)


def corpus(tmp: Path) -> dict[str, Any]:
    """The normalized records of every case (the module docstring), made under ``tmp``."""
    # The cases' failures are expected: not logged. Only while they run: the level is the
    # process's, and a later test in it that reads the package's log records (caplog) would
    # find none (tests/unit/test_thread_faults.py after test_run_error.py, in one worker).
    package_log = logging.getLogger("spoolrender")
    level = package_log.level
    package_log.setLevel(logging.CRITICAL)
    try:
        found: dict[str, Any] = {}
        replace = {str(tmp): "<tmp>", HOSTNAME: "<host>"}
        _runner_jobs(tmp / "runs")
        found.update({f"runs/{k}": v for k, v in _records(tmp / "runs", replace).items()})
        _recovered(tmp / "recovered")
        found.update({f"recovered/{k}": v for k, v in _records(tmp / "recovered", replace).items()})
    finally:
        package_log.setLevel(level)
    return found


if __name__ == "__main__":
    with tempfile.TemporaryDirectory(prefix="run-records-") as made:
        records = corpus(Path(made))
    Path(sys.argv[1]).write_text(json.dumps(records, indent=2, sort_keys=True) + "\n", encoding="utf-8")
