"""The `spoolrender serve` process: the listening socket, its connection caps, start and stop.

The top layer of :mod:`spoolrender.serve`: it puts together the event hub
(:mod:`.events`), the dashboard's files and the request handler (:mod:`.http`), and
hands every connection to a handler thread.

Safe defaults: it listens on 127.0.0.1 unless told otherwise (an empty host is refused;
"every interface" has to be spelled 0.0.0.0 or [::]); on every address it answers only
requests whose Host is the address reached, a loopback name on loopback, or an
``--allow-host`` name, so a web page cannot reach it through DNS rebinding
(:class:`.listen.HostPolicy`); write actions are off until a token is configured
(:mod:`.auth`), and then need ``Authorization: Bearer <token>``. One client address gets
at most ``max_per_client`` of the ``MAX_CONNECTIONS``, and a request's headers must be
complete within ``header_seconds`` (:mod:`.http`), so slow clients cannot lock others out.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import signal
import socket
import threading
import time
from collections import Counter
from http.server import ThreadingHTTPServer
from importlib import resources
from types import FrameType
from typing import Any

from spoolrender.config.spool_config import SpoolConfig
from spoolrender.errors import SpoolrenderError
from spoolrender.serve.auth import load_serve_token
from spoolrender.serve.browse import JobIndex
from spoolrender.serve.events import EventHub
from spoolrender.serve.history import HistoryRecorder
from spoolrender.serve.http import STATIC, Site
from spoolrender.serve.listen import HostPolicy, ListenAddress, ServeOptions
from spoolrender.serve.routes import SpoolHandler

log = logging.getLogger(__name__)

MAX_CONNECTIONS = 64
MAX_STREAMS = 32  # event streams at once (each holds a connection and a thread)
LINGER_SECONDS = 2.0
LINGER_BYTES = 16 * 1024 * 1024


def _read_static() -> dict[str, bytes]:
    web = resources.files("spoolrender.serve").joinpath("web")
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
        self.token = load_serve_token(config)  # before listening: a bad token file stops us here
        self.hub = EventHub(config, poll_seconds=options.poll_seconds)
        self.history = HistoryRecorder(config, options.history_seconds)
        self.index = JobIndex(config)
        self._connections = threading.BoundedSemaphore(MAX_CONNECTIONS)
        self._per_client: Counter[str] = Counter()
        self._per_client_lock = threading.Lock()
        site = Site(
            config=config,
            token=self.token,
            keepalive_seconds=options.keepalive_seconds,
            header_seconds=options.header_seconds,
            hub=self.hub,
            streams=threading.BoundedSemaphore(MAX_STREAMS),
            static=_read_static(),
            hosts=HostPolicy.from_names(options.allow_hosts),
            index=self.index,
            history=self.history,
        )
        super().__init__((listen.host, listen.port), functools.partial(SpoolHandler, site=site))

    @property
    def url(self) -> str:
        return self.listen.url(int(self.server_address[1]))

    def _refuse(self, request: Any, why: str) -> None:
        body = json.dumps({"error": f"{why}, try again later"}).encode() + b"\n"
        head = (
            "HTTP/1.0 503 Service Unavailable\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nRetry-After: 1\r\nConnection: close\r\n\r\n"
        )
        # A few hundred bytes fit any socket buffer: this never blocks the accepting thread.
        with contextlib.suppress(OSError):
            request.sendall(head.encode() + body)
        self.close_request(request)  # no lingering here: this is the accepting thread

    def process_request(self, request: Any, client_address: Any) -> None:
        # One client (address) gets at most max_per_client connections, so a slow or
        # hostile one cannot take all MAX_CONNECTIONS from everybody else.
        client = str(client_address[0])
        with self._per_client_lock:
            if self._per_client[client] >= self.options.max_per_client:
                full = True
            else:
                full = False
                self._per_client[client] += 1
        if full:
            self._refuse(request, "too many connections from your address")
            return
        if not self._connections.acquire(blocking=False):
            self._release_client(client)
            self._refuse(request, "too many connections")
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._connections.release()
            self._release_client(client)
            raise

    def _release_client(self, client: str) -> None:
        with self._per_client_lock:
            self._per_client[client] -= 1
            if self._per_client[client] <= 0:
                del self._per_client[client]

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
            self._release_client(str(client_address[0]))

    def serve(self) -> None:
        """Serve until :meth:`stop` (or SIGTERM/SIGINT with :meth:`install_signal_handlers`)."""
        self.hub.start()
        self.history.start()
        threading.Thread(target=self._warm_index, name="spoolrender-index", daemon=True).start()
        if self.listen.ip.is_unspecified:
            log.warning(
                "listening on every interface (%s): anyone who can reach this host can read the spool", self.url
            )
        try:
            self.serve_forever(poll_interval=0.5)
        finally:
            self.hub.stop()
            self.history.stop()
            self.server_close()

    def _warm_index(self) -> None:
        try:
            self.index.warm()
        except OSError as exc:  # only a head start: pages read what they need anyway
            log.info("could not read the finished jobs' times ahead: %s", exc)

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
