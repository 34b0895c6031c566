"""Delivering one hook once: run its command or POST to its webhook, bounded by a timeout.

A command gets the JSON record on stdin and the event in its environment; exit status 0
is success. A webhook gets the JSON record as the body, with headers saying the event
and the delivery id (stable across retries, so a receiver can drop duplicates: delivery
is at-least-once) and, when a secret is configured, ``X-Spoolrender-Signature:
sha256=<hex HMAC-SHA256 of the body>`` (the GitHub webhook convention); any 2xx reply is
success. Redirects are not followed: a webhook that moved is a failure to fix, not a
reason to send a signed body somewhere else.

``timeout_seconds`` is one absolute deadline over the whole delivery: a command's run, or
a webhook's connect, request, status line and headers (a receiver that trickles its reply
a byte at a time is cut off when it passes, as per-read socket timeouts alone would not).
The reply's body is read, within the same deadline, only for a failure's log line.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import http.client
import os
import signal
import socket
import ssl
import subprocess
import threading
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

from spoolrender import defaults
from spoolrender.config.hooks import HookSpec
from spoolrender.core.version import __version__

SIGNATURE_HEADER = "X-Spoolrender-Signature"


@dataclass(frozen=True)
class Delivery:
    ok: bool
    detail: str  # one line for the log: the status, the exit code, or what went wrong


def signature(secret: bytes, body: bytes) -> str:
    """The value of the signature header for ``body``."""
    return "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()


def deliver(spec: HookSpec, body: bytes, meta: dict[str, str], secret: bytes | None) -> Delivery:
    """Deliver ``body`` (the JSON record) once; ``meta``: event, job id, uid, delivery id."""
    if spec.command is not None:
        return _run_command(spec, body, meta)
    return _post(spec, body, meta, secret)


def _clip(data: bytes) -> str:
    text = data[: defaults.HOOK_OUTPUT_BYTES].decode("utf-8", errors="replace").strip()
    return " ".join(text.split())  # one log line, whatever the output looked like


def _run_command(spec: HookSpec, body: bytes, meta: dict[str, str]) -> Delivery:
    assert spec.command is not None
    env = {**os.environ, **{f"SPOOLRENDER_{k.upper()}": v for k, v in meta.items()}}
    try:
        # Its own session: a timeout kills the hook's whole process group, as for renders.
        proc = subprocess.Popen(
            spec.command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            env=env, start_new_session=True,
        )  # fmt: skip
    except OSError as exc:
        return Delivery(False, f"cannot start {spec.command[0]}: {exc.strerror or exc}")
    try:
        out, _ = proc.communicate(body, timeout=spec.timeout_seconds)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        # A child that left the group may hold the pipe open: do not wait for it forever.
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.communicate(timeout=defaults.HOOK_KILL_GRACE_S)
        for pipe in (proc.stdin, proc.stdout):
            if pipe is not None:
                pipe.close()
        proc.wait()
        return Delivery(False, f"timed out after {spec.timeout_seconds:g} s (process group killed)")
    if proc.returncode != 0:
        return Delivery(False, f"exit status {proc.returncode}: {_clip(out)}")
    return Delivery(True, f"exit status 0{': ' + _clip(out) if out.strip() else ''}")


def _post(spec: HookSpec, body: bytes, meta: dict[str, str], secret: bytes | None) -> Delivery:
    assert spec.url is not None
    parts = urlsplit(spec.url)
    assert parts.hostname is not None
    headers = {
        "Content-Type": "application/json",
        "User-Agent": f"spoolrender/{__version__}",
        "X-Spoolrender-Event": meta["event"],
        "X-Spoolrender-Delivery": meta["delivery"],
        "X-Spoolrender-Job": meta["job_id"],
    }
    if secret is not None:
        headers[SIGNATURE_HEADER] = signature(secret, body)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    conn: http.client.HTTPConnection
    if parts.scheme == "https":
        conn = http.client.HTTPSConnection(
            parts.hostname, parts.port, timeout=spec.timeout_seconds, context=ssl.create_default_context()
        )
    else:
        conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=spec.timeout_seconds)
    deadline = time.monotonic() + spec.timeout_seconds
    cutter = _Cutter(conn)
    timer = threading.Timer(spec.timeout_seconds, cutter.cut)
    timer.daemon = True
    timer.start()
    try:
        conn.connect()  # bounded by the socket timeout (= the deadline); the cutter cannot reach it yet
        cutter.check()
        conn.request("POST", path, body=body, headers=headers)
        response = conn.getresponse()
        status = f"HTTP {response.status} {response.reason}"
        if 200 <= response.status < 300:
            return Delivery(True, status)
        reply = b""
        while len(reply) < defaults.HOOK_OUTPUT_BYTES and time.monotonic() < deadline:
            chunk = response.read1(defaults.HOOK_OUTPUT_BYTES)
            if not chunk:
                break
            reply += chunk
        return Delivery(False, f"{status}: {_clip(reply)}")
    except (OSError, http.client.HTTPException) as exc:
        if cutter.fired:
            return Delivery(False, f"timed out after {spec.timeout_seconds:g} s (connect, request and reply)")
        return Delivery(False, f"{type(exc).__name__}: {exc}")
    finally:
        timer.cancel()
        cutter.close()


class _Cutter:
    """Ends a connection at the deadline from another thread: shutdown() wakes a blocked
    send or recv (TLS too: the socket under it), which a socket timeout per call cannot."""

    def __init__(self, conn: http.client.HTTPConnection) -> None:
        self._conn = conn
        self._lock = threading.Lock()  # cut and close never overlap: no shutdown of a reused fd
        self.fired = False

    def cut(self) -> None:
        with self._lock:
            self.fired = True
            sock = self._conn.sock
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

    def check(self) -> None:
        """Raise if the deadline passed while the connection had no socket to cut yet."""
        with self._lock:
            if self.fired:
                raise TimeoutError("deadline passed while connecting")

    def close(self) -> None:
        with self._lock:
            self._conn.close()
