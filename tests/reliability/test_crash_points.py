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
from support.chunk_jobs import FRAMES_CONFIG, chunk_leftovers, frames_job, video

from spoolrender.core.failpoints import CHUNK_CRASH_POINTS, CRASH_POINTS
from spoolrender.spool.layout import RETRY_NAME, SpoolLayout, init_spool, retry_name

RENDER_PROPS = Path(__file__).resolve().parent.parent / "programs" / "render_props.py"
CMD = [sys.executable, "-m", "spoolrender.cli"]


CONFIG = {
    "settle_seconds": 0, "heartbeat_seconds": 0.2, "lease_seconds": 2, "rescan_seconds": 0.3, "slots": 1,
    "backoff_base_seconds": 0.05, "backoff_cap_seconds": 0.1,
    "commands": {"props": [sys.executable, str(RENDER_PROPS), "{output}", "{props_file}"]},
}  # fmt: skip


def make_spool(tmp_path: Path, **overrides: object) -> SpoolLayout:
    layout = init_spool(tmp_path / "spool")
    (layout.root / "spoolrender.yaml").write_text(yaml.safe_dump({**CONFIG, **overrides}))
    return layout


# A drain of one job takes about a second; the deadlines only count on a host far past its
# cores (a full run on 4 pytest-xdist workers beside other developers: load average 95).
DRAIN_TIMEOUT_S = 600
RECOVERY_DEADLINE_S = 300


def drain(layout: SpoolLayout, env: dict[str, str] | None = None) -> int:
    proc = subprocess.run([*CMD, "run", "--drain", "--spool", str(layout.root)], env={**os.environ, **(env or {})},
                          capture_output=True, timeout=DRAIN_TIMEOUT_S)  # fmt: skip
    return proc.returncode


@pytest.mark.parametrize("point", CRASH_POINTS)
def test_sigkill_at_each_crash_point_loses_nothing(tmp_path: Path, point: str) -> None:
    retry_first = point.startswith("retry")
    # A long backoff first, so that the first drain cannot run the retry itself.
    layout = (
        make_spool(tmp_path, backoff_base_seconds=600, backoff_cap_seconds=600) if retry_first else make_spool(tmp_path)
    )
    props = {"content": "the one video", "fail_until_attempt": 2 if retry_first else 0}
    (layout.incoming / "job.yaml").write_text(
        yaml.safe_dump({"renderer": "command", "command": "props", "props": props})
    )
    if retry_first:
        assert drain(layout) == 0  # first attempt fails transiently: the job waits in retry/
        (entry,) = os.listdir(layout.retry)
        m = RETRY_NAME.fullmatch(entry)
        assert m is not None
        os.rename(layout.retry / entry, layout.retry / retry_name("job", m.group("uid"), time.time(), 0))  # due now
        (layout.root / "spoolrender.yaml").write_text(yaml.safe_dump(CONFIG))
    assert drain(layout, {"SPOOLRENDER_CRASH_AT": point}) == -9  # SIGKILLed at the point
    # Restart: drains (as cron would start them) until the job is done; at least one.
    deadline = time.monotonic() + RECOVERY_DEADLINE_S
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


def _drain_until_done(layout: SpoolLayout) -> None:
    """Restart drains (as cron would start them) until the job is done; at least one."""
    deadline = time.monotonic() + RECOVERY_DEADLINE_S
    drain(layout)
    while not os.listdir(layout.done) and time.monotonic() < deadline:
        time.sleep(0.1)
        drain(layout)


@pytest.mark.parametrize("point", CHUNK_CRASH_POINTS)
def test_sigkill_at_each_step_of_a_split_job_loses_nothing(tmp_path: Path, point: str) -> None:
    layout = make_spool(
        tmp_path,
        commands={**CONFIG["commands"], **FRAMES_CONFIG["commands"]},  # type: ignore[dict-item]
        command_chunks=FRAMES_CONFIG["command_chunks"],
    )
    (layout.incoming / "job.yaml").write_text(yaml.safe_dump(frames_job(3, frames=30)))
    assert drain(layout, {"SPOOLRENDER_CRASH_AT": point}) == -9  # SIGKILLed at the step
    # A job killed before queueing its chunks is woken by the sweep a lease (2 s) later.
    _drain_until_done(layout)
    result = audit(layout, {"job"}, output_ok={"job": video(30).encode()})
    assert result.ok, result.problems()
    assert result.where["job"] == ["done"]
    (entry,) = os.listdir(layout.done)
    outcomes = [r["outcome"] for r in json.loads((layout.done / entry / "result.json").read_text())["runs"]]
    assert outcomes[-1] == "publishing" and outcomes.count("publishing") == 1, outcomes
    assert "split" in outcomes
    assert chunk_leftovers(layout, layout.root / "output") == []


@pytest.mark.parametrize("then", [None, "retry-claim-before-copy"])
def test_a_claim_killed_before_its_copy_gives_the_file_back_to_be_scanned_as_itself(
    tmp_path: Path, then: str | None
) -> None:
    """SIGKILL between the claim rename and the private copy: the claim never compared the
    file with what the scan parsed, and its submitter can rewrite it meanwhile (here: another
    id, other props). Recovery re-queued it under the scanned id, and the retry claim (killed
    before its copy too, ``then``) copied whatever the file held: published as ``alpha`` from
    ``beta``'s bytes. Now the file goes back to incoming/ and is claimed again as itself."""
    layout = make_spool(tmp_path)
    job = {"renderer": "command", "command": "props", "props": {"content": "alpha video"}}
    (layout.incoming / "alpha.yaml").write_text(yaml.safe_dump(job))
    assert drain(layout, {"SPOOLRENDER_CRASH_AT": "claim-after-rename"}) == -9
    (submitted,) = layout.running.glob("*/submitted.yaml")
    with open(submitted, "r+b") as fh:  # in place: the submitter owns the inode
        fh.truncate(0)
        fh.write(yaml.safe_dump({**job, "id": "beta", "props": {"content": "beta video"}}).encode())
    if then is not None:
        drain(layout, {"SPOOLRENDER_CRASH_AT": then})  # reached only if the claim went on to retry/
    _drain_until_done(layout)
    result = audit(layout, {"beta"}, output_ok={"beta": b"beta video"})
    assert result.ok, result.problems()
    assert result.where == {"beta": ["done"]}, result.where
    (entry,) = os.listdir(layout.done)
    assert json.loads((layout.done / entry / "result.json").read_text())["runs"][0]["outcome"] == "publishing"
