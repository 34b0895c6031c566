"""spoolrender/job.schema.json against real documents: jobs put in every state by a real
Runner over a temp spool (the fake renderer in this process; the command renderer for a
split job), each read with ``Spool.show`` (``show --json``) and serve's ``GET /jobs/ID``
(:func:`spoolrender.serve.api.job_detail`, the object the route sends), and the bodies the
completion hooks of those jobs were sent."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from referencing import Registry, Resource
from support.chunk_jobs import FRAMES_CONFIG, frames_job
from support.processes import spoolrender_cmd
from support.spool_jobs import drop, write_spool_config
from support.waiting import wait_for

import spoolrender
from spoolrender import Spool
from spoolrender.config.spool_config import SpoolConfig, load_config
from spoolrender.errors import JobFailed
from spoolrender.ops.lookup import JOB_SCHEMA_VERSION
from spoolrender.serve.api import job_detail
from spoolrender.spool.layout import SpoolLayout
from spoolrender.testing import Fail, FakeRenderer, Hang, Succeed, make_spool, running_runner

SCHEMA: dict[str, Any] = json.loads((Path(spoolrender.__file__).parent / "job.schema.json").read_text())
REGISTRY: Registry[Any] = Registry().with_resource(SCHEMA["$id"], Resource.from_contents(SCHEMA))
QUICK: dict[str, Any] = {
    "slots": 3,
    "settle_seconds": 0.1,
    "heartbeat_seconds": 0.2,
    "lease_seconds": 2.0,
    "poll_seconds": 0.1,
    "rescan_seconds": 0.2,
    # A transient failure waits in retry/ for the whole test: its retry state is what is read.
    "backoff_base_seconds": 600,
    "backoff_cap_seconds": 600,
}


def validator(definition: str | None = None) -> jsonschema.Draft202012Validator:
    """The schema's root (``show --json``), or one of its ``$defs`` (``served``, ``hook_body``...)."""
    schema = SCHEMA if definition is None else {"$ref": f"{SCHEMA['$id']}#/$defs/{definition}"}
    return jsonschema.Draft202012Validator(schema, registry=REGISTRY)


SHOW, SERVED, HOOK_BODY, ENTRY = validator(), validator("served"), validator("hook_body"), validator("entry")


def check(config: SpoolConfig, job_id: str, state: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """``show --json`` and ``GET /jobs/ID`` of ``job_id``, which is ``state`` now, each valid."""
    shown = Spool(config.spool).show(job_id)
    SHOW.validate(shown)
    served = job_detail(config, job_id)
    SERVED.validate(served)
    assert shown["state"] == served["state"] == state, (shown, served)
    assert shown["schema"] == served["schema"] == JOB_SCHEMA_VERSION
    ENTRY.validate(Spool(config.spool).job(job_id).show())  # the Python API's Job.show()
    return shown, served


def job(job_id: str, **extra: Any) -> dict[str, Any]:
    return {"id": job_id, "composition": "Intro", "output": f"{job_id}.mp4", **extra}


def test_every_state_of_a_job_follows_the_schema(tmp_path: Path) -> None:
    hooked = tmp_path / "hooked"
    hooked.mkdir()
    # A command hook that keeps each body it gets under its delivery id, renamed into place
    # whole (one file per delivery: a repeat replaces it).
    keep = 'cat > "$0/.$SPOOLRENDER_DELIVERY" && mv "$0/.$SPOOLRENDER_DELIVERY" "$0/$SPOOLRENDER_DELIVERY.json"'
    hook = {"command": ["sh", "-c", keep, str(hooked)]}
    config = make_spool(tmp_path / "spool", {**QUICK, "hooks": {"keep": hook}})
    spool = Spool(config.spool)
    fake = FakeRenderer()
    fake.script("good", Succeed(size=100))
    fake.script("bad", Fail("render", transient=False, message="props.title is missing"))
    fake.script("flaky", Fail("worker-crash"))
    fake.script("hang", Hang())
    later = time.time() + 3600  # scheduled: no runner takes it for an hour
    jobs = {i: spool.submit(job(i, max_attempts=3), props_check=False) for i in ("good", "bad", "flaky", "hang")}
    waiting = spool.submit(job("later", not_before=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(later))),
                           props_check=False)  # fmt: skip

    shown, served = check(config, "later", "incoming")
    assert shown["others"] == [] and served["scheduled_for"] is not None and served["arrived_before"] >= 0
    assert served["job"] is not None and served["private"] is False
    assert waiting.submitted_as is not None
    os.chmod(waiting.submitted_as, 0o600)  # private: its owner's only; the API withholds the job file
    served = job_detail(config, "later")
    SERVED.validate(served)
    assert served["private"] is True and served["job"] is None
    with running_runner(config, fake):
        jobs["good"].wait(timeout=60)
        with pytest.raises(JobFailed):
            jobs["bad"].wait(timeout=60)
        fake.wait_for_run("hang")
        wait_for(lambda: spool.show("hang")["heartbeat"] is not None, timeout=30)
        shown, served = check(config, "hang", "running")
        assert shown["cancel_requested"] is False and shown["attempts"] == 1
        assert served["heartbeat_age_seconds"] is not None
        spool.cancel("hang", by="test")
        with pytest.raises(JobFailed):
            jobs["hang"].wait(timeout=60)
        wait_for(lambda: "flaky" in {w["id"] for w in spool.status().document["retry"]}, timeout=60)
        # done, failed, retry, and the cancelled job's failed: each hook delivered.
        wait_for(lambda: len(list(hooked.glob("*.json"))) >= 4, timeout=60)

    shown, served = check(config, "good", "done")
    assert shown["result"]["bytes"] == 100 and served["output_url"] == "/jobs/good/output"
    shown, _ = check(config, "bad", "failed")
    assert shown["failure"]["kind"] == "render"
    shown, _ = check(config, "hang", "failed")
    assert shown["failure"]["kind"] == "cancelled"
    shown, served = check(config, "flaky", "retry")
    assert (
        shown["due_in_seconds"] > 60 and served["retry_position"] == 1 and served["errors"][0]["kind"] == "worker-crash"
    )

    bodies = [json.loads(p.read_text()) for p in sorted(hooked.glob("*.json"))]
    for body in bodies:
        HOOK_BODY.validate(body)
    assert sorted(b["event"] for b in bodies) == ["done", "failed", "failed", "retry"]
    assert {k: v for k, v in next(b for b in bodies if b["event"] == "done").items() if k != "event"} == (
        spool.show("good")["result"]
    )  # the done hook sends the document's result

    # Waiting in retry/ for its not_before: cancelled while scheduled, then retried.
    spool.cancel("later", by="test")
    check(config, "later", "failed")
    spool.retry("later")
    shown, served = check(config, "later", "retry")
    assert shown["due"] == pytest.approx(later, abs=1) and served["scheduled_for"] == pytest.approx(later, abs=1)

    # Several entries of one id: a re-run waiting in incoming/ before the done entry.
    spool.rerun("good")
    shown, served = check(config, "good", "incoming")
    assert [e["state"] for e in shown["entries"]] == ["incoming", "done"] == [e["state"] for e in served["entries"]]
    assert [o["state"] for o in shown["others"]] == ["done"] and "result" in shown["others"][0]

    # A damaged record is said so, within the schema.
    (entry,) = [n for n in os.listdir(config.spool / "failed") if n.startswith("bad.")]
    (config.spool / "failed" / entry / "failure.json").write_text("[]")
    shown, _ = check(config, "bad", "failed")
    assert "failure" not in shown and shown["damaged"] == [
        "failure.json is not a JSON object; its fields are not shown"
    ]

    # The schema is closed: a field it does not know (drift) fails it, at the top and inside.
    with pytest.raises(jsonschema.ValidationError):
        SHOW.validate({**shown, "surprise": 1})
    good = spool.show("good")
    with pytest.raises(jsonschema.ValidationError):
        SHOW.validate({**good, "others": [{**good["others"][0], "result": {**good["others"][0]["result"], "x": 1}}]})


def drain(spool: SpoolLayout, crash_at: str | None = None) -> None:
    env = {k: v for k, v in os.environ.items() if k != "SPOOLRENDER_CRASH_AT"}
    if crash_at:
        env["SPOOLRENDER_CRASH_AT"] = crash_at
    done = subprocess.run(spoolrender_cmd("run", "--drain", "--spool", str(spool.root)), env=env, timeout=120,
                          capture_output=True)  # fmt: skip
    assert done.returncode == (-9 if crash_at else 0), done.stderr


def test_a_split_job_follows_the_schema_joining_done_and_split(spool: SpoolLayout) -> None:
    # One slot: the chunk that wakes its job is killed at once, before another slot can
    # claim the woken job (the join), so it is found waiting in retry/.
    write_spool_config(spool, {**FRAMES_CONFIG, "slots": 1})
    config = load_config(spool.root, environ={})
    drop(spool, "long.yaml", frames_job(3, frames=30))
    drain(spool, "after-wake")  # killed once its last chunk woke it into retry/ for the join
    shown, served = check(config, "long", "retry")
    assert shown["split"]["chunks"]["done"] == 3 and {r["state"] for r in served["chunk_table"]} == {"done"}
    drain(spool)
    shown, _ = check(config, "long", "done")
    assert [r["outcome"] for r in shown["runs"]] == ["split", "publishing"]
    drop(spool, "wide.yaml", frames_job(3, frames=30))
    drain(spool, "after-split-move")  # killed in split/, its chunks not yet queued
    shown, served = check(config, "wide", "split")
    assert shown["split"]["chunks"] == {"count": 3, "done": 0, "running": 0, "waiting": 0, "failed": 0, "missing": 3}
    assert [r["state"] for r in served["chunk_table"]] == ["missing"] * 3


def test_the_schema_is_a_valid_draft_2020_12_schema() -> None:
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    assert SCHEMA["properties"]["schema"]["const"] == JOB_SCHEMA_VERSION
    assert f"schema {JOB_SCHEMA_VERSION}" in SCHEMA["title"]
