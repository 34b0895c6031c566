"""One webhook delivery (spoolrender.hooks.delivery), against a loopback socket this test
answers itself (one request, in a thread joined before the test ends): the body and the
headers a receiver relies on (event, delivery id, HMAC signature), a 2xx as success, any
other reply (a redirect too) as a failure with its first bytes, one deadline over connect,
request and reply (a reply trickled a byte at a time is cut), and a refused connection named."""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from spoolrender.config.hooks import HookSpec
from spoolrender.hooks.delivery import SIGNATURE_HEADER, deliver, signature

BODY = json.dumps({"event": "done", "id": "intro"}).encode()
META = {"event": "done", "job_id": "intro", "uid": "0123456789ab", "delivery": "intro.0123456789ab.done"}


@contextmanager
def receiver(reply: bytes | None) -> Iterator[tuple[str, list[bytes]]]:
    """A loopback listener that reads one request and sends ``reply`` (None: never replies,
    and never reads); yields its URL and, once the block ends, the request's bytes."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(60)
    got: list[bytes] = []

    def serve() -> None:
        conn, _ = listener.accept()
        with conn:
            data = b""
            while b"\r\n\r\n" not in data or len(data.split(b"\r\n\r\n", 1)[1]) < len(BODY):
                chunk = conn.recv(65536)
                if not chunk:
                    break
                data += chunk
            got.append(data)
            if reply is not None:
                conn.sendall(reply)

    thread = None if reply is None else threading.Thread(target=serve)
    if thread is not None:
        thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}/hooks/spool?x=1", got
    finally:
        if thread is not None:
            thread.join(60)
        listener.close()


def hook(url: str, timeout: float = 30.0) -> HookSpec:
    return HookSpec("notify", ("done",), url=url, timeout_seconds=timeout)


def headers_of(request: bytes) -> dict[str, str]:
    head = request.split(b"\r\n\r\n", 1)[0].decode().split("\r\n")[1:]
    return {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in head)}


def test_a_2xx_reply_is_a_delivery_with_the_headers_a_receiver_checks() -> None:
    with receiver(b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n") as (url, got):
        delivery = deliver(hook(url), BODY, META, b"s3cret")
    assert delivery.ok and delivery.detail == "HTTP 204 No Content"
    [request] = got
    assert request.startswith(b"POST /hooks/spool?x=1 HTTP/1.1\r\n")
    assert request.split(b"\r\n\r\n", 1)[1] == BODY
    headers = headers_of(request)
    assert headers["x-spoolrender-event"] == "done"
    assert headers["x-spoolrender-delivery"] == "intro.0123456789ab.done"
    assert headers["x-spoolrender-job"] == "intro"
    expected = "sha256=" + hmac.new(b"s3cret", BODY, hashlib.sha256).hexdigest()
    assert headers[SIGNATURE_HEADER.lower()] == expected == signature(b"s3cret", BODY)


def test_without_a_secret_nothing_is_signed() -> None:
    with receiver(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n") as (url, got):
        assert deliver(hook(url), BODY, META, None).ok
    assert SIGNATURE_HEADER.lower() not in headers_of(got[0])


def test_any_other_reply_fails_with_its_first_bytes_on_one_line() -> None:
    reply = b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 14\r\n\r\nboom\n\n  again"
    with receiver(reply) as (url, _):
        delivery = deliver(hook(url), BODY, META, None)
    assert not delivery.ok
    assert delivery.detail == "HTTP 500 Internal Server Error: boom again"


def test_a_redirect_is_not_followed() -> None:
    reply = b"HTTP/1.1 302 Found\r\nLocation: http://127.0.0.1:9/elsewhere\r\nContent-Length: 0\r\n\r\n"
    with receiver(reply) as (url, got):
        delivery = deliver(hook(url), BODY, META, b"s3cret")
    assert not delivery.ok and delivery.detail.startswith("HTTP 302 Found")
    assert len(got) == 1


def test_a_receiver_that_trickles_its_reply_is_cut_at_the_deadline() -> None:
    """A byte every 0.1 s never lets a read wait 0.5 s (the socket timeout), so only the one
    deadline over the whole delivery can end it: the cut, from the delivery's timer thread."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(60)

    def trickle() -> None:
        conn, _ = listener.accept()
        with conn:
            conn.recv(65536)
            with contextlib.suppress(OSError):  # the cut closes the connection: the end
                for byte in b"HTTP/1.1 200 OK\r\nX-Slow: " + b"x" * 600:
                    conn.sendall(bytes([byte]))
                    time.sleep(0.1)

    thread = threading.Thread(target=trickle)
    thread.start()
    try:
        delivery = deliver(hook(f"http://127.0.0.1:{listener.getsockname()[1]}/", timeout=0.5), BODY, META, None)
    finally:
        thread.join(600)
        listener.close()
    assert not delivery.ok
    assert delivery.detail == "timed out after 0.5 s (connect, request and reply)"


def test_a_refused_connection_is_named() -> None:
    with socket.create_server(("127.0.0.1", 0)) as placeholder:
        port = placeholder.getsockname()[1]
    delivery = deliver(hook(f"http://127.0.0.1:{port}/"), BODY, META, None)
    assert not delivery.ok and delivery.detail.startswith("ConnectionRefusedError")
