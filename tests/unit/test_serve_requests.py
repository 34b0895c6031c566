"""`serve`'s request handling without its threads: each request is handed to the real
SpoolServer's handler in this thread (finish_request) over a loopback connection, against
a unit spool whose job the executor ran. The server never serves (no accept loop, no
event hub or history thread)."""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.unit_spool import Slot, entries

from spoolrender.serve.listen import ServeOptions, parse_listen
from spoolrender.serve.outputs import parse_range
from spoolrender.serve.server import SpoolServer
from spoolrender.testing import Succeed

TOKEN = "token-of-the-unit-tier-0123"
HOST = b"Host: 127.0.0.1\r\n"


class Answer:
    def __init__(self, raw: bytes) -> None:
        head, _, self.body = raw.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        self.status = int(lines[0].split()[1])
        self.headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}

    def json(self) -> Any:
        return json.loads(self.body)


class Served:
    """A SpoolServer bound to a kernel-chosen loopback port, asked one request at a time."""

    def __init__(self, slot: Slot) -> None:
        self.slot = slot
        self.server = SpoolServer(parse_listen("127.0.0.1:0"), slot.config, ServeOptions())

    def ask(self, request: bytes) -> Answer:
        with socket.create_connection(("127.0.0.1", self.server.server_address[1]), timeout=10) as client:
            conn, address = self.server.socket.accept()
            client.sendall(request)
            self.server.finish_request(conn, address)  # the handler answers in __init__
            client.shutdown(socket.SHUT_WR)  # ends the server's lingering close at once
            self.server.shutdown_request(conn)
            raw = b""
            while chunk := client.recv(65536):
                raw += chunk
        return Answer(raw)

    def get(self, path: str, *headers: bytes) -> Answer:
        return self.ask(f"GET {path} HTTP/1.0\r\n".encode() + HOST + b"".join(headers) + b"\r\n")

    def post(self, path: str, body: bytes, *headers: bytes) -> Answer:
        head = f"POST {path} HTTP/1.0\r\nContent-Length: {len(body)}\r\n".encode() + HOST + b"".join(headers)
        return self.ask(head + b"\r\n" + body)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    token_file = tmp_path / "serve-token"
    token_file.write_text(TOKEN + "\n")
    os.chmod(token_file, 0o600)
    slot = Slot(tmp_path / "spool", {"serve_token_file": str(token_file)})
    slot.fake.default = Succeed(size=100)
    slot.drop("intro.yaml", {"composition": "Intro", "output": "intro.mp4"})
    assert slot.run_next().state == "done"
    served = Served(slot)
    yield served
    served.server.server_close()


def test_status_and_a_job_by_id(served: Served) -> None:
    status = served.get("/status")
    assert status.status == 200 and status.headers["content-type"] == "application/json"
    assert status.json()["counts"]["done"] == 1
    job = served.get("/jobs/intro").json()
    assert (job["id"], job["state"], job["attempts"]) == ("intro", "done", 1)
    missing = served.get("/jobs/intr")
    assert (missing.status, missing.json()) == (404, {"error": "no job with id 'intr'; did you mean 'intro'?",
                                                      "suggestions": ["intro"]})  # fmt: skip


def test_a_listing_refuses_a_query_parameter_it_does_not_know(served: Served) -> None:
    listing = served.get("/jobs?state=done")
    assert listing.status == 200
    assert [(j["state"], j["id"]) for j in listing.json()["jobs"]] == [("done", "intro")]
    wrong = served.get("/jobs?state=done&bogus=1")
    assert wrong.status == 400
    assert wrong.json()["error"].startswith("unknown query parameter 'bogus' (known here: composition, kind,")


def test_an_output_is_served_by_byte_range(served: Served) -> None:
    whole = served.get("/jobs/intro/output")
    assert (whole.status, len(whole.body)) == (200, 100)
    part = served.get("/jobs/intro/output", b"Range: bytes=10-19\r\n")
    assert (part.status, part.body) == (206, whole.body[10:20])
    assert part.headers["content-range"] == "bytes 10-19/100"
    assert parse_range("bytes=90-", 100) == (90, 99)
    assert parse_range("bytes=-5", 100) == (95, 99)
    assert parse_range(None, 100) is None


def test_writes_need_the_token(served: Served) -> None:
    job = b"composition: Intro\n"
    anonymous = served.post("/jobs?name=new.yaml", job)
    assert (anonymous.status, anonymous.json()["error"]) == (
        401,
        "this needs the header Authorization: Bearer <serve_token>",
    )
    wrong = served.post("/jobs?name=new.yaml", job, b"Authorization: Bearer not-the-token\r\n")
    assert (wrong.status, wrong.json()) == (403, {"error": "wrong token"})
    assert entries(served.slot.layout, "incoming") == []
    created = served.post("/jobs?name=new.yaml", job, f"Authorization: Bearer {TOKEN}\r\n".encode())
    assert (created.status, created.json()) == (201, {"id": "new", "state": "incoming", "entry": "incoming/new.yaml",
                                                      "url": "/jobs/new"})  # fmt: skip
    assert entries(served.slot.layout, "incoming") == ["new.yaml"]


def test_foreign_hosts_bad_requests_and_wrong_methods_get_json_errors(served: Served) -> None:
    rebinding = served.ask(b"GET /status HTTP/1.0\r\nHost: evil.example\r\n\r\n")
    assert rebinding.status == 403 and "DNS rebinding protection" in rebinding.json()["error"]
    assert served.ask(b"GET /status HTTP/1.0\r\nHost: localhost:8765\r\n\r\n").status == 200
    garbage = served.ask(b"garbage\r\n\r\n")
    assert (garbage.status, garbage.json()) == (400, {"error": "Bad request syntax ('garbage')"})
    wrong = served.ask(b"DELETE /status HTTP/1.0\r\n" + HOST + b"\r\n")
    assert (wrong.status, wrong.json()) == (405, {"error": "DELETE is not allowed here"})
    assert served.get("/nope").json() == {"error": "no such endpoint: /nope (see GET /)"}


def test_metrics_are_prometheus_text(served: Served) -> None:
    metrics = served.get("/metrics")
    assert metrics.status == 200
    assert 'spoolrender_jobs{state="done"} 1.0' in metrics.body.decode().splitlines()


def test_a_bulk_action_is_planned_by_a_dry_run_then_carried_out(served: Served) -> None:
    auth = f"Authorization: Bearer {TOKEN}\r\n".encode()
    body = json.dumps({"action": "delete", "ids": ["intro", "nosuch"], "dry_run": True}).encode()
    planned = served.post("/bulk", body, auth)
    plan = planned.json()
    assert planned.status == 200
    assert (plan["dry_run"], plan["jobs"], plan["missing"]) == (True, 1, ["nosuch"])
    assert plan["summary"] == "would delete 1 job(s) (1 done), 1 not found"
    assert [item["id"] for item in plan["acted"]] == ["intro"]
    assert entries(served.slot.layout, "done") != []  # a dry run changes nothing
    done = json.dumps({"action": "delete", "ids": ["intro"]}).encode()
    carried = served.post("/bulk", done, auth)
    assert carried.status == 200 and entries(served.slot.layout, "done") == []
    assert carried.json()["summary"] == "delete 1 job(s) (1 done)"
    wrong = served.post("/bulk", json.dumps({"action": "explode", "ids": []}).encode(), auth)
    assert (wrong.status, wrong.json()["error"]) == (400, "action: one of retry, cancel, delete")
