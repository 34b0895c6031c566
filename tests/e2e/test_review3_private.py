"""Review finding: `spoolrender serve` (on loopback by default, so every local user can
connect) answers a 0600 job's props and job file to any request without the token, while
the README says a spool-group member cannot "read another user's 0600 job, its copy or
its run logs". A real server over HTTP on a kernel-chosen port."""

from __future__ import annotations

from pathlib import Path

import yaml
from support.browser.server import running_server
from support.browser.spools import with_token
from support.spool_jobs import command_job, drop

from spoolrender.spool.layout import SpoolLayout

SECRET = "s3cret-review3-props"
TOKEN = "private-token-0123456789abcdef"


def test_private_job_props_not_readable_without_token(spool: SpoolLayout, tmp_path: Path) -> None:
    job_dir = spool.failed / "private-job.0123456789ab"
    job_dir.mkdir()
    job = job_dir / "job.yaml"
    job.write_text(yaml.safe_dump({"renderer": "command", "command": "props", "props": {"api_key": SECRET}}))
    job.chmod(0o600)  # the runner's private copy of a 0600 submission keeps no read bits for others
    (job_dir / "failure.json").write_text('{"id": "private-job", "kind": "command-exit", "reason": "exit 1"}')
    (job_dir / "run-0001.log").write_text(f"rendering with {SECRET}\n")
    # A waiting file is private by its own mode; a 0644 one is everyone's, as before.
    drop(spool, "waiting.yaml", {**command_job(), "props": {"api_key": SECRET}}).chmod(0o600)
    drop(spool, "shared.yaml", {**command_job(), "props": {"api_key": SECRET}})
    with_token(spool, TOKEN)
    with running_server(spool.root, tmp_path / "serve.log") as server:
        found = server.get_json(f"/jobs?props={SECRET}")
        assert [j["id"] for j in found["jobs"]] == ["shared"], "a props search finds a 0600 job's secret"
        file = server.get("/jobs/private-job/file")
        assert file.status in (401, 403) and SECRET.encode() not in file.body, "its job file is served"
        assert "private" in file.error
        log = server.get("/jobs/private-job/log")
        assert log.status == 403 and SECRET.encode() not in log.body
        for job_id in ("private-job", "waiting"):
            detail = server.get_json(f"/jobs/{job_id}")
            assert detail["private"] is True and detail["job"] is None and SECRET not in str(detail), detail
        assert server.get_json("/jobs/shared")["job"]["props"] == {"api_key": SECRET}
        # With the token, all as before.
        auth = {"Authorization": f"Bearer {TOKEN}"}
        assert SECRET.encode() in server.get("/jobs/private-job/file", auth).body
        assert SECRET.encode() in server.get("/jobs/private-job/log", auth).body
        searched = server.get(f"/jobs?props={SECRET}", auth).json()
        assert sorted(j["id"] for j in searched["jobs"]) == ["private-job", "shared", "waiting"]
        assert server.get("/jobs/waiting", auth).json()["job"]["props"] == {"api_key": SECRET}
