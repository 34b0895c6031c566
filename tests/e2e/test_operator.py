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
from prometheus_client.parser import text_string_to_metric_families
from support.processes import spoolrender_cmd
from support.spool_jobs import allow_steps, command_job, drop, entries, write_spool_config
from support.waiting import wait_for

import spoolrender
from spoolrender.cli.status_text import format_status
from spoolrender.spool.heartbeat import read_heartbeat
from spoolrender.spool.layout import SpoolLayout

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
def busy_spool(spool: SpoolLayout, start_runner: Any, tmp_path: Path) -> SpoolLayout:
    """A spool with jobs in every state, one of them running under a live runner."""
    write_spool_config(spool, {"backoff_base_seconds": 900, "backoff_cap_seconds": 900, "slots": 1})
    drop(spool, "good.yaml", command_job())
    drop(spool, "bad.yaml", command_job(exit=65, message="props.title is missing"))
    drop(spool, "flaky.yaml", {**command_job(exit=1), "priority": 3})
    assert drain(spool).returncode == 3  # one job failed for good
    steps = tmp_path / "long-steps"
    allow_steps(steps, 5)  # and no further: it renders until the runner stops or cancels it
    drop(spool, "long.yaml", command_job(steps_file=str(steps)))
    start_runner()
    wait_for(lambda: running_with_progress(spool), timeout=60)
    drop(spool, "waiting.yaml", {**command_job(), "not_before": "2099-01-01T00:00:00Z"})
    return spool


def test_status_lists_every_state_line_by_line(busy_spool: SpoolLayout) -> None:
    result = cli("status", "--spool", str(busy_spool.root))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    expected = [
        rf"spool {re.escape(str(busy_spool.root))}",
        r"incoming 1  running 1  retry 1  done 1  failed 1   oldest waiting \d+s",
        r"retention: off \(done/ and failed/ kept until `spoolrender purge`; see keep_done\)",
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
    assert data["counts"] == {"incoming": 1, "running": 1, "retry": 1, "done": 1, "failed": 1, "split": 0}
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
    assert proc.stdout is not None
    drawn = 0
    while drawn < 3:  # however busy the machine: wait for the snapshots, not a fixed time
        line = proc.stdout.readline()
        assert line, "status --watch ended by itself"
        drawn += line == f"spool {spool.root}\n"
    drop(spool, "new.yaml", command_job())
    line = ""
    while not line.startswith("incoming 1 "):  # a later snapshot shows the new job
        line = proc.stdout.readline()
        assert line, "status --watch ended by itself"
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=30)
    assert proc.returncode == 0


def test_show_describes_a_job(busy_spool: SpoolLayout) -> None:
    result = cli("show", "bad", "--spool", str(busy_spool.root))
    assert result.returncode == 0
    assert result.stdout.splitlines()[0].startswith("bad: failed  (")
    assert "run 1: failed on" in result.stdout and "props.title is missing" in result.stdout
    assert re.search(r"log: .*/failed/bad\.[0-9a-f]{12}/run-0001\.log", result.stdout)
    info = json.loads(cli("show", "long", "--json", "--spool", str(busy_spool.root)).stdout)
    assert info["state"] == "running" and info["heartbeat"]["progress"] > 0
    assert info["entries"] == [{"state": "running", "entry": f"running/{Path(info['path']).name}"}]
    assert info["others"] == []
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
    wait_for(lambda: entries(busy_spool, "running") == [], timeout=60)  # next heartbeat (0.2 s) stops it
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
    wait_for(lambda: len(entries(spool, "done")) == 1, timeout=60)
    runner.send_signal(signal.SIGTERM)
    assert runner.wait(timeout=60) == 0


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
    assert bad.returncode == 2 and "invalid duration" in bad.stderr


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
    assert jobs == {"incoming": 1, "running": 0, "retry": 0, "done": 0, "failed": 0, "split": 0}
    assert families["spoolrender_backlog_age_seconds"].samples[0].value >= 59
    promtool_check(out.stdout)


def test_stopped_runner_removes_its_textfile(spool: SpoolLayout, start_runner: Any, tmp_path: Path) -> None:
    textfile = tmp_path / "r.prom"
    runner = start_runner("--metrics-textfile", str(textfile))
    wait_for(textfile.exists, timeout=60)
    runner.send_signal(signal.SIGTERM)
    assert runner.wait(timeout=60) == 0
    assert not textfile.exists()  # NoRunner alerts, not a frozen "online" runner


def test_find_job_in_incoming_by_name_or_any_spelling_of_its_id(spool: SpoolLayout) -> None:
    from spoolrender.config.spool_config import load_config
    from spoolrender.ops.lookup import find_job

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


def test_status_watch_stops_on_sigint_even_when_ignored_and_on_sigterm(spool: SpoolLayout) -> None:
    # `nohup ... &`, some CI runners and cron start commands with SIGINT ignored; the
    # default KeyboardInterrupt then never comes, so the command must handle it itself.
    for signum in (signal.SIGINT, signal.SIGTERM):
        proc = subprocess.Popen(
            spoolrender_cmd("status", "--watch", "0.1", "--spool", str(spool.root)), stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
        )  # fmt: skip
        assert proc.stdout is not None
        snapshots = 0
        while snapshots < 2:  # two snapshots drawn: it is in its loop
            line = proc.stdout.readline()
            assert line, "status --watch ended by itself"
            snapshots += line.startswith("spool ")
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=30)
        assert proc.returncode == 0, (signum, err)
        assert "Traceback" not in err


def test_status_watch_exits_quietly_on_a_closed_pipe(spool: SpoolLayout) -> None:
    proc = subprocess.Popen(
        spoolrender_cmd("status", "--watch", "0.1", "--spool", str(spool.root)), stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )  # fmt: skip
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.readline().startswith(b"spool ")
    proc.stdout.close()  # as `spoolrender status --watch | head -1` does
    assert proc.wait(timeout=30) == 0
    with proc.stderr:
        assert proc.stderr.read() == b""


HOSTILE = "\x1b]0;owned\x07\x1b[2Jevil\u202e\nFORGED"


def test_spool_text_is_escaped_in_every_human_readable_output(spool: SpoolLayout, tmp_path: Path) -> None:
    root = str(spool.root)
    # A failing render whose error line carries terminal escapes and a bidi override.
    drop(spool, "loud.yaml", {**command_job(exit=65, message=HOSTILE.replace("\n", " ")), "max_attempts": 1})
    log = drain(spool, "-v")
    assert log.returncode == 3
    (failed,) = entries(spool, "failed")
    assert "\x1b]0;owned" in json.loads((spool.failed / failed / "failure.json").read_text())["reason"]
    # A waiting job whose file name holds the same, newline included.
    hostile_file = spool.incoming / f"{HOSTILE}.yaml"
    hostile_file.write_text("id: evil\nrenderer: command\ncommand: props\n")
    assert cli("pause", "--reason", HOSTILE, "--spool", root).returncode == 0
    outputs = {
        "runner log": log.stderr,
        "status": cli("status", "--spool", root).stdout,
        "show failed": cli("show", "loud", "--spool", root).stdout,
        "show incoming": cli("show", "evil", "--spool", root).stdout,
        "cancel": cli("cancel", "evil", "--spool", root).stdout,
        "show cancelled": cli("show", "evil", "--spool", root).stdout,
    }
    for what, text in outputs.items():
        assert text.strip(), what
        assert not any(c in text for c in "\x1b\x07\u202e"), (what, text)
        assert not any(line.startswith("FORGED") for line in text.splitlines()), (what, text)
    assert "\\x1b]0;owned\\x07\\x1b[2Jevil\\u202e" in outputs["status"]  # reason and pause reason
    assert "\\x1b]0;owned\\x07\\x1b[2Jevil\\u202e\\nFORGED.yaml" in outputs["show incoming"]
    assert "\\nFORGED.yaml: moved to failed/evil." in outputs["cancel"]
    # JSON stays exact: it escapes by itself, and a program reads the real name.
    shown = json.loads(cli("show", "evil", "--json", "--spool", root).stdout)
    assert shown["failure"]["reason"].startswith("cancelled by ")
    assert json.loads(cli("status", "--json", "--spool", root).stdout)["paused"] == HOSTILE.strip()


def test_status_cuts_long_reasons_at_a_word_with_an_ellipsis() -> None:
    reason = "the composition threw " + "an unexpected error " * 10 + "at frame 12"
    status = {
        "spool": "/s", "counts": dict.fromkeys(("incoming", "running", "retry", "done", "failed"), 0),
        "oldest_incoming_age_seconds": None, "paused": None, "running": [], "retry": [], "runners": [],
        "recent_failures": [
            {"id": "x", "kind": "k", "reason": reason, "entry": "x.1", "failed_at": 0},
            {"id": "y", "kind": "k", "reason": "first line\nsecond line", "entry": "y.1", "failed_at": 0},
            {"id": "z", "kind": "k", "reason": "short and whole", "entry": "z.1", "failed_at": 0},
        ],
    }  # fmt: skip
    lines = format_status(status).splitlines()
    rows = lines[lines.index("RECENT FAILURES") + 2 :][:3]
    cut = rows[0].split("  k  ", 1)[1].strip()
    assert cut.endswith("…") and len(cut) <= 120
    assert reason.startswith(cut[:-1]) and reason[len(cut) - 1] == " "  # whole words only
    assert rows[1].endswith("first line…")
    assert rows[2].endswith("short and whole")


def test_show_names_the_final_outcome_of_a_run(spool: SpoolLayout) -> None:
    drop(spool, "fine.yaml", command_job())
    assert drain(spool).returncode == 0
    text = cli("show", "fine", "--spool", str(spool.root)).stdout
    assert re.search(r"^  run 1: done on ", text, re.MULTILINE), text
    assert "publishing" not in text
    # The records keep the protocol's word: a program reading them sees what happened.
    shown = json.loads(cli("show", "fine", "--json", "--spool", str(spool.root)).stdout)
    assert shown["state"] == "done" and shown["runs"][0]["outcome"] == "publishing"


def test_printable_escapes_every_kind_of_control_character() -> None:
    from spoolrender.core.safe_text import printable, shorten

    assert printable("plain: ok — ünïcode 映像") == "plain: ok — ünïcode 映像"
    assert printable("a\nb\rc\td") == "a\\nb\\rc\\td"
    assert printable("\x1b[31m\x9b31m\x7f") == "\\x1b[31m\\x9b31m\\x7f"  # ESC, C1 CSI, DEL
    assert printable("\u202eevil\u2028") == "\\u202eevil\\u2028"  # bidi override, line separator
    assert printable("bad\udcffbyte") == "bad\\xffbyte"  # an undecodable byte of a file name
    assert printable("back\\slash") == "back\\\\slash"  # so "\\n" in output always was a newline
    assert printable("C:\\x \x1b", double_backslashes=False) == "C:\\x \\x1b"  # logs
    assert shorten("word " * 10, 12) == "word word…"
    assert shorten("x" * 30, 10) == "x" * 9 + "…"
