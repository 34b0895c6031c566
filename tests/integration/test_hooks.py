"""Completion hooks: real runner processes, a real loopback HTTP receiver, real commands."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from support.processes import spoolrender_cmd
from support.spool_jobs import command_job, drop, entries, write_spool_config
from support.waiting import wait_for

from spoolrender.config.hooks import HookSpec
from spoolrender.config.spool_config import load_config
from spoolrender.errors import ConfigError
from spoolrender.hooks.delivery import deliver
from spoolrender.hooks.plan import pending_dir, taken_dir
from spoolrender.spool.layout import SpoolLayout

Start = Callable[..., subprocess.Popen[bytes]]
SECRET = "s3cret-for-the-hook-tests-0123456789"


@dataclass
class Receiver:
    """A webhook receiver on loopback: fails the first ``fail_first`` requests with 503,
    holds a request while ``hold`` is clear (if set), then answers 204."""

    url: str = ""
    fail_first: int = 0
    hold: threading.Event | None = None
    requests: list[dict[str, Any]] = field(default_factory=list)
    arrived: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def ok(self, event: str | None = None) -> list[dict[str, Any]]:
        with self.lock:
            return [r for r in self.requests if r["answered"] == 204 and (event is None or r["event"] == event)]


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    state = Receiver()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            with state.lock:
                number = len(state.requests)
                entry = {
                    "path": self.path, "body": body, "event": self.headers["X-Spoolrender-Event"],
                    "delivery": self.headers["X-Spoolrender-Delivery"],
                    "signature": self.headers["X-Spoolrender-Signature"], "answered": None,
                }  # fmt: skip
                state.requests.append(entry)
            state.arrived.set()
            if state.hold is not None and number == 0:
                state.hold.wait(60)
            code = 503 if number < state.fail_first else 204
            entry["answered"] = code
            self.send_response(code)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{server.server_address[1]}/render-events"
    yield state
    if state.hold is not None:
        state.hold.set()
    server.shutdown()
    server.server_close()


def secret_file(tmp_path: Path, mode: int = 0o600) -> Path:
    path = tmp_path / "hook-secret"
    path.write_text(SECRET + "\n")
    path.chmod(mode)
    return path


def only_job_dir(spool: SpoolLayout, state: str) -> Path:
    (name,) = entries(spool, state)
    return spool.state_dir(state) / name


def test_webhook_that_fails_then_recovers_and_a_command_hook(
    spool: SpoolLayout, start_runner: Start, receiver: Receiver, tmp_path: Path
) -> None:
    receiver.fail_first = 3
    seen = tmp_path / "command-hook.jsonl"
    write_spool_config(spool, {"hooks": {
        "web": {"url": receiver.url, "secret_file": str(secret_file(tmp_path)), "backoff_seconds": 0.2,
                "timeout_seconds": 5},
        "log-done": {"on": ["done"], "command": [
            sys.executable, "-c",
            "import os, sys; open(sys.argv[1], 'a').write(os.environ['SPOOLRENDER_EVENT'] + ' '"
            " + sys.stdin.read().replace(chr(10), ' ') + chr(10))", str(seen)]},
    }})  # fmt: skip
    drop(spool, "good.yaml", command_job())
    drop(spool, "flaky.yaml", command_job(fail_until_attempt=2))
    drop(spool, "bad.yaml", {"renderer": "command", "command": "no-such-command"})
    start_runner()
    # good: done; flaky: retry, then done; bad: failed. Each delivered once successfully,
    # after the receiver refused the first three requests.
    wait_for(lambda: len(receiver.ok()) == 4, timeout=60)
    assert len(receiver.requests) == 7
    assert sorted(r["event"] for r in receiver.ok()) == ["done", "done", "failed", "retry"]
    for r in receiver.requests:
        expected = "sha256=" + hmac.new(SECRET.encode(), r["body"], hashlib.sha256).hexdigest()
        assert r["signature"] == expected and r["path"] == "/render-events"
    # Repeats of one delivery carry the same id, so a receiver can drop duplicates.
    ids = {r["delivery"] for r in receiver.ok()}
    assert len(ids) == 4
    good = next(json.loads(r["body"]) for r in receiver.ok("done") if json.loads(r["body"])["id"] == "good")
    good_dir = spool.done / next(n for n in entries(spool, "done") if n.startswith("good."))
    result = json.loads((good_dir / "result.json").read_text())
    assert good == {**result, "event": "done"}
    failed = json.loads(receiver.ok("failed")[0]["body"])
    assert failed["id"] == "bad" and failed["kind"] == "invalid-job" and "no-such-command" in failed["reason"]
    retry = json.loads(receiver.ok("retry")[0]["body"])
    assert retry["id"] == "flaky" and retry["attempt"] == 1 and retry["error"]["transient"]

    # The command hook got the done records on stdin, the event in its environment.
    wait_for(lambda: seen.exists() and len(seen.read_text().splitlines()) == 2)
    assert all(line.startswith("done {") for line in seen.read_text().splitlines())

    # Delivery state and log travel with the job; nothing left pending.
    wait_for(lambda: os.listdir(pending_dir(spool)) == [] and os.listdir(taken_dir(spool)) == [])
    state = json.loads((good_dir / "hook-0001-done.json").read_text())
    assert state["hooks"]["web"]["delivered_at"] and state["hooks"]["log-done"]["delivered_at"]
    logs = "".join((spool.done / n / "hooks.log").read_text() for n in entries(spool, "done"))
    logs += (only_job_dir(spool, "failed") / "hooks.log").read_text()
    assert logs.count("HTTP 503") == 3 and logs.count("delivered (HTTP 204") == 4


def test_sigkilled_runner_mid_delivery_another_delivers_and_rendering_never_waits(
    spool: SpoolLayout, start_runner: Start, receiver: Receiver, tmp_path: Path
) -> None:
    receiver.hold = threading.Event()  # the first request hangs: the runner is mid-delivery
    write_spool_config(spool, {"hooks": {"web": {"on": ["done"], "url": receiver.url, "timeout_seconds": 30}}})
    drop(spool, "first.yaml", command_job())
    a = start_runner()
    assert receiver.arrived.wait(60)
    # While its hook thread waits on the receiver, the same runner keeps claiming and rendering.
    drop(spool, "second.yaml", command_job())
    wait_for(lambda: len(entries(spool, "done")) == 2, timeout=30)
    # ...and the second job's delivery does not wait behind the held one (issue 20 item 10).
    wait_for(lambda: [json.loads(r["body"])["id"] for r in receiver.ok()] == ["second"], timeout=30)
    wait_for(lambda: len(os.listdir(taken_dir(spool))) == 1)
    (taken,) = os.listdir(taken_dir(spool))
    assert "-done-first." in taken
    a.send_signal(signal.SIGKILL)
    a.wait()
    receiver.hold.set()  # the receiver answers a client that is gone
    # Another runner puts the abandoned marker back (after every hook's timeout plus the
    # lease, on the filesystem's clock) and delivers it again: at-least-once.
    start_runner()

    def first() -> list[dict[str, Any]]:
        with receiver.lock:
            return [r for r in receiver.requests if json.loads(r["body"])["id"] == "first"]

    wait_for(lambda: len(first()) == 2 and first()[1]["answered"] == 204, timeout=90)
    assert first()[0]["delivery"] == first()[1]["delivery"]
    wait_for(lambda: os.listdir(pending_dir(spool)) == [] and os.listdir(taken_dir(spool)) == [], timeout=30)
    assert len({json.loads(r["body"])["id"] for r in receiver.ok()}) == 2


def test_gives_up_after_its_attempts_and_says_so(
    spool: SpoolLayout, start_runner: Start, receiver: Receiver, tmp_path: Path
) -> None:
    receiver.fail_first = 100
    write_spool_config(
        spool, {"hooks": {"web": {"on": "done", "url": receiver.url, "attempts": 3, "backoff_seconds": 0.1}}}
    )
    drop(spool, "job.yaml", command_job())
    log = tmp_path / "runner.log"
    start_runner(log=log)
    wait_for(lambda: entries(spool, "done") != [] and os.listdir(pending_dir(spool)) == [], timeout=60)
    wait_for(lambda: "giving up" in log.read_text())
    assert len(receiver.requests) == 3
    job_dir = only_job_dir(spool, "done")

    def web_state() -> dict[str, Any]:
        state: dict[str, Any] = json.loads((job_dir / "hook-0001-done.json").read_text())["hooks"]["web"]
        return state

    # The delivery state is written after the log line: wait for it, do not race it.
    wait_for(lambda: bool(web_state().get("gave_up_at")))
    state = web_state()
    assert state["attempts"] == 3 and state["gave_up_at"] and not state["delivered_at"]
    # hooks.log gets its line just after the state is saved (HookDispatcher._save): wait for it too.
    wait_for(lambda: "giving up after 3 attempt(s)" in (job_dir / "hooks.log").read_text())


def test_secret_file_others_can_read_stops_the_runner(spool: SpoolLayout, tmp_path: Path) -> None:
    web = {"url": "http://127.0.0.1:9/x", "secret_file": str(secret_file(tmp_path, 0o644))}
    write_spool_config(spool, {"hooks": {"web": web}})
    result = subprocess.run(
        spoolrender_cmd("run", "--spool", str(spool.root), "--drain"), capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 1 and "open to other users" in result.stderr and "chmod 600" in result.stderr


def test_hmac_key_readable_by_the_spools_group_stops_the_runner(spool: SpoolLayout, tmp_path: Path) -> None:
    """Issue 20 item 11: with the key a submitter (a member of the spool's group) could
    forge signed notifications; a 0640 key file of that group is refused."""
    key = secret_file(tmp_path, 0o640)
    os.chown(key, -1, spool.incoming.stat().st_gid)
    write_spool_config(spool, {"hooks": {"web": {"url": "http://127.0.0.1:9/x", "secret_file": str(key)}}})
    result = subprocess.run(
        spoolrender_cmd("run", "--spool", str(spool.root), "--drain"), capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 1 and "is the spool's group" in result.stderr and "chmod 600" in result.stderr


@pytest.mark.parametrize(
    ("hooks", "message"),
    [
        ({"x": {"command": "notify-send done"}}, "not a shell string"),
        ({"x": {"command": ["a"], "url": "http://h/"}}, "exactly one of"),
        ({"x": {"url": "file:///etc/passwd"}}, "http:// or https://"),
        ({"x": {"url": "http://h/", "on": ["finished"]}}, "expected events among"),
        ({"x": {"command": ["a"], "secret_file": "s"}}, "only webhooks"),
        ({"x": {"url": "http://h/", "timeout_seconds": 0}}, "timeout_seconds"),
        ({"x": {"url": "http://h/", "retries": 3}}, "unknown key"),
        ({"bad name": {"url": "http://h/"}}, "names must be"),
        (["http://h/"], "expected a mapping"),
    ],
)
def test_bad_hook_config_is_refused_with_the_reason(spool: SpoolLayout, hooks: object, message: str) -> None:
    write_spool_config(spool, {"hooks": hooks})
    with pytest.raises(ConfigError, match=message):
        load_config(spool.root, environ={})


def test_a_job_file_cannot_configure_hooks(spool: SpoolLayout, start_runner: Start, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    drop(spool, "sneaky.yaml", {**command_job(), "hooks": {"x": {"command": ["touch", str(marker)]}}})
    proc = start_runner("--drain")
    assert proc.wait(timeout=60) == 3
    failure = json.loads((only_job_dir(spool, "failed") / "failure.json").read_text())
    assert "unknown field" in failure["reason"] and not marker.exists()


def test_command_hook_timeout_kills_its_process_group(tmp_path: Path) -> None:
    pidfile = tmp_path / "child.pid"
    spec = HookSpec(
        name="slow", events=("done",), timeout_seconds=0.5,
        command=("sh", "-c", f'sleep 60 & echo $! > {pidfile}; wait'),
    )  # fmt: skip
    result = deliver(spec, b"{}", {"event": "done"}, None)
    assert not result.ok and "timed out after 0.5 s" in result.detail
    child = int(pidfile.read_text())
    wait_for(lambda: not Path(f"/proc/{child}").exists() or "Z" in Path(f"/proc/{child}/stat").read_text().split()[2])


class Trickler:
    """A webhook receiver on a raw loopback socket that answers one byte every 0.5 s (for
    at most 60 s) and notes, per connection, how long until the client cut it off."""

    def __init__(self) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.server.getsockname()[1]}/slow"
        self.cut_after: list[float] = []  # seconds from accept to the client's close, per connection
        self.connections = 0
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            with self.lock:
                self.connections += 1
            threading.Thread(target=self._trickle, args=(conn,), daemon=True).start()

    def _trickle(self, conn: socket.socket) -> None:
        accepted = time.monotonic()
        reply = b"HTTP/1.1 200 OK\r\n" + b"X-Slow: " + b"x" * 1000
        with conn:
            conn.recv(65536)  # the request (small: one read)
            for byte in reply[:120]:
                try:
                    conn.sendall(bytes([byte]))
                    time.sleep(0.5)
                except OSError:
                    with self.lock:
                        self.cut_after.append(time.monotonic() - accepted)
                    return

    def close(self) -> None:
        self.server.close()


def test_trickling_receiver_is_cut_at_its_timeout_and_never_delays_another_hook(
    spool: SpoolLayout, start_runner: Start, tmp_path: Path
) -> None:
    """Issue 20 item 10: a receiver that trickles its reply a byte at a time is cut off at
    `timeout_seconds` (once a per-read socket timeout let it hold the hooks thread for as
    long as it liked); a command hook on the same event runs meanwhile; and the delivery,
    legitimately in progress, is never taken over by another runner (one connection)."""
    trickler = Trickler()
    seen = tmp_path / "command-hook.log"
    try:
        write_spool_config(spool, {"hooks": {
            "slow": {"on": ["done"], "url": trickler.url, "timeout_seconds": 3, "attempts": 1},
            "note": {"on": ["done"], "command": ["sh", "-c", f'cat > "{seen}"']},
        }})  # fmt: skip
        drop(spool, "job.yaml", command_job())
        start_runner()
        start_runner()  # a second runner of the spool: it must not deliver the slow hook again
        wait_for(lambda: trickler.connections == 1, timeout=60)
        # The command hook runs while the webhook trickles (it trickles for up to 60 s).
        wait_for(lambda: seen.exists() and '"id": "job"' in seen.read_text(), timeout=30)
        with trickler.lock:
            assert trickler.cut_after == []  # still trickling: the command did not wait for it
        wait_for(lambda: trickler.cut_after != [], timeout=60)
        # Cut at its deadline (3 s; the loopback's send buffer takes a second to notice).
        assert trickler.cut_after[0] < 3 + 10, trickler.cut_after
        job_dir = only_job_dir(spool, "done")
        wait_for(lambda: "giving up" in (job_dir / "hooks.log").read_text(), timeout=30)
        assert "timed out after 3 s (connect, request and reply)" in (job_dir / "hooks.log").read_text()
        wait_for(lambda: os.listdir(pending_dir(spool)) == [] and os.listdir(taken_dir(spool)) == [])
        assert trickler.connections == 1
    finally:
        trickler.close()
