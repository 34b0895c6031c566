"""The operator surface: status line by line and against its schema, show, cancel,
pause/resume, purge, exit codes, metrics and JSON logs, with real runner processes."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from conftest import command_job, drop, entries, spoolrender_cmd, wait_for, write_spool_config
from prometheus_client.parser import text_string_to_metric_families

import spoolrender
from spoolrender.heartbeat import read_heartbeat
from spoolrender.layout import SpoolLayout
from spoolrender.status import format_status

SCHEMA = json.loads((Path(spoolrender.__file__).parent / "status.schema.json").read_text())


def cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(spoolrender_cmd(*args), capture_output=True, text=True, check=False, timeout=timeout)


def drain(layout: SpoolLayout, *extra: str) -> subprocess.CompletedProcess[str]:
    return cli("run", "--drain", "--spool", str(layout.root), *extra)


def promtool_check(text: str) -> None:
    """`promtool check metrics` (Debian's prometheus package; scripts/setup.sh --test installs it)."""
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not installed (apt-get install prometheus; scripts/setup.sh --test does)")
    check = subprocess.run([promtool, "check", "metrics"], input=text.encode(), capture_output=True, check=False)
    assert check.returncode == 0, check.stderr.decode() + check.stdout.decode()


def running_with_progress(layout: SpoolLayout) -> bool:
    names = entries(layout, "running")
    hb = read_heartbeat(layout.running / names[0]) if len(names) == 1 else None
    return hb is not None and (hb.progress or 0) > 0


@pytest.fixture
def busy_spool(spool: SpoolLayout, start_runner: Any) -> SpoolLayout:
    """A spool with jobs in every state, one of them running under a live runner."""
    write_spool_config(spool, {"backoff_base_seconds": 900, "backoff_cap_seconds": 900, "slots": 1})
    drop(spool, "good.yaml", command_job())
    drop(spool, "bad.yaml", command_job(exit=65, message="props.title is missing"))
    drop(spool, "flaky.yaml", {**command_job(exit=1), "priority": 3})
    assert drain(spool).returncode == 3  # one job failed for good
    drop(spool, "long.yaml", command_job(sleep=60))
    start_runner()
    wait_for(lambda: running_with_progress(spool), timeout=30)
    drop(spool, "waiting.yaml", {**command_job(), "not_before": "2099-01-01T00:00:00Z"})
    return spool


def test_status_lists_every_state_line_by_line(busy_spool: SpoolLayout) -> None:
    result = cli("status", "--spool", str(busy_spool.root))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    expected = [
        rf"spool {re.escape(str(busy_spool.root))}",
        r"incoming 1  running 1  retry 1  done 1  failed 1   oldest waiting \d+s",
        r"",
        r"RUNNING",
        r"  ID +HOST +PID +PROGRESS +ETA +HEARTBEAT",
        rf"  long +{re.escape(os.uname().nodename)} +\d+ +\d+% +\d+s +\d+s ago",
        r"",
        r"RETRY",
        r"  ID +DUE +PRIORITY",
        r"  flaky +in \d+m +3",
        r"",
        r"RECENT FAILURES",
        r"  ID +KIND +REASON",
        r"  bad +command-exit +command 'props' exited with status 65: props.title is missing",
        r"",
        r"RUNNERS",
        r"  HOST +PID +BUSY +QUEUES \[TAGS\] +LAST SEEN",
        rf"  {re.escape(os.uname().nodename)} +\d+ +1/1 +\* +\d+s ago",
    ]
    assert len(lines) == len(expected), result.stdout
    for line, pattern in zip(lines, expected, strict=True):
        assert re.fullmatch(pattern, line), f"{line!r} !~ {pattern!r}"
    assert "\x1b[" not in result.stdout  # no colour when not a terminal


def test_status_json_follows_its_schema(busy_spool: SpoolLayout) -> None:
    result = cli("status", "--json", "--spool", str(busy_spool.root))
    data = json.loads(result.stdout)
    jsonschema.validate(data, SCHEMA)
    assert data["counts"] == {"incoming": 1, "running": 1, "retry": 1, "done": 1, "failed": 1}
    (running,) = data["running"]
    assert running["id"] == "long" and 0 < running["progress"] <= 1 and not running["stale"]
    assert data["runners"][0]["online"] and data["runners"][0]["busy"] == 1
    with pytest.raises(jsonschema.ValidationError):  # the schema is strict enough to catch drift
        jsonschema.validate({**data, "counts": {"incoming": 1}}, SCHEMA)


def test_status_colours_only_on_request() -> None:
    status = {
        "spool": "/s", "counts": dict.fromkeys(("incoming", "running", "retry", "done", "failed"), 0),
        "oldest_incoming_age_seconds": None, "paused": "maintenance", "running": [], "retry": [],
        "recent_failures": [{"id": "x", "kind": "k", "reason": "r", "entry": "x.1", "failed_at": 0}], "runners": [],
    }  # fmt: skip
    assert "\x1b[31m" in format_status(status, colour=True)
    assert "\x1b[" not in format_status(status, colour=False)
    assert "PAUSED: maintenance" in format_status(status)


def test_status_watch_refreshes(spool: SpoolLayout) -> None:
    proc = subprocess.Popen(spoolrender_cmd("status", "--watch", "0.2", "--spool", str(spool.root)),
                            stdout=subprocess.PIPE, text=True)  # fmt: skip
    time.sleep(1.5)
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=10)
    assert proc.returncode == 0
    assert out.count(f"spool {spool.root}") >= 3


def test_show_describes_a_job(busy_spool: SpoolLayout) -> None:
    result = cli("show", "bad", "--spool", str(busy_spool.root))
    assert result.returncode == 0
    assert result.stdout.splitlines()[0].startswith("bad: failed  (")
    assert "run 1: failed on" in result.stdout and "props.title is missing" in result.stdout
    assert re.search(r"log: .*/failed/bad\.[0-9a-f]{12}/run-0001\.log", result.stdout)
    (info,) = json.loads(cli("show", "long", "--json", "--spool", str(busy_spool.root)).stdout)
    assert info["state"] == "running" and info["heartbeat"]["progress"] > 0
    missing = cli("show", "nope", "--spool", str(busy_spool.root))
    assert missing.returncode == 1 and "no job with id 'nope'" in missing.stderr


def test_cancel_queued_retry_and_running_jobs(busy_spool: SpoolLayout) -> None:
    root = str(busy_spool.root)
    out = cli("cancel", "waiting", "--spool", root)
    assert out.returncode == 0 and "moved to failed/waiting." in out.stdout
    out = cli("cancel", "flaky", "--spool", root)
    assert out.returncode == 0 and "moved to failed/flaky." in out.stdout
    out = cli("cancel", "long", "--spool", root)
    assert out.returncode == 0 and "asked its runner to stop it" in out.stdout
    wait_for(lambda: entries(busy_spool, "running") == [], timeout=20)  # next heartbeat (0.2 s) stops it
    reasons = {}
    for entry in entries(busy_spool, "failed"):
        failure = json.loads((busy_spool.failed / entry / "failure.json").read_text())
        reasons[failure["id"]] = (failure["kind"], failure["reason"])
    for job in ("waiting", "flaky", "long"):
        kind, reason = reasons[job]
        assert kind == "cancelled" and reason.startswith("cancelled by ") and "@" in reason
    assert not (busy_spool.root / "output" / "long.mp4").exists()
    again = cli("cancel", "long", "--spool", root)
    assert again.returncode == 1 and "no queued or running job" in again.stderr


def test_pause_stops_claiming_everywhere_until_resume(spool: SpoolLayout, start_runner: Any) -> None:
    root = str(spool.root)
    assert cli("pause", "--reason", "disk swap", "--spool", root).returncode == 0
    drop(spool, "a.yaml", command_job())
    result = drain(spool)
    assert result.returncode == 4 and "spool paused" in result.stdout
    runner = start_runner()
    time.sleep(1.5)
    assert entries(spool, "incoming") == ["a.yaml"]
    assert json.loads(cli("status", "--json", "--spool", root).stdout)["paused"] == "disk swap"
    assert cli("resume", "--spool", root).returncode == 0
    wait_for(lambda: len(entries(spool, "done")) == 1, timeout=20)
    runner.send_signal(signal.SIGTERM)
    assert runner.wait(timeout=20) == 0


def test_purge_forgets_old_finished_jobs_only(spool: SpoolLayout) -> None:
    drop(spool, "old.yaml", command_job())
    drop(spool, "oldfail.yaml", command_job(exit=65))
    drain(spool)
    for state in ("done", "failed"):
        (entry,) = entries(spool, state)
        week_ago = time.time() - 8 * 86400
        os.utime(spool.state_dir(state) / entry, (week_ago, week_ago))
    drop(spool, "new.yaml", command_job())
    drain(spool)
    root = str(spool.root)
    dry = cli("purge", "--older-than", "7d", "--dry-run", "--spool", root)
    assert dry.returncode == 0 and "would purge 2 job(s)" in dry.stdout and len(entries(spool, "done")) == 2
    only_failed = cli("purge", "--older-than", "7d", "--state", "failed", "--spool", root)
    assert "purged 1 job(s)" in only_failed.stdout and entries(spool, "failed") == []
    assert "purged 1 job(s)" in cli("purge", "--older-than", "1w", "--spool", root).stdout
    (left,) = entries(spool, "done")
    assert left.startswith("new.")
    assert (spool.root / "output" / "old.mp4").exists()  # outputs are never touched
    bad = cli("purge", "--older-than", "soon", "--spool", root)
    assert bad.returncode == 1 and "invalid duration" in bad.stderr


def test_runner_metrics_textfile_and_json_logs(spool: SpoolLayout, tmp_path: Path) -> None:
    textfile = tmp_path / "spoolrender.prom"
    drop(spool, "ok1.yaml", command_job())
    drop(spool, "ok2.yaml", command_job())
    drop(spool, "no.yaml", command_job(exit=65))
    result = drain(spool, "--metrics-textfile", str(textfile), "--runner-name", "r1", "--log-format", "json")
    assert result.returncode == 3
    values: dict[str, float] = {}
    for family in text_string_to_metric_families(textfile.read_text()):
        for sample in family.samples:
            assert sample.labels.get("runner") == "r1"
            key = sample.name + "".join(f",{k}={v}" for k, v in sorted(sample.labels.items()) if k != "runner")
            values[key] = sample.value
    assert values["spoolrender_jobs_claimed_total"] == 3
    assert values["spoolrender_jobs_finished_total,outcome=done"] == 2
    assert values["spoolrender_jobs_finished_total,outcome=failed"] == 1
    assert values["spoolrender_jobs,state=done"] == 2 and values["spoolrender_jobs,state=failed"] == 1
    assert values["spoolrender_render_duration_seconds_count"] == 2
    assert values["spoolrender_job_attempts_count"] == 3
    assert values["spoolrender_slots"] == 2 and values["spoolrender_slots_busy"] == 0

    events = [json.loads(line) for line in result.stderr.splitlines()]  # every line is JSON
    changes = [e for e in events if "to" in e and "from" in e]
    done = [e for e in changes if e["to"] == "done"]
    assert {e["job"] for e in done} == {"ok1", "ok2"}
    assert all(e["from"] == "running" and e["attempt"] == 1 and e["duration"] >= 0 and e["host"] for e in done)
    (failed,) = [e for e in changes if e["to"] == "failed"]
    assert failed["kind"] == "command-exit" and "status 65" in failed["reason"]
    promtool_check(textfile.read_text())  # last: it skips where promtool is missing


def test_status_prometheus_for_cron(spool: SpoolLayout) -> None:
    drop(spool, "w.yaml", command_job())
    out = cli("status", "--prometheus", "--spool", str(spool.root))
    families = {f.name: f for f in text_string_to_metric_families(out.stdout)}
    jobs = {s.labels["state"]: s.value for s in families["spoolrender_jobs"].samples}
    assert jobs == {"incoming": 1, "running": 0, "retry": 0, "done": 0, "failed": 0}
    assert families["spoolrender_backlog_age_seconds"].samples[0].value >= 59
    promtool_check(out.stdout)


def test_stopped_runner_removes_its_textfile(spool: SpoolLayout, start_runner: Any, tmp_path: Path) -> None:
    textfile = tmp_path / "r.prom"
    runner = start_runner("--metrics-textfile", str(textfile))
    wait_for(textfile.exists, timeout=20)
    runner.send_signal(signal.SIGTERM)
    assert runner.wait(timeout=20) == 0
    assert not textfile.exists()  # NoRunner alerts, not a frozen "online" runner


def test_find_job_in_incoming_by_name_or_any_spelling_of_its_id(spool: SpoolLayout) -> None:
    from spoolrender.config import load_config
    from spoolrender.lookup import find_job

    files = {
        "named.yaml": b"id: target\ncomposition: Tiny\n",
        "escaped.yaml": b'id: "t\\x61rget"\ncomposition: Tiny\n',
        "wide.yaml": "id: target\ncomposition: Tiny\n".encode("utf-16"),  # not UTF-8: invalid, id "wide"
        "target.yaml": b"id: other\ncomposition: Tiny\n",  # the name does not decide
        "mention.yaml": b"id: bystander\ncomposition: Tiny\nprops: {title: target}\n",
        "plain.yaml": b"composition: Tiny\n",
    }
    for name, data in files.items():
        (spool.incoming / name).write_bytes(data)
    config = load_config(spool.root, environ={})

    def where(job_id: str) -> list[str]:
        return [found.entry for found in find_job(config, job_id)]

    assert where("target") == ["incoming/escaped.yaml", "incoming/named.yaml"]
    assert where("wide") == ["incoming/wide.yaml"]
    assert where("other") == ["incoming/target.yaml"]
    assert where("plain") == ["incoming/plain.yaml"]
    assert where("bystander") == ["incoming/mention.yaml"]
    assert where("mention") == []
