"""A real `spoolrender serve` subprocess on a free loopback port, and small HTTP/SSE clients.

The server is started with ``--listen 127.0.0.1:0`` and reports the port it got on its
first line of output, so tests never race for a port. Requests go through http.client
(which sends a path exactly as given, ``..`` included) or, for what http.client refuses
to send (NUL bytes, broken request lines, oversized headers), through a raw socket.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TIMEOUT = 60.0  # generous: a loaded machine slows the server and the runner it reports on


@dataclass
class Response:
    status: int
    headers: dict[str, str]  # lower-case names
    body: bytes

    def json(self) -> Any:
        assert self.headers.get("content-type", "").startswith("application/json"), self.headers
        return json.loads(self.body)

    @property
    def error(self) -> str:
        data = self.json()
        assert set(data) >= {"error"}, data
        return str(data["error"])


@dataclass
class SseEvent:
    kind: str
    data: Any
    id: str | None


class EventStream:
    """A GET /events connection, read event by event."""

    def __init__(self, conn: http.client.HTTPConnection, response: http.client.HTTPResponse) -> None:
        self.conn = conn
        self.response = response
        self.comments: list[str] = []
        self.retry: int | None = None

    def next(self, timeout: float = TIMEOUT) -> SseEvent:
        deadline = time.monotonic() + timeout
        kind, event_id = "message", None
        data: list[str] = []
        while True:
            if time.monotonic() > deadline:
                raise AssertionError(f"no event within {timeout} s")
            raw = self.response.fp.readline()
            if not raw:
                raise EOFError("the event stream ended")
            line = raw.decode().rstrip("\n")
            if line == "":
                if data:
                    return SseEvent(kind, json.loads("\n".join(data)), event_id)
                continue
            if line.startswith(":"):
                self.comments.append(line[1:].strip())
                continue
            field, _, value = line.partition(": ")
            if field == "event":
                kind = value
            elif field == "data":
                data.append(value)
            elif field == "id":
                event_id = value
            elif field == "retry":
                self.retry = int(value)

    def until(self, predicate: Any, timeout: float = TIMEOUT) -> list[SseEvent]:
        """Events up to and including the first one ``predicate`` accepts."""
        deadline = time.monotonic() + timeout
        seen = []
        while True:
            event = self.next(max(0.1, deadline - time.monotonic()))
            seen.append(event)
            if predicate(event):
                return seen

    def close(self) -> None:
        self.response.close()
        self.conn.close()


class Server:
    """A running `spoolrender serve`; stopped (SIGTERM, exit 0 expected) by :meth:`stop`."""

    def __init__(self, proc: subprocess.Popen[bytes], url: str, log: Path) -> None:
        self.proc = proc
        self.url = url
        m = re.fullmatch(r"http://(?:([\d.]+)|\[([\da-f:]+)\]):(\d+)/", url)
        assert m, url
        self.host, self.port = m.group(1) or m.group(2), int(m.group(3))
        self.log = log

    def connection(self, timeout: float = TIMEOUT) -> http.client.HTTPConnection:
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)

    def request(
        self, method: str, path: str, body: bytes | None = None, headers: dict[str, str] | None = None
    ) -> Response:
        conn = self.connection()
        try:
            conn.request(method, path, body=body, headers=headers or {})
            resp = conn.getresponse()
            data = resp.read()
            return Response(resp.status, {k.lower(): v for k, v in resp.getheaders()}, data)
        finally:
            conn.close()

    def get(self, path: str, headers: dict[str, str] | None = None) -> Response:
        return self.request("GET", path, headers=headers)

    def get_json(self, path: str) -> Any:
        resp = self.get(path)
        assert resp.status == 200, (path, resp.status, resp.body[:500])
        return resp.json()

    def raw(self, data: bytes) -> Response:
        """Send raw bytes as a request and parse whatever the server answers."""
        with socket.create_connection((self.host, self.port), timeout=TIMEOUT) as sock:
            # The server may answer (and close) before reading everything: read the answer.
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                sock.sendall(data)
            resp = http.client.HTTPResponse(sock)
            try:
                resp.begin()
                return Response(resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read())
            finally:
                resp.close()

    def events(self, path: str = "/events", headers: dict[str, str] | None = None) -> EventStream:
        conn = self.connection()
        conn.request("GET", path, headers=headers or {})
        resp = conn.getresponse()
        assert resp.status == 200, (resp.status, resp.read())
        assert resp.getheader("Content-Type", "").startswith("text/event-stream")
        return EventStream(conn, resp)

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise
        finally:
            if self.proc.stdout is not None:
                self.proc.stdout.close()


@contextmanager
def running_server(spool: Path, log: Path, *extra: str) -> Iterator[Server]:
    """`spoolrender serve` over ``spool`` on a free loopback port, for the duration of a block."""
    with open(log, "ab") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "spoolrender.cli", "serve", "--spool", str(spool), "--listen", "127.0.0.1:0",
             "-v", *extra],
            stdout=subprocess.PIPE,
            stderr=err,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )  # fmt: skip
    assert proc.stdout is not None
    line = proc.stdout.readline().decode()
    m = re.match(r"serving (http://\S+) ", line)
    if m is None:
        proc.kill()
        proc.wait()
        proc.stdout.close()
        raise AssertionError(f"serve did not start: {line!r}\n{log.read_text()}")
    server = Server(proc, m.group(1), log)
    try:
        yield server
    finally:
        code = server.stop()
        assert code == 0, f"serve exited {code}\n{log.read_text()}"
