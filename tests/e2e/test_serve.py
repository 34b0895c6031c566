"""`spoolrender serve`: the JSON API, the event stream and metrics of a real server process
over a real spool worked by a real runner, and the bad requests it must refuse unharmed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families
from support.browser.server import Server, SseEvent, running_server
from support.processes import spoolrender_cmd, stopped
from support.spool_jobs import allow_steps, command_job, drop, entries, write_spool_config
from support.waiting import wait_for

import spoolrender
from spoolrender.config.spool_config import load_config
from spoolrender.errors import ConfigError
from spoolrender.serve.events import EventHub
from spoolrender.serve.listen import parse_listen
from spoolrender.spool.heartbeat import read_heartbeat
from spoolrender.spool.layout import SpoolLayout, init_spool

SCHEMA = json.loads((Path(spoolrender.__file__).parent / "status.schema.json").read_text())
TOKEN = "test-token-0123456789abcdef"
STATES = ("incoming", "running", "retry", "done", "failed")


def drain(layout: SpoolLayout) -> int:
    cmd = spoolrender_cmd("run", "--drain", "--spool", str(layout.root))
    return subprocess.run(cmd, capture_output=True, check=False, timeout=120).returncode


def running_with_progress(layout: SpoolLayout) -> bool:
    names = entries(layout, "running")
    hb = read_heartbeat(layout.running / names[0]) if len(names) == 1 else None
    return hb is not None and (hb.progress or 0) > 0


def long_props(layout: SpoolLayout) -> dict[str, str]:
    """The props of the busy spool's running job: held at 30% until the runner stops it."""
    return {"steps_file": str(layout.root.parent / "long-steps")}


def spool_tree(layout: SpoolLayout) -> list[tuple[str, int, int]]:
    """Every file and directory of the spool except the private area (clock probes live there)."""
    out = []
    for dirpath, dirnames, filenames in os.walk(layout.root):
        dirnames[:] = [d for d in dirnames if d != ".spoolrender"]
        for name in [*dirnames, *filenames]:
            st = os.lstat(Path(dirpath) / name)
            out.append((str((Path(dirpath) / name).relative_to(layout.root)), st.st_size, st.st_mtime_ns))
    return sorted(out)


def item_schema(section: str) -> dict[str, Any]:
    schema: dict[str, Any] = SCHEMA["properties"][section]["items"]
    return schema


@pytest.fixture(scope="module")
def busy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[SpoolLayout, Server]]:
    """A spool with a job in every state (one rendering under a live runner) and a server over it."""
    root = tmp_path_factory.mktemp("busy")
    layout = init_spool(root / "spool")
    write_spool_config(layout, {"backoff_base_seconds": 900, "backoff_cap_seconds": 900, "slots": 1})
    drop(layout, "good.yaml", command_job())
    drop(layout, "bad.yaml", command_job(exit=65, message="props.title is missing"))
    drop(layout, "flaky.yaml", {**command_job(exit=1), "priority": 3})
    assert drain(layout) == 3  # one job failed for good
    allow_steps(Path(long_props(layout)["steps_file"]), 3)  # and no further: it runs as long as the module
    drop(layout, "long.yaml", command_job(**long_props(layout)))
    with open(root / "runner.log", "wb") as out:
        runner = subprocess.Popen(spoolrender_cmd("run", "--spool", str(layout.root)), stdout=out, stderr=out)
    try:
        wait_for(lambda: running_with_progress(layout), timeout=60)
        drop(layout, "waiting.yaml", {**command_job(), "not_before": "2099-01-01T00:00:00Z"})
        with running_server(layout.root, root / "serve.log", "--poll", "0.2") as server:
            yield layout, server
    finally:
        # SIGTERM twice (the second skips the grace time): the runner cancels the render and
        # its process group; a SIGKILL would leave the held render running as an orphan.
        for _ in range(2):
            if runner.poll() is None:
                runner.terminate()
            time.sleep(0.3)
        try:
            runner.wait(timeout=20)
        except subprocess.TimeoutExpired:
            runner.kill()
            runner.wait()


# --- reading ----------------------------------------------------------------------------


def test_status_is_the_status_json_document(busy: tuple[SpoolLayout, Server]) -> None:
    layout, server = busy
    status = server.get_json("/status")
    jsonschema.validate(status, SCHEMA)
    assert status["counts"] == {**dict.fromkeys(STATES, 1), "split": 0}
    assert status["spool"] == str(layout.root)


def test_jobs_lists_every_state_with_status_objects(busy: tuple[SpoolLayout, Server]) -> None:
    _, server = busy
    page = server.get_json("/jobs")
    assert page["counts"] == {**dict.fromkeys(STATES, 1), "split": 0} and page["total"] == 5
    by_id = {job["id"]: job for job in page["jobs"]}
    assert [job["state"] for job in page["jobs"]] == list(STATES)  # state order
    assert {job["id"]: job["state"] for job in page["jobs"]} == {
        "waiting": "incoming", "long": "running", "flaky": "retry", "good": "done", "bad": "failed",
    }  # fmt: skip
    # Where they overlap, items are exactly the objects of `status --json` (plus their state,
    # and what browsing adds: a running job's claim time, a retry's last error kind, and
    # every job's queue and required tags).
    added = {"running": {"started_at"}, "retry": {"kind"}, "failed": set()}
    assert all(job["queue"] == "default" and job["requires"] == [] for job in page["jobs"])
    for state, section in (("running", "running"), ("retry", "retry"), ("failed", "recent_failures")):
        (item,) = [j for j in page["jobs"] if j["state"] == state]
        extra = {"state", "queue", "requires", *added[state]}
        jsonschema.validate({k: v for k, v in item.items() if k not in extra}, item_schema(section))
    assert 0 < by_id["long"]["progress"] <= 1 and not by_id["long"]["stale"]
    assert by_id["flaky"]["priority"] == 3 and by_id["flaky"]["due_in_seconds"] > 300
    assert by_id["bad"]["kind"] == "command-exit" and "props.title is missing" in by_id["bad"]["reason"]
    assert by_id["good"]["output"].endswith("good.mp4") and by_id["good"]["bytes"] > 0
    assert by_id["waiting"]["entry"] == "waiting.yaml" and by_id["waiting"]["queued_at"] > 0


def test_jobs_filter_and_paging(busy: tuple[SpoolLayout, Server]) -> None:
    _, server = busy
    failed = server.get_json("/jobs?state=failed")
    assert failed["state"] == "failed" and failed["total"] == 1 and [j["id"] for j in failed["jobs"]] == ["bad"]
    everything = [j["id"] for j in server.get_json("/jobs")["jobs"]]
    pages = [server.get_json(f"/jobs?limit=2&offset={offset}") for offset in (0, 2, 4, 6)]
    assert [len(p["jobs"]) for p in pages] == [2, 2, 1, 0]
    assert [j["id"] for p in pages for j in p["jobs"]] == everything
    assert pages[1]["offset"] == 2 and pages[1]["limit"] == 2 and pages[1]["total"] == 5
    assert server.get_json("/jobs?state=done&limit=1000")["jobs"][0]["id"] == "good"


def test_job_detail_in_every_state(busy: tuple[SpoolLayout, Server]) -> None:
    layout, server = busy
    long = server.get_json("/jobs/long")
    assert long["state"] == "running" and long["entry"].startswith("running/long.")
    assert 0 < long["progress"] <= 1 and long["heartbeat"]["progress"] == pytest.approx(long["progress"], abs=0.2)
    assert long["job"]["renderer"] == "command" and long["job"]["props"] == long_props(layout)
    bad = server.get_json("/jobs/bad")
    assert bad["state"] == "failed" and bad["attempts"] == 1
    assert "props.title is missing" in bad["failure"]["reason"]
    assert bad["errors"][0]["kind"] == "command-exit" and bad["log_url"] == "/jobs/bad/log"
    good = server.get_json("/jobs/good")
    assert good["state"] == "done" and good["progress"] == 1.0 and good["result"]["bytes"] > 0
    flaky = server.get_json("/jobs/flaky")
    assert flaky["state"] == "retry" and flaky["attempts"] == 1 and flaky["errors"]
    waiting = server.get_json("/jobs/waiting")
    assert waiting["state"] == "incoming" and waiting["job"]["not_before"] > time.time()
    assert [e["state"] for e in waiting["entries"]] == ["incoming"]


def test_job_log_tail(busy: tuple[SpoolLayout, Server]) -> None:
    _, server = busy
    log = server.get("/jobs/bad/log")
    assert log.status == 200 and log.headers["content-type"] == "text/plain; charset=utf-8"
    assert b"props.title is missing" in log.body
    assert log.headers["x-spoolrender-log"].startswith("failed/bad.")
    assert log.headers["x-spoolrender-log"].endswith("/run-0001.log")
    size = int(log.headers["x-spoolrender-log-size"])
    assert size == len(log.body)
    five = server.get("/jobs/bad/log?bytes=5")
    assert five.body == log.body[-5:] and five.headers["x-spoolrender-log-offset"] == str(size - 5)
    last = server.get("/jobs/bad/log?lines=1")
    assert last.body == log.body.splitlines(keepends=True)[-1]
    assert server.get("/jobs/bad/log?run=1").body == log.body
    assert server.get("/jobs/bad/log?run=2").status == 404
    live = server.get("/jobs/long/log")  # a running job's log as it is now
    assert live.status == 200 and b"PROGRESS" in live.body
    none = server.get("/jobs/waiting/log")
    assert none.status == 404 and "no render log" in none.error


def test_metrics_are_the_spool_gauges(busy: tuple[SpoolLayout, Server]) -> None:
    _, server = busy
    resp = server.get("/metrics")
    assert resp.status == 200
    assert resp.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    families = {f.name: f for f in text_string_to_metric_families(resp.body.decode())}
    jobs = {s.labels["state"]: s.value for s in families["spoolrender_jobs"].samples}
    assert jobs == {**dict.fromkeys(STATES, 1.0), "split": 0.0}
    assert families["spoolrender_runners_online"].samples[0].value == 1
    assert families["spoolrender_backlog_age_seconds"].samples[0].value >= 59


def test_dashboard_files_are_served(busy: tuple[SpoolLayout, Server]) -> None:
    _, server = busy
    page = server.get("/")
    assert page.status == 200 and page.headers["content-type"] == "text/html; charset=utf-8"
    assert b'<script src="/app.js"' in page.body and "script-src 'self'" in page.headers["content-security-policy"]
    script = server.get("/app.js")
    assert script.headers["content-type"].startswith("text/javascript") and b"EventSource" in script.body
    assert server.get("/style.css").headers["content-type"].startswith("text/css")


def test_writes_are_off_without_a_token(busy: tuple[SpoolLayout, Server]) -> None:
    layout, server = busy
    for path in ("/jobs?name=x.yaml", "/jobs/bad/retry", "/jobs/waiting/cancel"):
        resp = server.request("POST", path, body=b"renderer: command\n", headers={"Authorization": f"Bearer {TOKEN}"})
        assert resp.status == 403 and "write actions are disabled" in resp.error and "serve_token" in resp.error
    assert entries(layout, "incoming") == ["waiting.yaml"]


# --- the event stream -----------------------------------------------------------------------


def test_event_stream_follows_a_job_to_done(spool: SpoolLayout, start_runner: Any, tmp_path: Path) -> None:
    steps = tmp_path / "steps"  # the render goes on as the test sees each step
    drop(spool, "follow.yaml", command_job(steps_file=str(steps)))
    with running_server(spool.root, tmp_path / "serve.log", "--poll", "0.1", "--keepalive", "0.5") as server:
        everything = server.events()
        first = everything.next()
        assert first.kind == "summary" and first.data["counts"]["incoming"] == 1 and first.id
        assert everything.retry == 2000
        stream = server.events("/events?job=follow")
        try:
            initial = stream.next()
            assert (initial.kind, initial.data["state"], initial.data.get("initial")) == ("state", "incoming", True)
            start_runner()

            def finished(e: SseEvent) -> bool:
                return e.kind == "state" and e.data["state"] in ("done", "failed")

            def reached(fraction: float) -> Callable[[SseEvent], bool]:
                return lambda e: finished(e) or (e.kind == "progress" and (e.data["progress"] or 0) >= fraction)

            events: list[SseEvent] = []
            for step in (2, 4, 6, 8):  # held at each step until the stream has shown it
                allow_steps(steps, step)
                events += stream.until(reached(step / 10))
            allow_steps(steps, 10)
            events += stream.until(finished)
        finally:
            stream.close()
        states = [(e.data["previous"], e.data["state"]) for e in events if e.kind == "state"]
        assert states[-1] == ("running", "done") and ("incoming", "running") in states
        # (Before its first PROGRESS line a running job's progress is null.)
        progress = [e.data["progress"] for e in events if e.kind == "progress" and e.data["progress"] is not None]
        assert len(set(progress)) >= 3, progress  # several steps, seen as they happen
        assert progress == sorted(progress) and 0 < progress[0] < 1
        assert all(e.data["id"] == "follow" for e in events)
        assert all(e.id for e in events)  # resumable
        done = events[-1].data
        assert done["result"]["output"].endswith("follow.mp4") and done["result"]["bytes"] > 0
        assert Path(done["result"]["output"]).exists()

        # The unfiltered stream saw the same, plus summaries with the new counts; and it sends
        # keepalive comments while nothing happens.
        seen = everything.until(lambda e: e.kind == "summary" and e.data["counts"]["done"] == 1)
        assert any(e.kind == "state" and e.data["state"] == "done" for e in seen)
        last_id = seen[-1].id
        everything.close()

        # A finished job: a follower gets its final state at once.
        late = server.events("/events?job=follow")
        try:
            final = late.next()
            assert final.data["state"] == "done" and final.data["result"]["bytes"] > 0
        finally:
            late.close()
        # Reconnecting with our Last-Event-ID resumes after it (nothing seen twice); an id
        # that is not ours starts with a fresh summary.
        assert last_id is not None
        resumed = server.events(headers={"Last-Event-ID": last_id})
        try:
            drop(spool, "next.yaml", {**command_job(), "not_before": "2099-01-01T00:00:00Z"})
            event = resumed.next()
            assert event.id is not None and sequence(event.id) > sequence(last_id)
        finally:
            resumed.close()
        stranger = server.events(headers={"Last-Event-ID": "not-ours-1"})
        try:
            assert stranger.next().kind == "summary"
        finally:
            stranger.close()


def sequence(event_id: str) -> int:
    return int(event_id.rsplit("-", 1)[1])


def test_resuming_needs_an_unbroken_watch(spool: SpoolLayout) -> None:
    """Changes made while nobody listened are no events: such a client starts afresh."""
    hub = EventHub(load_config(spool.root, environ={}), poll_seconds=0.05)
    hub.start()
    try:
        with hub.subscription():
            summary = hub.latest_summary()
            first_id = f"{hub.boot}-{summary.seq}"
            assert hub.resume_point(first_id) == summary.seq  # watched without a gap: resumable
            drop(spool, "a.yaml", command_job())
            (event,) = [e for e in hub.wait(summary.seq, 5) or [] if e.kind == "state"]
            assert json.loads(event.data) == {"id": "a", "state": "incoming", "previous": None,
                                              "entry": "incoming/a.yaml"}  # fmt: skip
            last_id = f"{hub.boot}-{hub.last_seq()}"
        drop(spool, "b.yaml", command_job())  # nobody listens: no event for this
        with hub.subscription():
            assert hub.resume_point(last_id) is None and hub.resume_point(first_id) is None
            assert json.loads(hub.latest_summary().data)["counts"]["incoming"] == 2
            assert hub.resume_point("other-1") is None and hub.resume_point(f"{hub.boot}-999999") is None
    finally:
        hub.stop()


def test_a_claim_seen_half_way_is_one_move_into_running(spool: SpoolLayout, start_runner: Any, tmp_path: Path) -> None:
    """A claim makes running/<entry> (with its lock) before it renames the job file in; a
    poll in between sees the job in both places: one move incoming -> running, never a
    "removed" job (the runner stops itself right there, as a slow machine would)."""
    drop(spool, "claimed.yaml", command_job())
    with running_server(spool.root, tmp_path / "serve.log", "--poll", "0.1") as server:
        stream = server.events("/events?job=claimed")
        try:
            assert stream.next().data["state"] == "incoming"
            runner = start_runner(env={"SPOOLRENDER_PAUSE_AT": "claim-before-rename"})
            wait_for(lambda: stopped(runner), timeout=60)
            half_way = stream.until(lambda e: e.kind == "state")
            runner.send_signal(signal.SIGCONT)
            rest = stream.until(lambda e: e.kind == "state" and e.data["state"] in ("done", "failed", "removed"))
        finally:
            stream.close()
    states = [(e.data["previous"], e.data["state"]) for e in half_way + rest if e.kind == "state"]
    assert states == [("incoming", "running"), ("running", "done")], states


def test_event_stream_keepalive_comments(spool: SpoolLayout, tmp_path: Path) -> None:
    with running_server(spool.root, tmp_path / "serve.log", "--keepalive", "0.3") as server:
        stream = server.events()
        try:
            assert stream.next().kind == "summary"
            # Nothing changes on the spool: comment lines keep the connection alive.
            lines = [stream.response.fp.readline() for _ in range(4)]
            assert b": keepalive\n" in lines, lines
        finally:
            stream.close()


def test_unknown_job_to_follow(spool: SpoolLayout, tmp_path: Path) -> None:
    with running_server(spool.root, tmp_path / "serve.log") as server:
        resp = server.get("/events?job=nope")
        assert resp.status == 404 and "nope" in resp.error
        assert server.get("/events?job=../x").status == 400
        assert server.get("/events?since=1").status == 400


# --- write actions and bad requests -----------------------------------------------------------


@pytest.fixture
def guarded(spool: SpoolLayout, tmp_path: Path) -> Iterator[tuple[SpoolLayout, Server]]:
    """A spool with done, failed and waiting jobs, no runner, and a server with a token."""
    write_spool_config(spool, {"serve_token": TOKEN})
    os.chmod(spool.root / "spoolrender.yaml", 0o600)  # a token only in a file others cannot read
    drop(spool, "good.yaml", command_job())
    drop(spool, "bad.yaml", command_job(exit=65, message="props.title is missing"))
    assert drain(spool) == 3
    drop(spool, "waiting.yaml", {**command_job(), "not_before": "2099-01-01T00:00:00Z"})
    with running_server(spool.root, tmp_path / "serve.log") as server:
        yield spool, server


BAD_PATHS = [
    "/jobs/..",
    "/jobs/%2e%2e",
    "/jobs/%2E%2E/log",
    "/jobs/..%2F..%2Fetc%2Fpasswd",
    "/jobs/good%2F..%2F..%2Fdone",
    "/jobs/../../etc/passwd",
    "/jobs/good/log/../../../../etc/passwd",
    "/jobs/./good",
    "/jobs/a%00b",
    "/jobs/%00/log",
    "/jobs/%ff%fe",
    "/jobs/good%5C..%5Cx",
    "/jobs/-good",
    "/jobs/.hidden",
    "/jobs/" + "a" * 200,
    "/jobs/good/log?path=/etc/passwd",
    "/jobs/good/log?run=../../x",
    "/jobs/good/log?bytes=-1",
    "/jobs/good/log?lines=1&bytes=2",
    "/jobs?state=../failed",
    "/jobs?state=done&state=failed",
    "/jobs?limit=abc",
    "/jobs?limit=0",
    "/jobs?limit=99999999999999999999999",
    "/jobs?offset=1e9",
    "/jobs?%ff=1",
    "/jobs?state=%ff",
    "/jobs?novalue",
    "/jobs?a=1&b=2&c=3&d=4&e=5&f=6&g=7&h=8&i=9&j=10",
    "/jobs?" + "&" * 3000,
    "/events?job=%2e%2e%2f",
]


def test_bad_requests_are_refused_and_change_nothing(guarded: tuple[SpoolLayout, Server]) -> None:
    layout, server = guarded
    before = spool_tree(layout)
    status_before = server.get_json("/status")["counts"]

    for path in BAD_PATHS:
        resp = server.get(path)
        assert resp.status == 400, (path, resp.status, resp.body[:300])
        assert resp.error  # JSON {"error": ...}
    unknown = server.get("/jobs/nope")
    assert unknown.status == 404 and unknown.error == "no job with id 'nope'"
    assert server.get("/nope").status == 404 and server.get("/jobs/good/nope").status == 404
    assert server.get("/jobs?" + "a=1&" * 2000).status == 414  # longer than the URL cap
    wrong_method = server.request("PUT", "/jobs")
    assert wrong_method.status == 405 and wrong_method.headers["allow"] == "GET, POST"
    assert server.request("PATCH", "/jobs/good").status == 405
    assert server.request("DELETE", "/jobs/good").status in (401, 403)  # a write action (test_serve_bulk.py)
    assert server.request("OPTIONS", "/jobs").status == 405
    rebinding = server.get("/jobs", headers={"Host": "evil.example:8765"})
    assert rebinding.status == 403 and "DNS rebinding" in rebinding.error
    assert server.get("/status", headers={"Host": f"localhost:{server.port}"}).status == 200

    # What http.client will not send: raw bytes.
    assert server.raw(b"GET /jobs/a\x00b HTTP/1.0\r\n\r\n").status == 400
    assert server.raw(b"HELLO\r\n\r\n").status == 400
    assert server.raw(b"GET /" + b"x" * 70_000 + b" HTTP/1.0\r\n\r\n").status == 414
    assert server.raw(b"GET /jobs HTTP/1.0\r\nX-Big: " + b"y" * 20_000 + b"\r\n\r\n").status == 431
    many = b"".join(b"X-H%d: v\r\n" % i for i in range(150))
    assert server.raw(b"GET /jobs HTTP/1.0\r\n" + many + b"\r\n").status == 431
    assert server.raw(b"GET /jobs HTTP/9.9\r\n\r\n").status == 505
    bogus = server.raw(b"BREW /jobs HTTP/1.0\r\n\r\n")
    assert bogus.status == 501 and bogus.json()["error"]

    # Writes without the token, with a wrong one, or with the wrong scheme.
    job = yaml.safe_dump(command_job()).encode()
    auth_cases = [
        ({}, 401),
        ({"Authorization": "Bearer"}, 401),
        ({"Authorization": f"Basic {TOKEN}"}, 401),
        ({"Authorization": "Bearer wrong-token-0123456789"}, 403),
        ({"Authorization": f"Bearer {TOKEN}x"}, 403),
        ({"Authorization": f"Bearer {TOKEN[:-1]}"}, 403),
    ]
    for headers, expected in auth_cases:
        for path in ("/jobs?name=new.yaml", "/jobs/bad/retry", "/jobs/waiting/cancel"):
            resp = server.request("POST", path, body=job, headers=headers)
            assert resp.status == expected, (headers, path, resp.status, resp.body)
            if expected == 401:
                assert resp.headers["www-authenticate"].startswith("Bearer")
    auth = f"Authorization: Bearer {TOKEN}\r\n".encode()
    too_big = server.raw(b"POST /jobs?name=big.yaml HTTP/1.0\r\n" + auth + b"Content-Length: 10485760\r\n\r\n")
    assert too_big.status == 413 and "max_job_bytes" in too_big.json()["error"]
    assert server.raw(b"POST /jobs HTTP/1.0\r\n" + auth + b"\r\n").status == 411
    assert server.raw(b"POST /jobs HTTP/1.0\r\n" + auth + b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n").status == 411
    assert server.raw(b"POST /jobs HTTP/1.0\r\n" + auth + b"Content-Length: x\r\n\r\n").status == 400
    right = {"Authorization": f"Bearer {TOKEN}"}
    invalid = server.request("POST", "/jobs?name=broken.yaml", body=b"renderer: nope\nbogus: 1\n", headers=right)
    assert invalid.status == 422 and invalid.error == "job is invalid"
    problems = invalid.json()["problems"]
    assert any("bogus" in p for p in problems) and any("renderer" in p for p in problems)
    assert server.request("POST", "/jobs?name=../x.yaml", body=job, headers=right).status == 400
    assert server.request("POST", "/jobs?name=.hidden", body=job, headers=right).status == 400
    assert server.request("POST", "/jobs?name=a.part", body=job, headers=right).status == 400
    assert server.request("POST", "/jobs/good/retry", headers=right).status == 409  # done, not failed
    assert server.request("POST", "/jobs/good/cancel", headers=right).status == 409  # finished
    assert server.request("POST", "/jobs/nope/cancel", headers=right).status == 404
    assert server.request("POST", "/jobs/waiting.yaml/../cancel", headers=right).status == 400

    # Nothing changed, and the server still answers.
    assert spool_tree(layout) == before
    assert server.get_json("/status")["counts"] == status_before
    assert server.get_json("/jobs/good")["state"] == "done"


def test_writes_with_the_token(guarded: tuple[SpoolLayout, Server]) -> None:
    layout, server = guarded
    right = {"Authorization": f"Bearer {TOKEN}"}
    job = yaml.safe_dump({**command_job(), "id": "from-api", "priority": 7}).encode()
    created = server.request("POST", "/jobs?name=api-job.yaml", body=job, headers=right)
    assert created.status == 201, created.body
    assert created.json() == {"id": "from-api", "state": "incoming", "entry": "incoming/api-job.yaml",
                              "url": "/jobs/from-api"}  # fmt: skip
    assert created.headers["location"] == "/jobs/from-api"
    assert (layout.incoming / "api-job.yaml").read_bytes() == job
    assert oct((layout.incoming / "api-job.yaml").stat().st_mode & 0o777) == "0o644"
    assert server.get_json("/jobs/from-api")["job"]["priority"] == 7
    again = server.request("POST", "/jobs?name=api-job.yaml", body=job, headers=right)
    assert again.status == 409 and "already exists" in again.error
    named = server.request("POST", "/jobs", body=job, headers={**right, "X-Spoolrender-Name": "by-header"})
    assert named.status == 201 and (layout.incoming / "by-header.yaml").exists()
    unnamed = server.request("POST", "/jobs", body=yaml.safe_dump(command_job()).encode(), headers=right)
    assert unnamed.status == 201 and unnamed.json()["entry"].startswith("incoming/api-")

    retried = server.request("POST", "/jobs/bad/retry", headers=right)
    answer = retried.json()
    assert retried.status == 200 and (answer["id"], answer["state"], answer["moved"]) == ("bad", "retry", 1)
    (change,) = answer["changes"]  # as `spoolrender retry bad` says it
    assert "back to retry/, due now, with fresh attempts" in change and answer["due"] <= time.time()
    assert entries(layout, "failed") == [] and len(entries(layout, "retry")) == 1

    cancelled = server.request("POST", "/jobs/waiting/cancel", headers=right)
    assert cancelled.status == 200 and "moved to failed/waiting." in cancelled.json()["cancelled"][0]
    failure = json.loads((layout.failed / entries(layout, "failed")[0] / "failure.json").read_text())
    assert failure["kind"] == "cancelled" and "spoolrender serve" in failure["reason"]


def test_cancel_a_running_job_over_http(spool: SpoolLayout, start_runner: Any, tmp_path: Path) -> None:
    write_spool_config(spool, {"serve_token": TOKEN})
    os.chmod(spool.root / "spoolrender.yaml", 0o600)  # a token only in a file others cannot read
    steps = tmp_path / "steps"
    allow_steps(steps, 1)  # and no further: it renders until it is cancelled
    drop(spool, "long.yaml", command_job(steps_file=str(steps)))
    start_runner()
    wait_for(lambda: running_with_progress(spool), timeout=60)
    with running_server(spool.root, tmp_path / "serve.log", "--poll", "0.1") as server:
        stream = server.events("/events?job=long")
        try:
            resp = server.request("POST", "/jobs/long/cancel", headers={"Authorization": f"Bearer {TOKEN}"})
            assert resp.status == 200 and "asked its runner to stop it" in resp.json()["cancelled"][0]
            final = stream.until(lambda e: e.kind == "state" and e.data["state"] == "failed")[-1]
            assert final.data["kind"] == "cancelled" and final.data["previous"] == "running"
        finally:
            stream.close()


# --- the process ---------------------------------------------------------------------------------


def test_listen_addresses() -> None:
    assert parse_listen("127.0.0.1:0").host == "127.0.0.1"
    assert parse_listen("8765").host == "127.0.0.1"
    v6 = parse_listen("[::1]:8765")
    assert (v6.host, v6.port, v6.url()) == ("::1", 8765, "http://[::1]:8765/")
    assert parse_listen("localhost:1").ip.is_loopback
    assert parse_listen("0.0.0.0:8765").ip.is_unspecified  # every interface only when spelled out
    for bad in (":8765", "[]:8765", "127.0.0.1", "127.0.0.1:http", "127.0.0.1:70000", "no-such-host.invalid:1"):
        with pytest.raises(ConfigError):
            parse_listen(bad)
    with pytest.raises(ConfigError, match=r"0\.0\.0\.0:8765"):
        parse_listen(":8765")


def test_serve_refuses_what_it_cannot_serve(tmp_path: Path) -> None:
    def serve(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(spoolrender_cmd("serve", *args), capture_output=True, text=True, timeout=30, check=False)

    missing = serve("--spool", str(tmp_path / "nope"), "--listen", "127.0.0.1:0")
    assert missing.returncode == 1 and "spoolrender:" in missing.stderr
    layout = init_spool(tmp_path / "spool")
    everywhere = serve("--spool", str(layout.root), "--listen", ":0")
    assert everywhere.returncode == 1 and "0.0.0.0:0" in everywhere.stderr
    help_text = serve("--help")
    assert help_text.returncode == 0 and "examples:" in help_text.stdout and "--listen" in help_text.stdout


# Lowest first: a module of spoolrender.serve may import only the ones before it.
SERVE_LAYERS = (
    "listen",
    "auth",
    "readmodel",
    "browse",
    "outputs",
    "posters",
    "history",
    "api",
    "bulk",
    "events",
    "http",
    "routes",
    "server",
)


def test_serve_modules_are_layered_without_cycles() -> None:
    import ast

    package = Path(spoolrender.__file__).parent / "serve"
    assert sorted(p.stem for p in package.glob("*.py") if p.stem != "__init__") == sorted(SERVE_LAYERS)
    for level, name in enumerate(SERVE_LAYERS):
        tree = ast.parse((package / f"{name}.py").read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("spoolrender.serve"):
                imported = node.module.removeprefix("spoolrender.serve").lstrip(".") or "__init__"
                assert imported in SERVE_LAYERS[:level], f"{name} imports {imported}: only lower layers allowed"
            elif isinstance(node, ast.ImportFrom) and node.level:
                raise AssertionError(f"{name}: use absolute imports (spoolrender.serve.X)")
    # api and events are side by side: neither imports the other.
    assert "spoolrender.serve.events" not in (package / "api.py").read_text()


def test_job_page_data(busy: tuple[SpoolLayout, Server]) -> None:
    layout, server = busy
    running = server.get_json("/jobs/long")
    assert running["file_url"] == "/jobs/long/file" and running["page_url"] == "/job?id=long"
    job_file = server.get("/jobs/long/file")
    assert job_file.status == 200 and job_file.headers["content-type"].startswith("text/plain")
    assert yaml.safe_load(job_file.body) == {"renderer": "command", "command": "props", "props": long_props(layout)}
    assert job_file.headers["x-spoolrender-entry"].startswith("running/long.")
    retry = server.get_json("/jobs/flaky")
    assert retry["retry_position"] == 1 and retry["retry_total"] == 1 and retry["due"] > time.time() + 60
    waiting = server.get_json("/jobs/waiting")
    assert waiting["arrived_before"] == 0 and waiting["queued_at"] <= time.time()
    assert server.get("/jobs/nope/file").status == 404
    # Following a log: from an offset on, and nothing past its end.
    whole = server.get("/jobs/good/log?offset=0")
    size = int(whole.headers["x-spoolrender-log-size"])
    assert whole.status == 200 and len(whole.body) == size > 0
    rest = server.get(f"/jobs/good/log?offset={size - 5}")
    assert rest.body == whole.body[-5:] and rest.headers["x-spoolrender-log-offset"] == str(size - 5)
    assert server.get(f"/jobs/good/log?offset={size + 100}").body == b""
    assert server.get("/jobs/good/log?offset=1&bytes=2").status == 400
    assert server.get("/job?id=long").status == 200
    assert server.get("/job?id=..").status == 400 and server.get("/job?other=1").status == 400


def test_jobs_filters(busy: tuple[SpoolLayout, Server]) -> None:
    _, server = busy

    def ids(query: str) -> list[str]:
        page = server.get_json(f"/jobs?{query}")
        assert page["total"] == len(page["jobs"])
        return [j["id"] for j in page["jobs"]]

    assert ids("q=LO") == ["long"]  # a substring of the id, any case
    assert ids("q=a") == ["waiting", "flaky", "bad"]
    assert ids("kind=command-exit") == ["flaky", "bad"]  # a retry's last error and a failure
    assert ids("kind=command-exit&state=failed") == ["bad"]
    assert ids("kind=nope") == []
    now = time.time()
    assert "good" in ids(f"since={now - 3600:.0f}&state=done") and ids(f"until={now - 3600:.0f}&state=done") == []
    assert ids(f"since={now + 120:.0f}&state=retry") == ["flaky"]  # a retry's time is when it is due (7.5+ min)
    assert ids(f"until={now:.0f}&state=retry") == []
    started = server.get_json("/jobs?state=running")["jobs"][0]["started_at"]
    assert abs(started - now) < 600
    for bad in ("since=yesterday", "since=1e9", "until=-5", "since=20&until=10", "q=%00", "kind=" + "k" * 101):
        assert server.get(f"/jobs?{bad}").status == 400, bad


def test_pause_resume_and_actions_endpoint(guarded: tuple[SpoolLayout, Server]) -> None:
    _, server = guarded
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    assert server.get_json("/actions") == {"writes": True, "reason": None, "token_ok": None}
    assert server.get("/actions", headers=bearer).json()["token_ok"] is True
    assert server.get("/actions", headers={"Authorization": "Bearer nope"}).json()["token_ok"] is False
    assert server.request("POST", "/pause").status == 401
    resp = server.request("POST", "/pause?reason=maintenance%20window", headers=bearer)
    assert resp.status == 200 and resp.json() == {"paused": "maintenance window"}
    assert server.get_json("/status")["paused"] == "maintenance window"
    assert server.request("POST", "/pause?reason=%0Aevil", headers=bearer).status == 400
    assert server.request("POST", "/resume", headers=bearer).json() == {"paused": None, "was_paused": True}
    assert server.get_json("/status")["paused"] is None
    assert server.request("POST", "/resume", headers=bearer).json()["was_paused"] is False
