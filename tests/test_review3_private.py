"""Review finding: `spoolrender serve` (on loopback by default, so every local user can
connect) answers a 0600 job's props and job file to any request without the token, while
the README says a spool-group member cannot "read another user's 0600 job, its copy or
its run logs". A real server over HTTP on a kernel-chosen port."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from browser.server import running_server

from spoolrender.layout import SpoolLayout

SECRET = "s3cret-review3-props"


@pytest.mark.xfail(
    strict=True,
    reason="review3: the read API serves every job's file, props (search) and logs to any client; "
    "a job whose private copy is 0600 needs the token (or is not searchable by props) to keep the "
    "README's promise",
)
def test_private_job_props_not_readable_without_token(spool: SpoolLayout, tmp_path: Path) -> None:
    job_dir = spool.failed / "private-job.0123456789ab"
    job_dir.mkdir()
    job = job_dir / "job.yaml"
    job.write_text(yaml.safe_dump({"renderer": "command", "command": "props", "props": {"api_key": SECRET}}))
    job.chmod(0o600)  # the runner's private copy of a 0600 submission keeps no read bits for others
    (job_dir / "failure.json").write_text('{"id": "private-job", "kind": "command-exit", "reason": "exit 1"}')
    with running_server(spool.root, tmp_path / "serve.log") as server:
        found = server.get_json(f"/jobs?props={SECRET}")
        assert [j["id"] for j in found["jobs"]] == [], "a props search finds a 0600 job's secret"
        file = server.get("/jobs/private-job/file")
        assert file.status in (401, 403) and SECRET.encode() not in file.body, "its job file is served"
