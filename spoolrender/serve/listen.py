"""Where `spoolrender serve` listens and whom it answers: the listen address, the Host check, options.

The bottom layer of :mod:`spoolrender.serve`: it knows nothing of the spool or of HTTP.
"""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass

from spoolrender.errors import ConfigError

DEFAULT_LISTEN = "127.0.0.1:8765"
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


def host_name(header: str) -> str:
    """The name part of a Host header (``[::1]:8765`` -> ``::1``), lower case."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[1:].partition("]")[0]
    return header.rpartition(":")[0] if header.count(":") == 1 else header


def is_loopback_name(name: str) -> bool:
    if name in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class ServeOptions:
    poll_seconds: float = 1.0
    keepalive_seconds: float = 15.0
    allow_hosts: tuple[str, ...] = ()
