"""The bulk actions of `spoolrender serve` (POST /bulk, DELETE /jobs/ID) over a real server:
refused without the token, a dry run that changes nothing and counts what would happen,
then retry, cancel and delete by ids and by filter, and `spoolrender purge ID` doing the
same as the API's delete (spoolrender.ops.bulk behind both)."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

from support.browser.server import Response, Server, running_server
from support.browser.spools import finished_entries, with_token
from support.processes import spoolrender_cmd
from support.spool_jobs import command_job, drop, entries

from spoolrender.spool.layout import SpoolLayout

TOKEN = "bulk-token-0123456789abcdef"
AUTH = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}


def post_bulk(server: Server, body: dict[str, Any], headers: dict[str, str] | None = None) -> Response:
    return server.request("POST", "/bulk", json.dumps(body).encode(), AUTH if headers is None else headers)


def ids(layout: SpoolLayout, state: str) -> list[str]:
    names = entries(layout, state)
    return sorted(n.split("-", 2)[2].rsplit(".", 1)[0] if state == "retry" else n.rsplit(".", 1)[0] for n in names)


def test_bulk_actions_over_http(spool: SpoolLayout, tmp_path: Path) -> None:
    with_token(spool, TOKEN)
    start = float(int(time.time()) - 1000)
    finished_entries(spool, "failed", 6, start, prefix="fail")  # kinds: command-exit, timeout, browser-crashed...
    finished_entries(spool, "done", 3, start, prefix="done")
    drop(spool, "waiting.yaml", command_job())
    with running_server(spool.root, tmp_path / "serve.log") as server:
        # No token, a wrong one: refused, nothing changed.
        no_token = post_bulk(server, {"action": "retry", "ids": ["fail-0000000"]}, {})
        assert no_token.status == 401 and "Authorization" in no_token.error
        wrong = {"Authorization": "Bearer wrong-wrong-wrong", "Content-Type": "application/json"}
        assert post_bulk(server, {"action": "delete", "ids": ["done-0000000"]}, wrong).status == 403
        assert server.request("DELETE", "/jobs/done-0000000").status == 401
        assert len(entries(spool, "failed")) == 6 and len(entries(spool, "done")) == 3

        # A dry run: what would happen, per entry and in all, and nothing moves.
        chosen = ["fail-0000000", "fail-0000001", "done-0000000", "waiting", "no-such-job"]
        plan = post_bulk(server, {"action": "retry", "ids": chosen, "dry_run": True}).json()
        assert plan["dry_run"] is True and plan["jobs"] == 2
        assert sorted(i["id"] for i in plan["acted"]) == ["fail-0000000", "fail-0000001"]
        assert {i["id"]: i["text"] for i in plan["skipped"]} == {
            "done-0000000": "is done: nothing to retry (only failed or retry-waiting jobs)",
            "waiting": "is incoming: nothing to retry (only failed or retry-waiting jobs)",
        }
        assert plan["missing"] == ["no-such-job"]
        assert plan["summary"] == "would retry 2 job(s) (2 failed); 2 left alone, 1 not found"
        assert len(entries(spool, "failed")) == 6 and entries(spool, "retry") == []

        # Retry by filter (every page of it): the timeout ones, back to retry/.
        done = post_bulk(server, {"action": "retry", "filter": {"state": "failed", "kind": "timeout"}}).json()
        assert done["dry_run"] is False and done["jobs"] == 2, done
        assert ids(spool, "retry") == ["fail-0000001", "fail-0000004"]
        assert all("back to retry/" in i["text"] for i in done["acted"])

        # Cancel them (waiting in retry/): failed as cancelled, as `spoolrender cancel` does.
        cancelled = post_bulk(server, {"action": "cancel", "ids": ["fail-0000001", "fail-0000004", "done-0000001"]})
        body = cancelled.json()
        assert body["jobs"] == 2 and [i["id"] for i in body["skipped"]] == ["done-0000001"], body
        assert entries(spool, "retry") == [] and len(entries(spool, "failed")) == 6
        reasons = [json.loads((spool.failed / n / "failure.json").read_text()) for n in entries(spool, "failed")]
        assert sum(r["kind"] == "cancelled" for r in reasons) == 2

        # Delete: finished records only; a queued job is left (cancel it first).
        plan = post_bulk(server, {"action": "delete", "ids": ["done-0000000", "waiting"], "dry_run": True}).json()
        assert plan["jobs"] == 1 and "cancel it first" in plan["skipped"][0]["text"]
        assert post_bulk(server, {"action": "delete", "ids": ["done-0000000"]}).json()["jobs"] == 1
        assert ids(spool, "done") == ["done-0000001", "done-0000002"]
        deleted = server.request("DELETE", "/jobs/done-0000001", headers=AUTH)
        assert deleted.status == 200 and deleted.json()["jobs"] == 1
        assert ids(spool, "done") == ["done-0000002"]
        gone = server.request("DELETE", "/jobs/done-000001", headers=AUTH)
        assert gone.status == 404 and "did you mean 'done-0000002'" in gone.error
        live = server.request("DELETE", "/jobs/waiting", headers=AUTH)
        assert live.status == 409 and "cancel it first" in live.error
        assert (spool.incoming / "waiting.yaml").exists()

        # Requests that say nothing clear are refused with why.
        assert "action: one of" in post_bulk(server, {"action": "explode", "ids": []}).error
        both = post_bulk(server, {"action": "retry", "ids": [], "filter": {}})
        assert both.status == 400 and "not both" in both.error
        assert post_bulk(server, {"action": "retry", "ids": ["../etc"]}).status == 400
        assert post_bulk(server, {"action": "retry", "filter": {"state": "lost"}}).status == 400
        assert server.get("/bulk").status == 405

    # The command line deletes through the same code: `purge ID`.
    args = spoolrender_cmd("purge", "--spool", str(spool.root), "fail-0000000", "waiting")
    dry = subprocess.run([*args, "--dry-run"], capture_output=True, text=True, timeout=60, check=False)
    assert dry.returncode == 1 and "would purge 1 job(s)" in dry.stdout and "cancel it first" in dry.stdout
    assert "fail-0000000" in ids(spool, "failed")
    subprocess.run(args[:-1], capture_output=True, text=True, timeout=60, check=True)
    assert "fail-0000000" not in ids(spool, "failed") and len(entries(spool, "failed")) == 5
