"""A small network of "hosts" sharing a spool over sshfs, for tests and measurements.

- a server: OpenSSH's sshd in its own network namespace (and its own mount and pid
  namespaces: a private tmpfs on /run for sshd's privilege-separation dir, so nothing of
  the machine's is touched), serving a directory of this machine over SFTP;
- hosts: each in its own network namespace linked to the server's by a veth pair with
  addresses from a private test range (they exist only on that link, inside namespaces we
  created), and its own UTS, PID and mount namespaces; each mounts the served directory
  with sshfs at the same path and runs commands there; optionally a skewed clock.

Everything is created with unique names and removed again by ``close()`` (namespaces,
veths, mounts, processes, the throwaway keys), also after a failure. Root, ``ip``,
``sshd``, ``sshfs`` and FUSE are needed: ``missing()`` says what is absent.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from spoolrender.spool.layout import SpoolLayout

SSHD = "/usr/sbin/sshd"
SFTP_SERVER = "/usr/lib/openssh/sftp-server"

# A skewed wall clock for a Python process, set up by a sitecustomize module. Not
# libfaketime: under its 0.9.10 (Debian 12) the skewed runner in this lab never claimed a
# job or died of a signal; here it fakes CLOCK_MONOTONIC too, and a plain
# threading.Event().wait(0.2) never returns (with FAKETIME_DONT_FAKE_MONOTONIC=1,
# time.sleep() fails with EINVAL). A real host with a wrong clock has a wrong wall clock
# and a sound monotonic one: this.
SKEW_MODULE = """\
import time
_time, _time_ns = time.time, time.time_ns
time.time = lambda: _time() + {offset!r}
time.time_ns = lambda: _time_ns() + {offset_ns!r}
"""

# The sshfs options every host mounts with; docs/reliability.md ("A spool on sshfs") gives
# the measurement behind each one.
SSHFS_OPTIONS = (
    # sshfs's own cache of names, attributes and symlink targets keeps them for 20 s: other
    # hosts' claims, heartbeats and id reservations would look unchanged for that long.
    "dir_cache=no",
    # The kernel's name and attribute caches (1 s by default): see another host's change at
    # the next look, as NFS with actimeo=0 does.
    "entry_timeout=0",
    "attr_timeout=0",
    "negative_timeout=0",
)


def missing() -> str | None:
    """Why this machine cannot run the lab, or None."""
    if os.geteuid() != 0:
        return "needs root for network namespaces and FUSE mounts"
    for tool in ("ip", "unshare", "sshfs", "ssh-keygen", "fusermount3"):
        if shutil.which(tool) is None:
            return f"{tool} not installed (scripts/setup.sh --test installs it)"
    for path in (SSHD, SFTP_SERVER):
        if not Path(path).exists():
            return f"{path} not installed (openssh-server; scripts/setup.sh --test installs it)"
    if not Path("/dev/fuse").exists():
        return "no /dev/fuse"
    name = f"srchk{secrets.token_hex(3)}"
    if subprocess.run(["ip", "netns", "add", name], capture_output=True, check=False).returncode != 0:
        return "ip netns add is not permitted here"
    subprocess.run(["ip", "netns", "delete", name], capture_output=True, check=False)
    return None


def _run(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True)


def namespace_pids(init_pid: int) -> list[int]:
    """Every process in the pid namespace whose init is ``init_pid`` (as seen from here)."""
    try:
        ns = os.readlink(f"/proc/{init_pid}/ns/pid")
    except OSError:
        return []
    if ns == os.readlink("/proc/self/ns/pid"):  # never this machine's own processes
        raise RuntimeError(f"process {init_pid} is not in a pid namespace of its own")
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                if os.readlink(f"/proc/{entry}/ns/pid") == ns:
                    pids.append(int(entry))
    return pids


def _command_name(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return None


def _child_of(pid: int, timeout: float = 10.0) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
            if children:
                return int(children[0])
        time.sleep(0.02)
    raise RuntimeError(f"process {pid} started no child within {timeout} s")


class Host:
    """One "host": network, UTS, PID and mount namespaces, the share mounted with sshfs.

    ``argv`` runs as the namespace's init once the mount is up; when it exits, or when
    the host is killed, the kernel kills every process of the namespace (sshfs included)
    and the mount goes with the mount namespace.
    """

    def __init__(self, lab: NetfsLab, name: str, index: int, argv: Sequence[str], log: Path,
                 *, skew: float | None = None, sshfs_options: Sequence[str] = SSHFS_OPTIONS) -> None:  # fmt: skip
        self.name = name
        self.netns = f"{lab.tag}-{index}"
        server_ip, self.ip = f"10.213.{index}.1", f"10.213.{index}.2"
        srv_if, host_if = f"{lab.tag}s{index}", f"{lab.tag}h{index}"
        lab.netns.append(self.netns)
        _run("ip", "netns", "add", self.netns)
        # Created inside the server's namespace, then one end moved: no interface ever
        # appears in the machine's own network namespace.
        _run("ip", "-n", lab.server_ns, "link", "add", srv_if, "type", "veth", "peer", "name", host_if)
        _run("ip", "-n", lab.server_ns, "link", "set", host_if, "netns", self.netns)
        _run("ip", "-n", lab.server_ns, "addr", "add", f"{server_ip}/24", "dev", srv_if)
        _run("ip", "-n", lab.server_ns, "link", "set", srv_if, "up")
        _run("ip", "-n", self.netns, "addr", "add", f"{self.ip}/24", "dev", host_if)
        _run("ip", "-n", self.netns, "link", "set", host_if, "up")
        _run("ip", "-n", self.netns, "link", "set", "lo", "up")
        ssh_opts = [
            f"IdentityFile={lab.keys / 'client'}", f"UserKnownHostsFile={lab.keys / 'known_hosts'}",
            "StrictHostKeyChecking=yes", "BatchMode=yes", "IdentitiesOnly=yes", "ConnectTimeout=20",
        ]  # fmt: skip
        options = ",".join([*sshfs_options, *ssh_opts])
        env = []
        if skew:
            env = skewed_env(lab.work, skew)
        script = (
            'hostname "$1" && shift && '
            # -F /dev/null: no ssh config of this machine's root user applies.
            f'sshfs -F /dev/null -o {options} "root@{server_ip}:{lab.share}" "{lab.mountpoint}" && '
            'exec "$@"'
        )
        with open(log, "ab") as out:
            self.proc = subprocess.Popen(
                ["ip", "netns", "exec", self.netns,
                 "unshare", "-u", "-p", "-f", "-m", "--mount-proc", "--kill-child=SIGKILL",
                 "sh", "-c", script, "sh", name, *env, *argv],
                stdout=out, stderr=subprocess.STDOUT,
            )  # fmt: skip
        self.init_pid = 0
        lab.hosts.append(self)  # from now on close() stops it, whatever happens next
        self.init_pid = _child_of(self.proc.pid)  # unshare's child: pid 1 of the namespace

    def pids(self) -> list[int]:
        return namespace_pids(self.init_pid) if self.init_pid else []

    def kill(self, *, mount_first_gap: float | None = None) -> list[int]:
        """Power cut: every process of the host stops at one instant, then dies; returns the pids.

        All are stopped (SIGSTOP) before any is SIGKILLed. Killed one by one, a process not
        yet killed ran on after another had died: once pids wrapped around (pid_max is
        32768 here, and a suite run goes round it many times) sshfs could come before the
        runner, and a cron host's drains always come after it; sshfs's death aborts the
        FUSE connection, and the runner got ECONNABORTED (or ENOTCONN) from its mount and
        logged ERROR `spool trouble` before its own SIGKILL came (ci14). A stopped process
        runs no more code of its own: the SIGSTOP is pending before anything dies, and a
        fork under way is restarted after it (its child cannot escape).

        ``mount_first_gap``: the lab's own test: SIGKILL sshfs first and wait that long
        before the rest (what a wrapped pid order gives in microseconds).
        """
        pids = self.freeze()
        if mount_first_gap is not None:
            for pid in pids:
                if _command_name(pid) == "sshfs":
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
            time.sleep(mount_first_gap)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.proc.kill()  # unshare itself (outside the namespace); --kill-child does the rest
        self.proc.wait()
        return pids

    def freeze(self) -> list[int]:
        """A VM pause: SIGSTOP every process of the host (runner, renders, its filesystem's
        client); returns the pids. The host is listed again until no new pid appears: a
        process started between a listing and its parent's stop (a cron host's next drain, a
        render) would run on, on a host taken for frozen."""
        pids: list[int] = []
        while new := [pid for pid in self.pids() if pid not in pids]:
            for pid in new:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGSTOP)
            pids += new
        return pids

    def thaw(self) -> None:
        for pid in self.pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.thaw()  # a stopped process dies of SIGKILL too, but its pipes drain first
            self.kill()


class NetfsLab:
    """sshd in a namespace of its own, serving ``share``; hosts added with ``host()``."""

    def __init__(self, work: Path, share: Path, *, sftp_denied: Sequence[str] = ()) -> None:
        self.tag = f"sr{secrets.token_hex(3)}"  # unique: other tests may run labs too
        self.work = work
        self.share = share
        self.keys = work / "keys"
        self.mountpoint = work / "mnt"
        self.netns: list[str] = []
        self.hosts: list[Host] = []
        self.sshd: subprocess.Popen[bytes] | None = None
        self.server_ns = f"{self.tag}-srv"
        try:
            self._start(sftp_denied)
        except BaseException:
            self.close()
            raise

    def _start(self, sftp_denied: Sequence[str]) -> None:
        self.keys.mkdir(mode=0o700)
        self.mountpoint.mkdir()
        # Throwaway keys, in the test's temp dir only.
        _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(self.keys / "client"))
        _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(self.keys / "host"))
        (self.keys / "authorized_keys").write_text((self.keys / "client.pub").read_text())
        host_pub = (self.keys / "host.pub").read_text().split()
        # Every host's server address (10.213.N.1) presents the same throwaway host key.
        (self.keys / "known_hosts").write_text(f"10.213.*.1 {host_pub[0]} {host_pub[1]}\n")
        sftp = SFTP_SERVER + (f" -P {','.join(sftp_denied)}" if sftp_denied else "")
        config = self.work / "sshd_config"
        config.write_text(
            f"ListenAddress 0.0.0.0\nHostKey {self.keys / 'host'}\n"
            f"AuthorizedKeysFile {self.keys / 'authorized_keys'}\nPermitRootLogin prohibit-password\n"
            "PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\n"
            f"PidFile none\nLogLevel ERROR\nSubsystem sftp {sftp}\nMaxStartups 100\nMaxSessions 100\n"
        )
        self.netns.append(self.server_ns)
        _run("ip", "netns", "add", self.server_ns)
        _run("ip", "-n", self.server_ns, "link", "set", "lo", "up")
        with open(self.work / "sshd.log", "ab") as log:
            # sshd needs /run/sshd: a tmpfs on /run in a mount namespace of its own, so the
            # machine's /run is never touched. Its own pid namespace: stop() ends every
            # session process with it.
            self.sshd = subprocess.Popen(
                ["ip", "netns", "exec", self.server_ns,
                 "unshare", "-m", "-p", "-f", "--mount-proc", "--kill-child=SIGKILL", "sh", "-c",
                 f"mount -t tmpfs tmpfs /run && mkdir /run/sshd && exec {SSHD} -D -e -f {config}"],
                stdout=log, stderr=subprocess.STDOUT,
            )  # fmt: skip
        wait_until(self._listening, 30, "sshd listening")

    def _listening(self) -> bool:
        # /proc/net/tcp as seen from the server's namespace: port 22 (0016) in LISTEN (0A).
        tcp = subprocess.run(["ip", "netns", "exec", self.server_ns, "cat", "/proc/net/tcp"],
                             capture_output=True, text=True, check=False).stdout  # fmt: skip
        return any(f.split()[1].endswith(":0016") and f.split()[3] == "0A" for f in tcp.splitlines()[1:])

    def host(self, name: str, argv: Sequence[str], log: Path, *, skew: float | None = None,
             sshfs_options: Sequence[str] = SSHFS_OPTIONS) -> Host:  # fmt: skip
        return Host(self, name, len(self.hosts) + 1, argv, log, skew=skew, sshfs_options=sshfs_options)

    def close(self) -> None:
        for host in self.hosts:
            with contextlib.suppress(OSError):
                host.stop()
        if self.sshd is not None and self.sshd.poll() is None:
            self.sshd.kill()  # --kill-child: sshd and every session go with it
            self.sshd.wait()
        for ns in reversed(self.netns):  # deleting a namespace removes its veth ends too
            subprocess.run(["ip", "netns", "delete", ns], capture_output=True, check=False)
        shutil.rmtree(self.keys, ignore_errors=True)


def skewed_env(work: Path, offset: float) -> list[str]:
    """``env PYTHONPATH=DIR``: a command after it runs Python with its wall clock ``offset`` s
    ahead (a sitecustomize in DIR, made under ``work``)."""
    path = work / f"skew{offset:+g}"
    path.mkdir(exist_ok=True)
    (path / "sitecustomize.py").write_text(SKEW_MODULE.format(offset=offset, offset_ns=int(offset * 1e9)))
    return ["env", f"PYTHONPATH={path}"]


def runner_argv(spool: Path, *, drain: bool = False) -> list[str]:
    argv = [sys.executable, "-m", "spoolrender.cli", "run", "-v", "--spool", str(spool)]
    if not drain:
        return argv
    # cron: a drain every second, each one a fresh process that renders what it can claim.
    return ["sh", "-c", 'while :; do "$@" --drain; sleep 1; done', "sh", *argv]


def beacon_hosts(layout: SpoolLayout) -> set[str]:
    hosts = set()
    for name in os.listdir(layout.runners):
        with contextlib.suppress(OSError, ValueError, KeyError):  # one being replaced right now
            hosts.add(json.loads((layout.runners / name).read_text())["host"])
    return hosts


def unexplained_hidden_files(root: Path) -> list[str]:
    """``.fuse_hidden*`` files under ``root`` (the server's disk): sshfs (libfuse's high-level
    API without hard_remove, which sshfs 3.7 does not accept) renames a file unlinked while
    open on its mount to such a name and removes it at the last close, so one left behind
    means a file unlinked while still open. Not counted: another name of a run record beside
    it, the temporary file of the record's exclusive create (``durable.create_exclusive``),
    closed before its unlink. The kernel sends a FUSE release after close() returns, an
    unlink can overtake it, and libfuse 3.14 (Debian 12) then may lose track of the hidden
    name when the release runs during the unlink (libfuse#746, fixed upstream by #782 after
    3.14): seen once in about ten runs of test_netfs_hosts.py's exactly-once test, whose
    mount had hidden (and later removed) 18 other names in that run."""
    found = []
    for path in root.rglob(".fuse_hidden*"):
        hidden = path.stat()
        if not any(os.path.samestat(hidden, run.stat()) for run in path.parent.glob("run-*.json")):
            found.append(str(path))
    return found


def wait_until(predicate: Callable[[], object], timeout: float, what: str = "condition") -> float:
    """Seconds until ``predicate()`` held; polls, never assumes an idle machine."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if predicate():
            return time.monotonic() - start
        time.sleep(0.05)
    raise AssertionError(f"{what}: not within {timeout} s")
