"""`spoolrender serve`: the spool over HTTP (JSON API, event stream, metrics, dashboard).

The standard library's ``ThreadingHTTPServer`` is enough: the server reads a few small
files per request, each event stream holds one thread that mostly sleeps, and no extra
dependency has to be vetted for a process that listens on a network. It only reads the
spool (no runner runs in it), so it works on any host that mounts the spool. This module
is the process: where to listen, the server with its connection cap, start and stop;
:mod:`spoolrender.serve_http` handles requests.

Safe defaults: it listens on 127.0.0.1 unless told otherwise (an empty host is refused;
"every interface" has to be spelled 0.0.0.0 or [::]); on a loopback address it answers
only requests whose Host is a loopback name (or ``--allow-host``), so a web page cannot
reach it through DNS rebinding; write actions are off until the spool config sets
``serve_token``, and then need ``Authorization: Bearer <token>``.
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import signal
import socket
import threading
import time
from dataclasses import dataclass
from http.server import ThreadingHTTPServer
from importlib import resources
from types import FrameType
from typing import Any

from spoolrender.config import SpoolConfig
from spoolrender.errors import ConfigError, SpoolrenderError
from spoolrender.serve_events import EventHub
from spoolrender.serve_http import STATIC, RequestHandler

log = logging.getLogger(__name__)

DEFAULT_LISTEN = "127.0.0.1:8765"
MAX_CONNECTIONS = 64
MAX_STREAMS = 32  # event streams at once (each holds a connection and a thread)
LINGER_SECONDS = 2.0
LINGER_BYTES = 16 * 1024 * 1024
LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost"})


# --- where to listen ------------------------------------------------------------------------


@dataclass(frozen=True)
class ListenAddress:
    host: str  # a literal IP address
    port: int
    family: socket.AddressFamily

    @property
    def ip(self) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
        return ipaddress.ip_address(self.host)

    def url(self, port: int | None = None) -> str:
        host = f"[{self.host}]" if self.family == socket.AF_INET6 else self.host
        return f"http://{host}:{self.port if port is None else port}/"


def parse_listen(text: str) -> ListenAddress:
    """``HOST:PORT``, ``[V6]:PORT`` or a bare ``PORT`` (on 127.0.0.1); never an implied all-interfaces."""
    text = text.strip()
    if text.isdigit():
        host, port_text = "127.0.0.1", text
    elif text.startswith("["):
        host, _, rest = text[1:].partition("]")
        if not rest.startswith(":"):
            raise ConfigError(f"--listen {text!r}: expected [ADDRESS]:PORT")
        port_text = rest[1:]
    else:
        host, sep, port_text = text.rpartition(":")
        if not sep:
            raise ConfigError(f"--listen {text!r}: expected HOST:PORT, e.g. {DEFAULT_LISTEN}")
    if not host:
        raise ConfigError(
            f"--listen {text!r} has no address; to listen on every interface say 0.0.0.0:{port_text} "
            f"(or [::]:{port_text}) explicitly"
        )
    if not port_text.isdigit() or int(port_text) > 65535:
        raise ConfigError(f"--listen {text!r}: the port must be a number 0..65535 (0: any free port)")
    port = int(port_text)
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        try:
            infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except OSError as exc:
            raise ConfigError(f"--listen {text!r}: cannot resolve {host!r}: {exc}") from exc
        ip = ipaddress.ip_address(str(infos[0][4][0]))
    family = socket.AF_INET6 if ip.version == 6 else socket.AF_INET
    return ListenAddress(str(ip), port, family)


def _host_name(header: str) -> str:
    """The name part of a Host header (``[::1]:8765`` -> ``::1``), lower case."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[1:].partition("]")[0]
    return header.rpartition(":")[0] if header.count(":") == 1 else header


def _is_loopback_name(name: str) -> bool:
    if name in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


# --- the server -----------------------------------------------------------------------------


@dataclass(frozen=True)
class ServeOptions:
    poll_seconds: float = 1.0
    keepalive_seconds: float = 15.0
    allow_hosts: tuple[str, ...] = ()


def _read_static() -> dict[str, bytes]:
    web = resources.files("spoolrender").joinpath("web")
    try:
        return {name: web.joinpath(name).read_bytes() for name, _ in STATIC.values()}
    except OSError as exc:
        raise SpoolrenderError(f"the dashboard files are missing from the installation: {exc}") from exc


class SpoolServer(ThreadingHTTPServer):
    """A threading HTTP server with a cap on connections and the spool it serves."""

    daemon_threads = True
    request_queue_size = 64

    def __init__(self, listen: ListenAddress, config: SpoolConfig, options: ServeOptions) -> None:
        self.address_family = listen.family
        self.listen = listen
        self.config = config
        self.options = options
        self.static = _read_static()
        self.hub = EventHub(config, poll_seconds=options.poll_seconds)
        self.streams = threading.BoundedSemaphore(MAX_STREAMS)
        self._connections = threading.BoundedSemaphore(MAX_CONNECTIONS)
        # On a loopback address only loopback Host names (and --allow-host) are answered.
        self.allowed_hosts: frozenset[str] | None = None
        if options.allow_hosts or listen.ip.is_loopback:
            self.allowed_hosts = frozenset(h.lower() for h in options.allow_hosts)
        super().__init__((listen.host, listen.port), RequestHandler)

    @property
    def url(self) -> str:
        return self.listen.url(int(self.server_address[1]))

    def host_allowed(self, header: str | None) -> bool:
        if self.allowed_hosts is None or header is None:
            return True
        name = _host_name(header)
        return name in self.allowed_hosts or (self.listen.ip.is_loopback and _is_loopback_name(name))

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._connections.acquire(blocking=False):
            body = b'{"error": "too many connections, try again later"}\n'
            head = (
                "HTTP/1.0 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\nRetry-After: 1\r\nConnection: close\r\n\r\n"
            )
            with contextlib.suppress(OSError):
                request.sendall(head.encode() + body)
            self.close_request(request)  # no lingering here: this is the accepting thread
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._connections.release()
            raise

    def shutdown_request(self, request: Any) -> None:
        # Lingering close: after our answer, read (and drop) whatever the client still sends
        # (a body we refused, headers past a limit) until it closes, briefly. Closing with
        # unread data would reset the connection and could destroy the answer unread.
        with contextlib.suppress(OSError):
            request.shutdown(socket.SHUT_WR)
            deadline, drained = time.monotonic() + LINGER_SECONDS, 0
            while drained < LINGER_BYTES and (left := deadline - time.monotonic()) > 0:
                request.settimeout(left)
                chunk = request.recv(65536)
                if not chunk:
                    break
                drained += len(chunk)
        self.close_request(request)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._connections.release()

    def serve(self) -> None:
        """Serve until :meth:`stop` (or SIGTERM/SIGINT with :meth:`install_signal_handlers`)."""
        self.hub.start()
        if self.listen.ip.is_unspecified:
            log.warning(
                "listening on every interface (%s): anyone who can reach this host can read the spool", self.url
            )
        try:
            self.serve_forever(poll_interval=0.5)
        finally:
            self.hub.stop()
            self.server_close()

    def stop(self) -> None:
        """Make :meth:`serve` return (safe from a signal handler: it does not wait)."""
        # shutdown() waits for serve_forever to return, so never from its own thread.
        threading.Thread(target=self.shutdown, name="spoolrender-serve-stop", daemon=True).start()

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that vanished mid-request, most likely: one line, not a traceback on stderr.
        log.info("request from %s ended with an error", client_address[0], exc_info=True)

    def install_signal_handlers(self) -> None:
        def handle(signum: int, frame: FrameType | None) -> None:
            log.info("signal %d: stopping", signum)
            self.stop()

        signal.signal(signal.SIGTERM, handle)
        signal.signal(signal.SIGINT, handle)
