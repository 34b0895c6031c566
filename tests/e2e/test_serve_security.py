"""`spoolrender serve` under attack (issue 12, items 7-10), each against a real server process.

- 7: the write token never lives in a file other local users can read;
- 8: slow clients (slowloris) neither hold a connection past a header deadline nor take
  more than their share of the connections;
- 9: the Host check (DNS rebinding) holds on every listen address, 0.0.0.0 and [::] too;
- 10: an event stream's slot is free as soon as its client goes away.
"""

from __future__ import annotations

import contextlib
import grp
import http.client
import os
import socket
import stat
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from support.browser.server import Server, running_server
from support.processes import MEMBER_UID, as_member, spoolrender_cmd
from support.spool_jobs import write_spool_config
from support.waiting import wait_for

from spoolrender.config.secret_file import read_secret_line
from spoolrender.errors import ConfigError
from spoolrender.spool.layout import SpoolLayout

TOKEN = "test-token-0123456789abcdef"


def serve_outcome(spool: Path, *extra: str, timeout: float = 60) -> tuple[int | None, str, str]:
    """Start `serve`; its exit code (None: it started serving, and was stopped), stdout, stderr."""
    proc = subprocess.Popen(
        spoolrender_cmd("serve", "--spool", str(spool), "--listen", "127.0.0.1:0", *extra),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    first = proc.stdout.readline()  # the "serving ..." line, or "" when it exits at once
    if first.startswith("serving"):
        proc.terminate()
        out, err = proc.communicate(timeout=timeout)
        return None, first + out, err
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, first + out, err


# --- 7: the token ----------------------------------------------------------------------------


def test_init_group_writes_no_secret_and_a_world_readable_token_is_refused(tmp_path: Path) -> None:
    group = grp.getgrgid(os.getgid()).gr_name
    spool = tmp_path / "spool"
    init = subprocess.run(spoolrender_cmd("init", str(spool), "--group", group), capture_output=True, check=False)
    assert init.returncode == 0, init.stderr
    config_file = spool / "spoolrender.yaml"
    assert not yaml.safe_load(config_file.read_text())  # every line a comment: no secret in it
    assert "serve_token_file" in config_file.read_text()  # the template points to the safe place
    os.chmod(config_file, 0o644)  # as `init` leaves it under the usual umask

    # An inline token in a file every local user can read: refused, with what to do instead.
    config_file.write_text(f"serve_token: {TOKEN}\n")
    code, _, err = serve_outcome(spool)
    assert code == 1, err
    assert "serve_token" in err and "other users" in err and "serve_token_file" in err
    # Readable by the spool's group: the submitters could read the token just as well.
    os.chmod(config_file, 0o640)
    code, _, err = serve_outcome(spool)
    assert code == 1 and "the spool's group" in err, err
    os.chmod(config_file, 0o600)  # the owner only: fine
    code, out, err = serve_outcome(spool)
    assert code is None and "write actions on" in out, err


@pytest.mark.parametrize(
    ("mode", "accepted"),
    # The spool fixture's group is the token file's group: 0640 lets the submitters read it.
    [(0o600, True), (0o400, True), (0o640, False), (0o644, False), (0o604, False), (0o660, False), (0o602, False)],
)
def test_token_file_modes(spool: SpoolLayout, tmp_path: Path, mode: int, accepted: bool) -> None:
    token_file = tmp_path / "secrets" / "serve-token"
    token_file.parent.mkdir()
    token_file.write_text(TOKEN + "\n")
    os.chmod(token_file, mode)
    (spool.root / "spoolrender.yaml").write_text(f"serve_token_file: {token_file}\n")
    code, out, err = serve_outcome(spool.root)
    if accepted:
        assert code is None and "write actions on" in out, err
    else:
        assert code == 1 and str(token_file) in err and f"{mode:04o}" in err, (code, err)


@pytest.mark.skipif(os.geteuid() != 0, reason="chgrp to groups of our choice needs root")
@pytest.mark.parametrize(
    ("group", "accepted", "message"),
    [
        ("staff", False, "is the spool's group"),  # the submitters' group: refused, members or not
        ("nogroup", False, "has other members"),  # the primary group of nobody (and others)
        ("root", True, ""),  # a group of its own: only the server's user (root) is in it
    ],
)
def test_group_readable_token_file_only_in_a_group_of_its_own(
    spool: SpoolLayout, tmp_path: Path, group: str, accepted: bool, message: str
) -> None:
    """Issue 20 item 11: a 0640 token file is refused when its group is the spool's group
    (whose members submit jobs and, with the token, could pause the spool) or has members
    other than the server's user; accepted in a group of its own."""
    staff = grp.getgrnam("staff").gr_gid
    for directory in (spool.root, spool.incoming):
        os.chown(directory, -1, staff)  # as `init --group staff` makes it
    token_file = tmp_path / "serve-token"
    token_file.write_text(TOKEN + "\n")
    os.chown(token_file, -1, grp.getgrnam(group).gr_gid)
    os.chmod(token_file, 0o640)
    (spool.root / "spoolrender.yaml").write_text(f"serve_token_file: {token_file}\n")
    code, out, err = serve_outcome(spool.root)
    if accepted:
        assert code is None and "write actions on" in out, err
    else:
        assert code == 1 and message in err and "chmod 600" in err and "no other members" in err, err


def test_token_file_problems_are_clear(spool: SpoolLayout, tmp_path: Path) -> None:
    config_file = spool.root / "spoolrender.yaml"
    short = tmp_path / "short"
    short.write_text("abc\n")
    os.chmod(short, 0o600)
    for setting, expected in (
        (f"serve_token_file: {tmp_path / 'missing'}", "cannot read"),
        (f"serve_token_file: {tmp_path}", "not a regular file"),
        (f"serve_token_file: {short}", "at least 16 characters"),
        (f"serve_token_file: {short}\nserve_token: {TOKEN}", "not both"),
    ):
        config_file.write_text(setting + "\n")
        os.chmod(config_file, 0o600)
        code, _, err = serve_outcome(spool.root)
        assert code == 1 and expected in err, (setting, code, err)


def test_token_file_enables_writes(spool: SpoolLayout, tmp_path: Path) -> None:
    token_file = spool.root / "serve-token"  # relative to the spool
    token_file.write_text(TOKEN + "\n")
    os.chmod(token_file, 0o600)
    write_spool_config(spool, {"serve_token_file": "serve-token"})
    with running_server(spool.root, tmp_path / "serve.log") as server:
        body = yaml.safe_dump({"renderer": "command", "command": "props", "props": {}}).encode()
        bearer = {"Authorization": f"Bearer {TOKEN}"}
        resp = server.request("POST", "/jobs?name=viafile.yaml", body=body, headers=bearer)
        assert resp.status == 201, resp.body
        wrong = server.request("POST", "/jobs?name=other.yaml", body=body, headers={"Authorization": "Bearer x" * 3})
        assert wrong.status == 403


# --- 8: slow clients ---------------------------------------------------------------------------


def connect_from(server: Server, source: str) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.settimeout(15)
    sock.bind((source, 0))
    sock.connect((server.host, server.port))
    return sock


def test_header_deadline_ends_a_trickling_client(spool: SpoolLayout, tmp_path: Path) -> None:
    with running_server(spool.root, tmp_path / "serve.log", "--header-timeout", "2") as server:
        sock = connect_from(server, "127.0.0.1")
        try:
            sock.sendall(b"GET /status HTTP/1.0\r\n")
            deadline = time.monotonic() + 60
            closed = False
            while time.monotonic() < deadline and not closed:
                # One header line every 0.5 s: each read is quick, the whole never completes.
                try:
                    sock.sendall(b"X-Slow: 1\r\n")
                    sock.settimeout(0.5)
                    sock.recv(4096)  # an answer (408) or the end: either way it is over
                    closed = True
                except TimeoutError:
                    continue
                except (BrokenPipeError, ConnectionResetError):
                    closed = True
            assert closed, "a client trickling header lines kept its connection for 60 s"
        finally:
            sock.close()


@contextlib.contextmanager
def trickling(server: Server, count: int, source: str) -> Iterator[list[socket.socket]]:
    """``count`` connections from ``source`` that start a request and never finish it."""
    socks: list[socket.socket] = []
    try:
        for _ in range(count):
            sock = connect_from(server, source)
            sock.sendall(b"GET /status HTTP/1.0\r\nX-Slow: 1\r\n")
            socks.append(sock)
        yield socks
    finally:
        for sock in socks:
            sock.close()


def test_one_client_cannot_take_every_connection(spool: SpoolLayout, tmp_path: Path) -> None:
    with running_server(spool.root, tmp_path / "serve.log") as server, trickling(server, 64, "127.0.0.1") as socks:
        # Another client is answered while the 64 trickle (127.0.0.2 is another loopback source).
        other = connect_from(server, "127.0.0.2")
        with contextlib.closing(other):
            other.sendall(f"GET /status HTTP/1.0\r\nHost: 127.0.0.1:{server.port}\r\n\r\n".encode())
            resp = http.client.HTTPResponse(other)
            resp.begin()
            assert resp.status == 200
        # The trickler's connections past its share were told so at once.
        refused = 0
        for sock in socks:
            sock.settimeout(0.05)
            with contextlib.suppress(TimeoutError, ConnectionResetError):
                refused += sock.recv(100).startswith(b"HTTP/1.0 503")
        assert refused >= 64 - 16, refused


# --- 9: Host allowlist on every address ------------------------------------------------------


def has_ipv6() -> bool:
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


def status_with_host(target: str, port: int, host: str) -> int:
    conn = http.client.HTTPConnection(target, port, timeout=60)
    try:
        conn.request("GET", "/status", headers={"Host": host})
        resp = conn.getresponse()
        resp.read()
        return resp.status
    finally:
        conn.close()


@pytest.mark.parametrize("listen", ["0.0.0.0:0", "[::]:0"])
def test_host_allowlist_on_every_address(spool: SpoolLayout, tmp_path: Path, listen: str) -> None:
    if listen.startswith("[") and not has_ipv6():
        pytest.skip("no IPv6 on this host")
    log = tmp_path / "serve.log"
    with running_server(spool.root, log, "--listen", listen, "--allow-host", "render.example") as server:
        port = server.port
        targets = ["127.0.0.1"] + (["::1"] if listen.startswith("[") else [])
        for target in targets:
            literal = f"[{target}]" if ":" in target else target
            assert status_with_host(target, port, f"{literal}:{port}") == 200  # the address it reached
            assert status_with_host(target, port, f"localhost:{port}") == 200  # a loopback name, on loopback
            assert status_with_host(target, port, "render.example") == 200  # --allow-host
            # DNS rebinding: the attacker's name (resolving to this host) is not served...
            assert status_with_host(target, port, f"rebind.attacker.example:{port}") == 403
            assert status_with_host(target, port, "RENDER.example.attacker.example") == 403
            # ...nor an address literal this connection did not reach.
            assert status_with_host(target, port, f"10.11.12.13:{port}") == 403
            assert status_with_host(target, port, f"[fe80::1]:{port}") == 403


# --- 10: event-stream slots ---------------------------------------------------------------------


def test_closed_event_streams_free_their_slots_at_once(spool: SpoolLayout, tmp_path: Path) -> None:
    # A keepalive far away: only noticing the disconnect itself can free the slots in time.
    extra = ("--keepalive", "600", "--max-per-client", "64")
    with running_server(spool.root, tmp_path / "serve.log", *extra) as server:
        streams = [server.events() for _ in range(32)]
        for stream in streams:
            assert stream.next().kind == "summary"
        assert server.get("/events").status == 503  # every slot taken
        for stream in streams:
            stream.close()

        def all_fit() -> bool:
            """32 new streams open at once (each 503 means a slot is still held)."""
            conns = []
            try:
                for _ in range(32):
                    conn = server.connection()
                    conns.append(conn)
                    conn.request("GET", "/events")
                    if conn.getresponse().status != 200:
                        return False
                return True
            finally:
                for conn in conns:
                    conn.close()

        wait_for(all_fit, timeout=30)


@pytest.mark.skipif(os.geteuid() != 0, reason="a second uid needs root (setpriv)")
def test_a_secret_file_owned_by_another_user_is_refused(member_spool: SpoolLayout) -> None:
    """Review 2: the checks looked at the mode and group only. A 0600 token file owned by a
    spool-group member (planted at the configured path, or reached through a symlink, which
    the reader follows on purpose) was accepted: its owner knows, and can change, serve's
    token or a hook's HMAC key. Only the runner's uid or root may own a secret file."""
    home = member_spool.root.parent / "member-home"
    home.mkdir()
    os.chown(home, MEMBER_UID, -1)
    token = home / "token"
    as_member("sh", "-c", f"umask 077 && printf 'chosen-by-the-member-0123456789\\n' > {token}")
    assert os.stat(token).st_uid == MEMBER_UID and stat.S_IMODE(os.stat(token).st_mode) == 0o600
    with pytest.raises(ConfigError, match=f"is owned by uid {MEMBER_UID}, not by the runner's uid 0 or root"):
        read_secret_line(token, f"serve_token_file {token}", "anyone with it can pause the spool", member_spool.root)
