"""Real upload clients against a real OpenSSH sshd on a free loopback port.

Shared by tests/e2e/test_uploads.py and bench/upload_intake.py. Everything lives in a temp dir:
a throwaway host key and client key, an sshd_config with ``StrictModes no`` (the temp dir
is not root-owned 0755 all the way up), ``AuthorizedKeysFile`` pointing into it, and the
pid file. sshd runs in the foreground (``-D -e``) as our child, so it is stopped by pid.
Debian's default SFTP subsystem (``/usr/lib/openssh/sftp-server``) is used, as on a stock
host: that process is the one writing an uploaded file on the receiving side.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

SSHD = "/usr/sbin/sshd"
SFTP_SERVER = "/usr/lib/openssh/sftp-server"
PROGRAMS = Path(__file__).parents[1] / "programs"
JOB_HASH = PROGRAMS / "job_hash.py"


def sshd_missing() -> str | None:
    """Why the real-client tests cannot run here, or None."""
    for tool in (SSHD, SFTP_SERVER):
        if not os.access(tool, os.X_OK):
            return f"{tool} is not installed (bash scripts/setup.sh --test installs openssh-server)"
    for tool in ("ssh", "scp", "sftp", "ssh-keygen", "rsync"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (bash scripts/setup.sh --test installs openssh-client and rsync)"
    if os.geteuid() != 0:
        return "sshd needs root here (privilege separation); the tests run as root in CI"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class SshServer:
    """sshd on 127.0.0.1:<free port>, keys and config in ``workdir``."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.key = workdir / "client_ed25519"
        self.port = 0
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 30.0) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        host_key = self.workdir / "host_ed25519"
        for key in (host_key, self.key):
            if not key.exists():
                subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
        (self.workdir / "authorized_keys").write_bytes(self.key.with_suffix(".pub").read_bytes())
        # sshd refuses to start without its privilege separation directory.
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
        for _ in range(5):  # another process may take the free port before sshd binds it
            self.port = _free_port()
            config = self.workdir / "sshd_config"
            config.write_text(
                "\n".join(
                    [
                        "ListenAddress 127.0.0.1",
                        f"HostKey {host_key}",
                        f"AuthorizedKeysFile {self.workdir / 'authorized_keys'}",
                        f"PidFile {self.workdir / 'sshd.pid'}",
                        "StrictModes no",
                        "PermitRootLogin prohibit-password",
                        "PasswordAuthentication no",
                        "KbdInteractiveAuthentication no",
                        "UsePAM no",
                        "MaxStartups 200",
                        "MaxSessions 100",
                        f"Subsystem sftp {SFTP_SERVER}",
                        "",
                    ]
                )
            )
            log = open(self.workdir / "sshd.log", "ab")  # noqa: SIM115 - the child keeps it
            self._proc = subprocess.Popen(
                [SSHD, "-D", "-e", "-f", str(config), "-p", str(self.port)], stdout=log, stderr=log
            )
            log.close()
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline and self._proc.poll() is None:
                if self.ssh("true", check=False).returncode == 0:
                    return
                time.sleep(0.1)
            self.stop()
        raise RuntimeError(f"sshd did not start; see {self.workdir / 'sshd.log'}")

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._proc = None

    def options(self) -> list[str]:
        return [
            "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o", "BatchMode=yes",
            "-o", "LogLevel=ERROR", "-i", str(self.key),
        ]  # fmt: skip

    def ssh(self, command: str, *, check: bool = True) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(
            ["ssh", *self.options(), "-p", str(self.port), "root@127.0.0.1", command],
            capture_output=True,
            check=check,
            timeout=60,
        )

    # --- the clients, as a user types them --------------------------------------------

    def scp(self, src: Path, dest: Path, limit_kbit: int) -> list[str]:
        port = ["-P", str(self.port)]
        return ["scp", *self.options(), *port, "-l", str(limit_kbit), str(src), f"root@127.0.0.1:{dest}"]

    def sftp_put(self, src: Path, dest: Path, limit_kbit: int) -> list[str]:
        batch = src.with_name(src.name + ".sftp-batch")
        batch.write_text(f'put "{src}" "{dest}"\n')
        port = ["-P", str(self.port)]
        return ["sftp", *self.options(), *port, "-l", str(limit_kbit), "-b", str(batch), "root@127.0.0.1"]

    def rsync(self, src: Path, dest: Path, *extra: str) -> list[str]:
        ssh = " ".join(["ssh", *self.options(), "-p", str(self.port)])
        return ["rsync", "-e", ssh, *extra, str(src), f"root@127.0.0.1:{dest}"]


def job_file(name: str, size: int, out_dir: str = "uploads", props: str = "{}") -> bytes:
    """A valid job whose tail is a long YAML comment: a truncated copy still parses."""
    head = f"renderer: command\ncommand: jobhash\noutput: {out_dir}/{name}.txt\nprops: {props}\n".encode()
    line = b"# padding: a long comment, so that any truncated prefix is still valid YAML\n"
    body = head + line * max(0, (size - len(head)) // len(line) + 1)
    return body[:size].rsplit(b"\n", 1)[0] + b"\n"


def digest(data: bytes) -> str:
    return f"{len(data)} {hashlib.sha256(data).hexdigest()}"


@dataclass(frozen=True)
class ClientRun:
    argv: list[str]
    started: float  # monotonic
    exited: float
    returncode: int
    stderr: str


def run_client(argv: list[str], timeout: float = 300.0) -> ClientRun:
    """Run one upload client to its end."""
    started = time.monotonic()
    proc = subprocess.run(argv, capture_output=True, timeout=timeout, stdin=subprocess.DEVNULL)
    return ClientRun(argv, started, time.monotonic(), proc.returncode, proc.stderr.decode(errors="replace"))


def job_hash_command() -> list[str]:
    """The spool config's ``jobhash`` command: writes the job file's byte count and hash."""
    return [sys.executable, str(JOB_HASH), "{output}", "{job_file}", "{props_file}"]
