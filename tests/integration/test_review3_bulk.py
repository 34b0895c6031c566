"""Review findings at the seams of the bulk actions (POST /bulk's ``filter``): what a
"select all matching" over a search acts on, and a re-queued job's finished records.

Through spoolrender.serve.bulk.bulk_request itself on a real spool in a temp dir (the
server's HTTP layer adds only the token check, covered by tests/e2e/test_serve_bulk.py)."""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.browser.spools import finished_entries
from support.spool_jobs import command_job, drop, entries

from spoolrender.config.spool_config import SpoolConfig
from spoolrender.ops.bulk import BulkAction, Target, bulk_action, carry_out
from spoolrender.serve.browse import JobIndex
from spoolrender.serve.bulk import bulk_request, delete_job
from spoolrender.serve.readmodel import ApiError
from spoolrender.spool.layout import SpoolLayout

BROWSE_JS = Path(__file__).resolve().parents[2] / "spoolrender" / "serve" / "web" / "browse.js"


def bulk(config: SpoolConfig, body: dict[str, Any]) -> dict[str, Any]:
    return bulk_request(config, JobIndex(config), json.dumps(body).encode(), "review3 test")


def test_bulk_filter_narrows_by_composition_and_props(spool: SpoolLayout, config: SpoolConfig) -> None:
    """The dashboard's search by composition/props, then "select all N matching" and delete:
    the request must carry those filters, or it acts on every failed job, not the N shown."""
    finished_entries(spool, "failed", 3, float(int(time.time()) - 100), prefix="fail")
    # fail-0000001 asked for another composition than the others.
    job = spool.failed / "fail-0000001.000000000001" / "job.yaml"
    job.write_text(yaml.safe_dump({"renderer": "remotion", "composition": "PromoReel", "props": {"lang": "de"}}))
    plan = bulk(config, {"action": "delete", "dry_run": True, "filter": {"state": "failed", "composition": "promo"}})
    assert [i["id"] for i in plan["acted"]] == ["fail-0000001"], plan
    plan = bulk(config, {"action": "delete", "dry_run": True, "filter": {"props": '"lang": "de"'}})
    assert [i["id"] for i in plan["acted"]] == ["fail-0000001"], plan
    # The page's script sends what the search form narrowed the listing by (browse.js's
    # bulkRequest; the browser test of the form is tests/e2e/test_dashboard_look.py).
    pattern = r"for \(const key of (\[[^\]]*\])\) if \(query\[key\]\) filter\[key\] = query\[key\]"
    keys = re.search(pattern, BROWSE_JS.read_text())
    assert keys is not None and {"composition", "props"} <= set(re.findall(r'"(\w+)"', keys.group(1)))
    assert len(entries(spool, "failed")) == 3


def test_bulk_delete_keeps_the_records_of_a_job_queued_again(spool: SpoolLayout, config: SpoolConfig) -> None:
    """A done job submitted again with ``rerun: true`` keeps its finished record until the
    re-run is done (spoolrender.ops.bulk.plan: "cancel it first"), by ids and by a filter alike;
    a re-run still waiting in incoming/ is as live as a running one."""
    finished_entries(spool, "done", 2, float(int(time.time()) - 100), prefix="done")
    drop(spool, "again.yaml", {**command_job(), "id": "done-0000000", "rerun": True})  # queued again
    for request in ({"ids": ["done-0000000"]}, {"filter": {"state": "done"}}, {"filter": {"q": "done-0000000"}}):
        plan = bulk(config, {"action": "delete", "dry_run": True, **request})
        assert [i["id"] for i in plan["acted"]] in ([], ["done-0000001"]), (request, plan)
        assert any("cancel it first" in i["text"] for i in plan["skipped"]), (request, plan)
    done = bulk(config, {"action": "delete", "filter": {"state": "done"}})
    assert [i["id"] for i in done["acted"]] == ["done-0000001"], done
    assert [n.split(".")[0] for n in entries(spool, "done")] == ["done-0000000"]


def test_bulk_cancel_by_filter_stops_only_what_it_matched(spool: SpoolLayout, config: SpoolConfig) -> None:
    """A spool-group member drops a file naming someone's running job's id; the operator
    cancels every waiting file (filter state=incoming, the dry run: "1 incoming"). The
    running render of the other job must not be stopped."""
    running = spool.running / "victim.0123456789ab.0123456789ab"
    running.mkdir()
    (running / "job.yaml").write_text(yaml.safe_dump(command_job()))
    drop(spool, "flood.yaml", {**command_job(), "id": "victim"})
    plan = bulk(config, {"action": "cancel", "dry_run": True, "filter": {"state": "incoming"}})
    assert [(i["state"], i["entry"]) for i in plan["acted"]] == [("incoming", "incoming/flood.yaml")], plan
    bulk(config, {"action": "cancel", "filter": {"state": "incoming"}})
    assert not (running / "cancel").exists(), "the running job was asked to stop"
    assert [n.split(".")[0] for n in entries(spool, "failed")] == ["victim"]  # the dropped file, cancelled
    # A waiting job a runner claims between the plan and the confirmation is not chased.
    drop(spool, "late.yaml", command_job())
    planned = bulk_action(config, BulkAction.CANCEL, [Target("late", "incoming", "late.yaml")], dry_run=True, who="t")
    claimed = spool.running / "late.0123456789ab.0123456789ab"
    claimed.mkdir()
    (spool.incoming / "late.yaml").rename(claimed / "job.yaml")  # as a runner's claim moves it
    done = carry_out(config, planned, "review3 test")
    assert done.acted == () and [i.text for i in done.skipped] == ["moved on meanwhile: left as it is"], done
    assert not (claimed / "cancel").exists()


def test_delete_that_cannot_remove_the_record_says_so(spool: SpoolLayout, config: SpoolConfig) -> None:
    """A finished record that cannot be removed (here an immutable file in it, as a render's
    leftovers or an operator's `chattr` leave it): DELETE /jobs/ID must not answer "record
    deleted" (200) for a record that is still there, half removed."""
    finished_entries(spool, "failed", 1, float(int(time.time()) - 100), prefix="fail")
    stuck = spool.failed / "fail-0000000.000000000000" / "stuck"
    stuck.write_text("kept\n")
    if subprocess.run(["chattr", "+i", str(stuck)], capture_output=True, check=False).returncode != 0:
        pytest.skip("chattr +i is not available here (needs root on ext4 or a like filesystem)")
    try:
        with pytest.raises(ApiError) as refused:
            delete_job(config, "fail-0000000", "review3 test")
        assert refused.value.status == 409 and "could not" in str(refused.value), refused.value
        assert [i["text"] for i in bulk(config, {"action": "delete", "ids": ["fail-0000000"]})["acted"]] == []
    finally:
        subprocess.run(["chattr", "-i", str(stuck)], check=True)
    assert entries(spool, "failed") == ["fail-0000000.000000000000"]


def test_confirming_a_dry_run_acts_only_on_what_it_showed(spool: SpoolLayout, config: SpoolConfig) -> None:
    """The dashboard's protocol as browse.js speaks it: a dry run by filter, the operator reads
    "delete 2 job(s)" and confirms; a job that fails in between must not be deleted unseen."""
    start = float(int(time.time()) - 100)
    finished_entries(spool, "failed", 2, start, prefix="old")
    request: dict[str, Any] = {"action": "delete", "filter": {"state": "failed"}}
    shown = bulk(config, {**request, "dry_run": True})
    assert shown["jobs"] == 2
    finished_entries(spool, "failed", 1, start + 50, prefix="new")  # fails while the operator reads
    (spool.failed / "old-0000000.000000000000").rename(spool.done / "old-0000000.000000000000")  # moved on
    # What the confirm button sends (browse.js askBulk): the dry run's entries, not the filter again.
    assert "entries: body.acted.map(({ id, state, entry }) => ({ id, state, entry }))" in BROWSE_JS.read_text()
    listed = [{k: i[k] for k in ("id", "state", "entry")} for i in shown["acted"]]
    done = bulk(config, {"action": "delete", "dry_run": False, "entries": listed})
    assert [i["id"] for i in done["acted"]] == ["old-0000001"], done
    assert [(i["id"], i["text"]) for i in done["skipped"]] == [
        ("old-0000000", "moved on since the dry run: left as it is")
    ]
    assert sorted(entries(spool, "failed")) == ["new-0000000.000000000000"]
