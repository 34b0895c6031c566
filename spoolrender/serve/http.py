"""The HTTP transport of `spoolrender serve`: parsing, limits, the Host check, auth, routing.

The endpoints themselves are methods of :class:`.routes.SpoolHandler`; this module finds
the method for a request and refuses whatever is malformed or too big before it reaches it:
the request target is capped at ``MAX_URL`` bytes, headers at ``MAX_HEADER_BYTES``, the
query at ``MAX_QUERY_FIELDS`` known fields, a body at the spool's ``max_job_bytes``. Path
segments are percent-decoded one by one and ``.``/``..``, slashes, backslashes, NUL and
control characters are refused; ids must match the job-id pattern. Errors are
``{"error": ...}`` with a 4xx status, and a bad request never takes the server down.
"""

from __future__ import annotations

import io
import json
import logging
import os
import re
import select
import socket
import socketserver
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from typing import Any, ClassVar
from urllib.parse import parse_qsl, unquote

from spoolrender.config.spool_config import SpoolConfig
from spoolrender.core.version import __version__
from spoolrender.errors import SpoolLayoutError, SpoolrenderError
from spoolrender.serve.auth import bearer_matches
from spoolrender.serve.browse import JobIndex
from spoolrender.serve.events import EventHub
from spoolrender.serve.history import HistoryRecorder
from spoolrender.serve.listen import HostPolicy
from spoolrender.serve.readmodel import ApiError, check_job_id

log = logging.getLogger(__name__)

MAX_URL = 4096  # request target, bytes
MAX_HEADER_BYTES = 16 * 1024
MAX_QUERY_FIELDS = 8
SOCKET_TIMEOUT = 15.0  # a client that stalls this long (reading or being written to) is dropped
BODY_SECONDS = 60.0  # a request body (a job file, max_job_bytes at most) must be in within this
GONE_CHECK_SECONDS = 0.25  # how soon an event stream notices that its client went away
RETRY_MS = 2000  # EventSource reconnect delay
FILE_CHUNK = 256 * 1024  # outputs are sent in pieces this big
CONTROL_CHARS = re.compile(r"[\x00-\x1f\x7f-\x9f]")
STATIC = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/app.js": ("app.js", "text/javascript; charset=utf-8"),
    "/style.css": ("style.css", "text/css; charset=utf-8"),
    "/common.js": ("common.js", "text/javascript; charset=utf-8"),
    "/job": ("job.html", "text/html; charset=utf-8"),
    "/job.js": ("job.js", "text/javascript; charset=utf-8"),
    "/browse": ("browse.html", "text/html; charset=utf-8"),
    "/browse.js": ("browse.js", "text/javascript; charset=utf-8"),
    "/plots.js": ("plots.js", "text/javascript; charset=utf-8"),
}
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; "
    "media-src 'self'; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)

Route = Callable[[Any, dict[str, str], list[str]], None]  # a handler method: (self, query, path args)
NO_PARAMS: frozenset[str] = frozenset()
# shape -> (allowed methods for the Allow header, {method: (handler, query parameters)})
RouteTable = dict[tuple[str, ...], tuple[tuple[str, ...], dict[str, tuple[Route, frozenset[str]]]]]


@dataclass(frozen=True)
class Site:
    """What a request handler needs of the server process (built by :mod:`.server`)."""

    config: SpoolConfig
    token: str | None  # write actions: off while None (see .auth)
    keepalive_seconds: float  # event streams: a comment after this long without an event
    header_seconds: float  # the request line and headers must be in within this
    hub: EventHub
    streams: threading.BoundedSemaphore  # event streams at once
    static: dict[str, bytes]  # the dashboard's files by name
    hosts: HostPolicy  # the Host header check (DNS rebinding)
    index: JobIndex  # what listings do not say (times, error kinds), read once per entry
    history: HistoryRecorder  # the samples behind the dashboard's plots


class DeadlineReader(io.RawIOBase):
    """A socket's reading side with a deadline for the whole, not just for each read.

    The socket timeout alone bounds one read, so a client sending a header line every few
    seconds could hold its connection (and thread) for ever: slowloris. Each read here
    waits at most until the deadline, and none starts after it.
    """

    def __init__(self, sock: socket.socket, per_read: float) -> None:
        super().__init__()
        self.sock = sock
        self.per_read = per_read
        self.deadline: float | None = None

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        timeout = self.per_read
        if self.deadline is not None:
            left = self.deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("the request took too long to arrive")
            timeout = min(timeout, left)
        self.sock.settimeout(timeout)
        return self.sock.recv_into(buffer)


class RequestHandler(BaseHTTPRequestHandler):
    """Parses, checks and routes one request to a method of a subclass (:mod:`.routes`).

    Every answer, errors included, is JSON, unless a route sends something else.
    """

    routes: ClassVar[RouteTable] = {}

    server_version = f"spoolrender/{__version__}"
    protocol_version = "HTTP/1.0"  # one request per connection: no body framing to get wrong
    default_request_version = "HTTP/1.0"  # so that even a garbled request gets a status line
    timeout = SOCKET_TIMEOUT

    def __init__(self, request: Any, client_address: Any, server: socketserver.BaseServer, *, site: Site) -> None:
        self.site = site  # before the base class, which handles the request in __init__
        super().__init__(request, client_address, server)

    def setup(self) -> None:
        super().setup()
        # The request line and headers, however slowly they come, within header_seconds;
        # the body (checked against max_job_bytes first) gets a deadline of its own.
        self._reader = DeadlineReader(self.connection, SOCKET_TIMEOUT)
        self._reader.deadline = time.monotonic() + self.site.header_seconds
        self.rfile = io.BufferedReader(self._reader)

    # --- plumbing ---------------------------------------------------------------------------

    def version_string(self) -> str:
        return self.server_version  # no Python version in the Server header

    def log_message(self, format: str, *args: Any) -> None:
        # Request lines are the client's bytes: escape control characters, cut the length.
        message = CONTROL_CHARS.sub(lambda m: f"\\x{ord(m.group()):02x}", format % args)
        log.info("%s %s", self.address_string(), message if len(message) <= 400 else message[:400] + "...")

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        # Also what BaseHTTPRequestHandler calls for requests it cannot parse (400, 414, 431, 501).
        text = message or self.responses.get(code, ("error",))[0]
        self._send_json(code, {"error": text})

    def _send(self, status: int, body: bytes, content_type: str, headers: dict[str, str] | None = None) -> None:
        self.close_connection = True
        self._responded = True
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Referrer-Policy", "no-referrer")
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _send_file(
        self, status: int, fd: int, start: int, length: int, content_type: str, headers: dict[str, str]
    ) -> None:
        """``length`` bytes of the open file ``fd`` from ``start`` (not for HEAD), in chunks."""
        self.close_connection = True
        self._responded = True
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(length))
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Referrer-Policy", "no-referrer")
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        if self.command == "HEAD":
            return
        offset, end = start, start + length
        while offset < end:
            chunk = os.pread(fd, min(FILE_CHUNK, end - offset), offset)
            if not chunk:  # truncated meanwhile: the client sees a short body, never other bytes
                break
            self.wfile.write(chunk)
            offset += len(chunk)

    def _send_json(self, status: int, obj: Any, headers: dict[str, str] | None = None) -> None:
        body = (json.dumps(obj, default=str) + "\n").encode()
        self._send(status, body, "application/json", headers)

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_HEAD(self) -> None:
        self._dispatch("HEAD")

    def do_PUT(self) -> None:
        self._dispatch("PUT")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    def do_PATCH(self) -> None:
        self._dispatch("PATCH")

    def do_OPTIONS(self) -> None:
        self._dispatch("OPTIONS")

    def _dispatch(self, method: str) -> None:
        self._responded = False
        self._reader.deadline = time.monotonic() + BODY_SECONDS
        self.connection.settimeout(SOCKET_TIMEOUT)  # for writing: a reader's timeout may be shorter
        try:
            self._check_limits()
            route, params, args = self._route(method)
            route(self, params, args)
        except (BrokenPipeError, ConnectionResetError, TimeoutError):
            self.close_connection = True  # the client went away
        except Exception as exc:
            if self._responded:  # mid-stream: nothing more can be said on this connection
                log.info("%s %s ended: %s", method, self.path[:200], exc)
                self.close_connection = True
            else:
                self._send_failure(method, exc)

    def _send_failure(self, method: str, exc: Exception) -> None:
        if isinstance(exc, ApiError):
            headers = {"WWW-Authenticate": 'Bearer realm="spoolrender"'} if exc.status == 401 else None
            if exc.status == 405:
                headers = {"Allow": exc.extra.pop("allow")}
            self._send_json(exc.status, exc.body(), headers)
        elif isinstance(exc, SpoolLayoutError):  # the spool is gone or unreadable
            self._send_json(503, {"error": str(exc)})
        elif isinstance(exc, SpoolrenderError):
            self._send_json(500, {"error": str(exc)})
        else:
            log.error("error answering %s %s", method, self.path[:200], exc_info=exc)
            self._send_json(500, {"error": "internal error (see the server's log)"})

    def _check_limits(self) -> None:
        if len(self.path) > MAX_URL:
            raise ApiError(414, f"request target longer than {MAX_URL} bytes")
        if sum(len(k) + len(v) + 4 for k, v in self.headers.items()) > MAX_HEADER_BYTES:
            raise ApiError(431, f"request headers larger than {MAX_HEADER_BYTES} bytes")
        host = self.headers.get("Host")
        if host is not None and not self.site.hosts.allows(host, str(self.connection.getsockname()[0])):
            raise ApiError(
                403,
                f"Host {host[:100]!r} is not served here (DNS rebinding protection); "
                "start `spoolrender serve` with --allow-host NAME to allow it",
            )

    def _route(self, method: str) -> tuple[Route, dict[str, str], list[str]]:
        if not self.path.startswith("/"):
            raise ApiError(400, "expected a request target starting with '/'")
        raw_path, _, query = self.path.partition("?")
        segments = []
        for raw in raw_path[1:].split("/") if raw_path != "/" else []:
            try:
                segment = unquote(raw, errors="strict")
            except UnicodeDecodeError as exc:
                raise ApiError(400, "the path is not valid UTF-8") from exc
            if segment in (".", "..") or any(c in segment for c in "/\\\x00") or not segment.isprintable():
                raise ApiError(400, "invalid path: no '.', '..', slashes, backslashes or control characters")
            segments.append(segment)
        found = self.routes.get(_shape(segments))
        if found is None:
            raise ApiError(404, f"no such endpoint: {raw_path[:100]} (see GET /)")
        allowed, routes = found
        if method not in routes:
            raise ApiError(405, f"{method} is not allowed here", allow=", ".join(allowed))
        handler, params_allowed = routes[method]
        # /jobs/{id}/...: the id, checked before anything looks at the spool; else the path.
        is_job = segments[:1] == ["jobs"]
        args = [check_job_id(s) for s in segments[1:2]] if is_job else ["/" + "/".join(segments)]
        return handler, self._query(query, params_allowed), args

    def _query(self, query: str, allowed: frozenset[str]) -> dict[str, str]:
        if not query:
            return {}
        try:
            pairs = parse_qsl(
                query, keep_blank_values=True, strict_parsing=True, max_num_fields=MAX_QUERY_FIELDS, errors="strict"
            )
        except ValueError as exc:  # UnicodeDecodeError too
            raise ApiError(400, f"malformed query string (at most {MAX_QUERY_FIELDS} fields, key=value&...)") from exc
        params: dict[str, str] = {}
        for key, value in pairs:
            if key not in allowed:
                known = ", ".join(sorted(allowed)) or "none"
                raise ApiError(400, f"unknown query parameter {key[:40]!r} (known here: {known})")
            if key in params:
                raise ApiError(400, f"query parameter {key!r} given twice")
            params[key] = value
        return params

    def _client_gone(self) -> bool:
        """Whether the client closed its side (an event stream's client only ever reads)."""
        try:
            readable, _, _ = select.select([self.connection], [], [], 0)
            if not readable:
                return False
            # Readable on a stream means the end (b"") or a reset; stray bytes are dropped.
            return bool(self.connection.recv(4096, socket.MSG_DONTWAIT) == b"")
        except BlockingIOError:
            return False
        except OSError:
            return True

    # --- writing ----------------------------------------------------------------------------

    def _authorize(self) -> None:
        token = self.site.token
        if token is None:
            raise ApiError(
                403,
                "write actions are disabled: set serve_token_file (or serve_token) in the spool's "
                "spoolrender.yaml and restart `spoolrender serve` to enable them",
            )
        matches = bearer_matches(self.headers.get("Authorization"), token)
        if matches is None:
            raise ApiError(401, "this needs the header Authorization: Bearer <serve_token>")
        if not matches:
            raise ApiError(403, "wrong token")

    def _body(self, limit: int | None = None, what: str = "job file: ") -> bytes:
        """The request's body, at most ``limit`` bytes (default: a job file's max_job_bytes)."""
        if self.headers.get("Transfer-Encoding"):
            raise ApiError(411, "send the body with a Content-Length (chunked bodies are not accepted)")
        length = (self.headers.get("Content-Length") or "").strip()
        if not length:
            raise ApiError(411, "Content-Length required")
        limit = self.site.config.max_job_bytes if limit is None else limit
        if not length.isdigit() or len(length) > 18:
            raise ApiError(400, "invalid Content-Length")
        if int(length) > limit:
            source = " (max_job_bytes)" if what == "job file: " else ""
            raise ApiError(413, f"{what}{int(length)} bytes is over the limit of {limit}{source}")
        data = self.rfile.read(int(length))
        if len(data) < int(length):
            raise ApiError(400, "the body ended before Content-Length bytes")
        return data


def int_param(params: dict[str, str], name: str, default: int, low: int, high: int) -> int:
    text = params.get(name)
    if text is None:
        return default
    if not text.isdigit() or len(text) > 10 or not low <= int(text) <= high:
        raise ApiError(400, f"query parameter {name}: expected a whole number {low}..{high}")
    return int(text)


def _shape(segments: list[str]) -> tuple[str, ...]:
    """The route key of a path: ``/jobs/x/log`` -> ``("jobs", "{id}", "log")``."""
    if segments[:1] == ["jobs"] and len(segments) >= 2:
        return ("jobs", "{id}", *segments[2:])
    if not segments:
        return ("",)
    return tuple(segments)
