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
    """The name part of a Host header (``[::1]:8765`` -> ``::1``), lower case, no final dot."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[1:].partition("]")[0]
    name = header.rpartition(":")[0] if header.count(":") == 1 else header
    return name.rstrip(".")


def _address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        ip = ipaddress.ip_address(text.partition("%")[0])  # fe80::1%eth0: the zone is no part of it
    except ValueError:
        return None
    # An IPv4 client of a dual-stack [::] socket shows up as ::ffff:a.b.c.d.
    return ip.ipv4_mapped if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped else ip


@dataclass(frozen=True)
class HostPolicy:
    """Which ``Host`` headers are answered, on every listen address (DNS rebinding defence).

    A web page that makes its own name resolve to this host (DNS rebinding) sends requests
    with its own name as Host; answering only known names keeps it out, whether the server
    listens on loopback, one interface, or all of them (0.0.0.0, [::]). Known are: the
    address literal the connection reached (``http://10.0.0.5:8765/`` on that interface),
    loopback names on a loopback connection, and the ``--allow-host`` names.
    """

    allow_names: frozenset[str] = frozenset()

    @classmethod
    def from_names(cls, names: tuple[str, ...]) -> HostPolicy:
        return cls(frozenset(host_name(n) for n in names))

    def allows(self, header: str, local_address: str) -> bool:
        name = host_name(header)
        if name in self.allow_names:
            return True
        reached = _address(local_address)
        asked = _address(name)
        if asked is not None:
            return asked == reached
        return name in LOOPBACK_NAMES and reached is not None and reached.is_loopback


@dataclass(frozen=True)
class ServeOptions:
    poll_seconds: float = 1.0
    keepalive_seconds: float = 15.0
    allow_hosts: tuple[str, ...] = ()
    header_seconds: float = 10.0  # the whole request line and headers, however they trickle in
    max_per_client: int = 16  # connections at once from one address (a proxy in front: raise it)
    history_seconds: float = 60.0  # one history sample (the plots) per this many seconds
