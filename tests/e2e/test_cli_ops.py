"""The operator's commands of issue 23 as users type them: list, show's times, did-you-mean,
retry's choices, rerun. Real subprocesses of the CLI on a real spool; the read models
under them (spoolrender.core.suggest, failed_select, lookup.timing) get fast unit tests below."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from support.processes import spoolrender_cmd
from support.spool_jobs import allow_steps, command_job, drop, entries, write_spool_config
from support.waiting import wait_for

from spoolrender.api import Spool
from spoolrender.cli.failed_select import select_failed
from spoolrender.compositions import Composition, submit_problems
from spoolrender.config.spool_config import load_config
from spoolrender.core.suggest import close_matches, did_you_mean
from spoolrender.ops.id_hints import spool_ids
from spoolrender.spool.layout import SpoolLayout

# Transient failures wait ten minutes: a drain leaves them in retry/, whatever the machine's load.
SLOW_RETRY = {"backoff_base_seconds": 600, "backoff_cap_seconds": 600}


def cli(spool: SpoolLayout, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        spoolrender_cmd(*args, "--spool", str(spool.root)), capture_output=True, text=True, check=False, timeout=120
    )


def drain(spool: SpoolLayout) -> None:
    subprocess.run(spoolrender_cmd("run", "--drain", "-q", "--spool", str(spool.root)), check=False, timeout=300)


def stocked(spool: SpoolLayout) -> None:
    """Two done jobs (one in queue urgent), a failure of each hopeless and curable kind, a
    job waiting for its retry, and one still in incoming/."""
    write_spool_config(spool, SLOW_RETRY)
    drop(spool, "intro-welcome.yaml", command_job())
    drop(spool, "urgent-1.yaml", {**command_job(), "queue": "urgent"})
    drop(spool, "exits.yaml", {**command_job(exit=65), "max_attempts": 1})
    drop(spool, "typo.yaml", {**command_job(), "prop": 1})
    drop(spool, "flaky.yaml", {**command_job(fail_until_attempt=3), "max_attempts": 5})
    drain(spool)
    drop(spool, "late.yaml", command_job())


def test_list_pages_every_state_newest_first_and_filters(spool: SpoolLayout) -> None:
    stocked(spool)
    listed = cli(spool, "list")
    assert listed.returncode == 0, listed.stderr
    rows = [line.split()[:2] for line in listed.stdout.splitlines()[1:-1]]
    assert rows[0] == ["incoming", "late"] and ["retry", "flaky"] in rows
    assert "jobs 1-6 of 6, newest first" in listed.stdout
    done = [line.split()[1] for line in cli(spool, "list", "done").stdout.splitlines()[1:-1]]
    # Newest first: urgent-1 and intro-welcome finished in the order the runner took them.
    times = {i["id"]: i["finished_at"] for i in json.loads(cli(spool, "list", "done", "--json").stdout)["jobs"]}
    assert done == sorted(times, key=lambda job_id: -times[job_id])

    document = json.loads(cli(spool, "list", "failed", "--kind", "invalid-job", "--json").stdout)
    assert [(j["id"], j["kind"]) for j in document["jobs"]] == [("typo", "invalid-job")] and document["total"] == 1
    assert "urgent-1" in cli(spool, "list", "--queue", "urgent").stdout
    assert "intro-welcome" not in cli(spool, "list", "--queue", "urgent").stdout
    page = cli(spool, "list", "--limit", "2", "--offset", "2")
    assert "jobs 3-4 of 6, newest first; next page: --offset 4" in page.stdout
    assert len(page.stdout.splitlines()) == 4  # header, two rows, footer
    assert "jobs 1-2 of 2" in cli(spool, "list", "done", "--since", "1d").stdout
    refused = cli(spool, "list", "donne")
    assert refused.returncode == 2 and "invalid choice" in refused.stderr
    assert cli(spool, "list", "--since", "30").returncode == 2  # a duration needs its unit


def test_show_says_when_runs_ended_when_a_retry_is_due_and_hints_an_id(spool: SpoolLayout) -> None:
    stocked(spool)
    shown = cli(spool, "show", "flaky")
    assert shown.returncode == 0, shown.stderr
    assert re.search(r"next attempt due 20\S+ \S+Z \(in \d+m \d\ds\)", shown.stdout), shown.stdout
    assert "  run 1: retry on " in shown.stdout and " at 20" in shown.stdout and "(took " in shown.stdout
    document = json.loads(cli(spool, "show", "flaky", "--json").stdout)
    assert document["due"] > time.time() + 300 and document["due"] == pytest.approx(
        json.loads(cli(spool, "list", "retry", "--json").stdout)["jobs"][0]["due"]
    )
    missing = cli(spool, "show", "intro")
    assert missing.returncode == 1 and "did you mean 'intro-welcome'?" in missing.stderr
    assert "did you mean 'intro-welcome'?" in cli(spool, "retry", "intro").stderr
    assert "did you mean 'intro-welcome'?" in cli(spool, "cancel", "intro").stderr


def test_show_of_a_running_job_has_its_eta_and_counts_the_running_attempt(
    spool: SpoolLayout, tmp_path: Path, start_runner: Any
) -> None:
    steps = tmp_path / "steps"
    drop(spool, "long.yaml", {**command_job(steps_file=str(steps), fail_until_attempt=2), "max_attempts": 3})
    start_runner()
    allow_steps(steps, 4)

    def progressed() -> bool:
        result = cli(spool, "show", "long", "--json")
        return result.returncode == 0 and (json.loads(result.stdout).get("progress") or 0) >= 0.3

    wait_for(progressed, timeout=120)
    document = json.loads(cli(spool, "show", "long", "--json").stdout)
    assert document["state"] == "running" and document["eta_seconds"] is not None
    assert document["attempts"] == 2  # the failed first attempt and the one rendering now
    text = cli(spool, "show", "long").stdout
    assert "attempts used: 2 (counting the one running)" in text and " left (" in text
    allow_steps(steps, 10)


def test_did_you_mean_for_commands_fields_and_compositions(spool: SpoolLayout, tmp_path: Path) -> None:
    typo = subprocess.run(spoolrender_cmd("stauts"), capture_output=True, text=True, check=False, timeout=60)
    assert typo.returncode == 2 and "unknown command 'stauts'; did you mean 'status'?" in typo.stderr
    job = tmp_path / "j.yaml"
    job.write_text("renderer: command\ncommand: props\nprop: {}\n")
    refused = cli(spool, "submit", str(job))
    assert refused.returncode == 1 and "field 'prop': unknown field" in refused.stderr
    assert "did you mean 'props'?" in refused.stderr
    card = Composition.from_json(
        {"id": "TitleCard", "width": 64, "height": 36, "fps": 30, "durationInFrames": 9, "defaultProps": {}}
    )
    (problem,) = submit_problems([card], "TitelCard", {})
    assert problem.endswith("(it has: TitleCard); did you mean 'TitleCard'?")


def test_retry_chooses_failed_jobs_by_kind_and_leaves_hopeless_ones_out(spool: SpoolLayout) -> None:
    stocked(spool)
    assert "exits.yaml" not in entries(spool, "failed")
    dry = cli(spool, "retry", "--all-failed", "--dry-run")
    assert dry.returncode == 0 and "would send back 1 job(s) to retry/: exits" in dry.stdout
    assert "left out 1 job(s) of hopeless kinds (invalid-job)" in dry.stderr
    assert len(entries(spool, "failed")) == 2  # nothing moved
    assert (
        "would send back 1 job(s) to retry/: typo" in cli(spool, "retry", "--kind", "invalid-job", "--dry-run").stdout
    )
    assert "would send back 0 job(s)" in cli(spool, "retry", "--queue", "urgent", "--dry-run").stdout
    one = cli(spool, "retry", "typo", "--dry-run")
    assert "would be back to retry/ with fresh attempts" in one.stdout and len(entries(spool, "failed")) == 2
    moved = cli(spool, "retry", "--all-failed")
    assert moved.returncode == 0 and "sent back 1 job(s) to retry/: exits" in moved.stdout
    assert [n.split(".")[0] for n in entries(spool, "failed")] == ["typo"]
    assert "sent back 1 job(s) to retry/: typo" in cli(spool, "retry", "--all-failed", "--include-hopeless").stdout
    assert entries(spool, "failed") == []
    both = cli(spool, "retry", "typo", "--all-failed")
    assert both.returncode == 1 and "not both" in both.stderr


def test_rerun_renders_a_done_job_again_and_keeps_its_output_until_then(spool: SpoolLayout) -> None:
    drop(spool, "recap.yaml", {**command_job(content="first"), "output": "recap.txt"})
    drain(spool)
    (first,) = entries(spool, "done")
    output = load_config(spool.root, environ={}).output_root / "recap.txt"
    assert output.read_text() == "first"
    (spool.done / first / "job.yaml").write_text(  # as if the job had been fixed where it lies
        "renderer: command\ncommand: props\noutput: recap.txt\nprops: {content: second}\n"
    )
    queued = cli(spool, "rerun", "recap")
    assert queued.returncode == 0, queued.stderr
    queued_file = (spool.incoming / "recap.yaml").read_text()
    assert "rerun: true" in queued_file and "cache: false" in queued_file
    assert output.read_text() == "first" and entries(spool, "done") == [first]  # untouched until published
    again = cli(spool, "rerun", "recap")
    assert again.returncode == 1 and "already" in again.stderr  # queued: refused, nothing written twice
    drain(spool)
    assert output.read_text() == "second" and len(entries(spool, "done")) == 2
    shown = json.loads(cli(spool, "show", "recap", "--json").stdout)
    assert (
        shown["state"] == "done"
        and len(shown["entries"]) == 2
        and shown["path"].endswith(next(n for n in entries(spool, "done") if n != first))
    )
    failed = cli(spool, "rerun", "nope")
    assert failed.returncode == 1 and "no job with id 'nope'" in failed.stderr


def test_every_new_option_has_an_example_in_its_help() -> None:
    for command, options in {
        "list": ("--queue", "--kind", "--since", "--limit", "--offset", "--json", "list failed"),
        "show": ("--json | jq .due", "eta_seconds", "show intro "),
        "retry": ("--dry-run", "--kind", "--queue", "--include-hopeless"),
        "rerun": ("rerun intro-42", "--dry-run"),
    }.items():
        text = subprocess.run(spoolrender_cmd(command, "--help"), capture_output=True, text=True, check=True).stdout
        examples = text.partition("examples:")[2]
        for option in options:
            assert f"spoolrender {command}" in examples and option in examples, (command, option)


# --- the read models, without subprocesses --------------------------------------------


def test_close_matches_prefers_ids_that_contain_what_was_typed() -> None:
    assert close_matches("intro", ["intro-welcome", "outro", "intro-42x"], contained=True)[:2] == [
        "intro-42x",
        "intro-welcome",
    ]
    assert close_matches("intro", ["outro", "intro-welcome"]) == ["outro"]  # difflib alone
    assert did_you_mean("zzz", ["status", "show"]) == ""
    names = {"incoming": ["q/a.yaml", ".x.part"], "retry": ["0000000000001-0100-b.0123456789ab"],
             "done": ["c.0123456789ab"]}  # fmt: skip
    assert spool_ids(names) == {"a", "b", "c"}


def test_id_hints_in_a_large_spool_run_difflib_over_a_bounded_pool() -> None:
    """Over 100,000 done ids difflib took 13-16 s per unknown id: it sees at most
    DIFFLIB_POOL names now (those sharing the longest prefix that leaves few enough), and
    none when ids containing what was typed fill the hint."""
    from spoolrender.core.suggest import DIFFLIB_POOL, _bounded

    ids = sorted(f"job-{i:06d}" for i in range(100_000))
    assert len(_bounded("job-01234x", ids)) <= DIFFLIB_POOL
    assert close_matches("job-012345x", ids, contained=True)[0] == "job-012345"  # a typo past the prefix
    assert close_matches("job-0123", ids, contained=True) == ["job-012300", "job-012301", "job-012302"]
    assert _bounded("x", ids[:10]) == ids[:10]  # a small spool: every id


def test_show_and_rerun_dry_run_say_what_is_damaged_and_escape_job_bytes(spool: SpoolLayout) -> None:
    """A result.json that is a string and a failure.json that is a list are reported, not a
    traceback; `rerun --dry-run` prints the submitter's bytes escaped, like every other line."""
    drop(spool, "ok.yaml", {**command_job(content="\u202egnp.exe"), "output": "ok.txt"})  # a bidi override
    drop(spool, "bad.yaml", {**command_job(exit=65), "max_attempts": 1})
    drain(spool)
    (done,) = entries(spool, "done")
    (failed,) = entries(spool, "failed")
    (spool.done / done / "result.json").write_text('"not an object"')
    (spool.failed / failed / "failure.json").write_text("[1, 2]")
    for job_id, name in (("ok", "result.json"), ("bad", "failure.json")):
        shown = cli(spool, "show", job_id)
        assert shown.returncode == 0 and f"damaged: {name} is not a JSON object" in shown.stdout, shown.stderr
    planned = cli(spool, "rerun", "ok", "--dry-run")
    assert planned.returncode == 0 and "\u202e" not in planned.stdout and "gnp.exe" in planned.stdout, planned.stderr


def test_select_failed_keeps_hopeless_kinds_apart(spool: SpoolLayout) -> None:
    for name, kind in (
        ("a.0123456789ab", "timeout"),
        ("b.0123456789ab", "cancelled"),
        ("c.0123456789ab", "invalid-job"),
        ("d.0123456789ab", "rerun-refused"),  # the same file is at its output until someone removes it
    ):
        (spool.failed / name).mkdir()
        (spool.failed / name / "failure.json").write_text(json.dumps({"kind": kind, "reason": "x"}))
    config = load_config(spool.root, environ={})
    chosen = select_failed(config)
    assert [e.job_id for e in chosen.chosen] == ["a"] and [e.job_id for e in chosen.hopeless] == ["b", "c", "d"]
    assert [e.job_id for e in select_failed(config, include_hopeless=True).chosen] == ["a", "b", "c", "d"]
    named = select_failed(config, kinds=("cancelled",))
    assert [e.job_id for e in named.chosen] == ["b"] and named.hopeless == []


def test_job_index_orders_every_state_newest_first_when_asked(spool: SpoolLayout) -> None:
    from spoolrender.serve.browse import Filters, JobIndex

    for age, name in ((30, "old.yaml"), (10, "new.yaml"), (20, "mid.yaml")):
        path = drop(spool, name, command_job())
        then = time.time() - age
        os.utime(path, (then, then))
    index = JobIndex(load_config(spool.root, environ={}))
    names = os.listdir(spool.incoming)
    assert index.select("incoming", names, Filters()) == ["mid.yaml", "new.yaml", "old.yaml"]  # by name
    assert index.select("incoming", names, Filters(), newest_first=True) == ["new.yaml", "mid.yaml", "old.yaml"]


def test_spool_rerun_from_python_queues_the_done_job_again(spool: SpoolLayout) -> None:
    """docs/operations.md: "`Spool.rerun(ID)` does the same from Python"; the merge of opcli
    moved rerun() into spoolrender.ops.rerun_done, but api.py (and cli/ops_commands.py) still
    import it from spoolrender.lifecycle.rerun."""
    drop(spool, "recap.yaml", {**command_job(content="first"), "output": "recap.txt"})
    drain(spool)
    queued = Spool(spool.root).rerun("recap")
    assert Path(queued) == spool.incoming / "recap.yaml" and "rerun: true" in queued.read_text()
