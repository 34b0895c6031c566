"""A replicated GlusterFS volume between network namespaces, for tests (issue 26).

- three brick hosts: one network namespace each, one glusterd each (Debian's
  glusterfs-server) in a mount namespace of its own with ``/var/lib/glusterd``, ``/run`` and
  ``/var/log/glusterfs`` bind-mounted from the lab's directory (nothing of the machine's is
  touched), its bricks plain directories in the lab's directory; one ``replica 3`` volume
  with spoolrender's options (``spoolrender.spool.glusterfs.VOLUME_OPTIONS``); more volumes on
  demand, a brick of which may live on a small filesystem of its own (``small_filesystem``:
  a tmpfs in its server's mount namespace, to be filled up);
- an observer mount for the test itself (its FUSE client in a namespace of its own, the
  mount in the test's mount namespace);
- client hosts: network, UTS, PID and mount namespaces of their own (as
  ``netfs_lab.Host``), each mounting the volume with ``MOUNT_OPTIONS`` at the observer's
  path inside its own mount namespace, its FUSE client a process of the host (a power cut
  takes it too).

Every node hangs on a bridge that lives in a namespace of its own: no interface or address
appears in the machine's namespace, so labs of parallel tests cannot collide (the names
carry a random tag; the addresses exist only inside the lab). ``close()`` removes it all,
also after a failure. Facts behind the procedure: /work/shared/research/distributed-fs-lab.md.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from netfs_lab import Host, _child_of, wait_until

from spoolrender.spool.glusterfs import MOUNT_OPTIONS, VOLUME_OPTIONS

GLUSTERD = "/usr/sbin/glusterd"
NET = "10.200.0"
SERVERS = 3
_ENTRIES = re.compile(r"Total Number of entries:\s*(\d+)")  # of `gluster volume heal V info summary`


def missing() -> str | None:
    """Why this machine cannot run the lab, or None."""
    if os.geteuid() != 0:
        return "needs root for network namespaces and FUSE mounts"
    for tool in ("ip", "nsenter", "unshare", "gluster", "mount.glusterfs"):
        if shutil.which(tool) is None:
            return f"{tool} not installed (scripts/setup.sh --test installs glusterfs-server, glusterfs-client)"
    if not Path(GLUSTERD).exists() or not Path("/dev/fuse").exists():
        return "glusterd or /dev/fuse missing (scripts/setup.sh --test installs glusterfs-server)"
    return None


def _run(*argv: str, timeout: float = 120) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: exit {done.returncode}: {done.stdout}{done.stderr}")
    return done.stdout


def _gsyncd() -> Path | None:
    for path in ("/usr/lib/x86_64-linux-gnu/glusterfs/gsyncd", "/usr/libexec/glusterfs/gsyncd"):
        if Path(path).exists():
            return Path(path)
    return None


def _granted_entry_locks(dump: str, path: str, host: str) -> set[str]:
    """Basenames in directory ``path`` on which a client of ``host`` holds a granted
    (ACTIVE) entry lock, in one brick's statedump. The locks translator dumps an inode's
    locks in a section with ``path=``, each entry lock a line ``...entrylk[N](ACTIVE)=type=
    ENTRYLK_WRLCK on basename=NAME, pid = ..., client=..., connection-id=...HOST:<host>-...``."""
    names: set[str] = set()
    for section in dump.split("\n["):
        if f"\npath={path}\n" not in f"\n{section}\n":
            continue
        for line in section.splitlines():
            m = re.search(r"entrylk\[\d+\]\(ACTIVE\)=type=\S+ on basename=([^,]*),", line)
            if m is not None and f"HOST:{host}-" in line:
                names.add(m.group(1))
    return names


class GlusterHost(Host):
    """A client host: the volume mounted in its own namespaces, then ``argv`` as its init."""

    def __init__(self, lab: GlusterLab, name: str, argv: Sequence[str], log: Path, volume: str,
                 mount_options: Sequence[str] | None = None, mountpoint: Path | None = None) -> None:  # fmt: skip
        self.name = name
        self.netns = lab.node(f"c{len(lab.hosts) + 1}")
        chosen = lab.mount_options if mount_options is None else mount_options
        options = ",".join([*chosen, f"log-file={lab.work / f'{name}-fuse.log'}"])
        at = lab.mountpoint if mountpoint is None else mountpoint
        script = (
            'hostname "$1" && shift && '
            # The observer's mount came along with the copy of the mount namespace: take it
            # off here only (private propagation), or mount.glusterfs says "already mounted".
            f'umount -l "{at}" && '
            f'mount -t glusterfs -o {options} {NET}.11:/{volume} "{at}" && exec "$@"'
        )
        with open(log, "ab") as out:
            self.proc = subprocess.Popen(
                ["ip", "netns", "exec", self.netns,
                 "unshare", "-u", "-p", "-f", "-m", "--mount-proc", "--kill-child=SIGKILL",
                 "sh", "-c", script, "sh", name, *argv],
                stdout=out, stderr=subprocess.STDOUT,
            )  # fmt: skip
        self.init_pid = 0
        lab.hosts.append(self)  # from now on close() stops it, whatever happens next
        self.init_pid = _child_of(self.proc.pid)
        self.link = lab.link_of(self.netns)

    def partition(self, up: bool) -> None:
        """Cut the host off the network (its port on the bridge down), or reconnect it."""
        self.link(up)


class GlusterLab:
    """Three brick hosts, one replica-3 volume, an observer mount at ``mountpoint``."""

    def __init__(self, work: Path, *, volume: str = "spool",
                 volume_options: Sequence[tuple[str, str]] = VOLUME_OPTIONS,
                 mount_options: Sequence[str] = MOUNT_OPTIONS) -> None:  # fmt: skip
        self.tag = f"gl{secrets.token_hex(3)}"  # unique: other tests may run labs too
        self.work = work
        self.volume = volume
        self.mount_options = tuple(mount_options)
        self.mountpoint = work / "mnt"
        self.netns: list[str] = []
        self.hosts: list[GlusterHost] = []
        self.ports: dict[str, str] = {}  # node netns -> its port's name on the bridge
        self.switch = f"{self.tag}-sw"
        self.observer: str | None = None
        self.mounts: list[Path] = []
        self.brick_paths: dict[tuple[str, int], Path] = {}  # bricks not at brick(): small_filesystem
        try:
            self._start(volume_options)
        except BaseException:
            self.close()
            raise

    # -- network ---------------------------------------------------------------------
    def node(self, name: str) -> str:
        """A namespace on the bridge for node ``name`` (s1.., c1.., o), its address 10.200.0.X."""
        ns = f"{self.tag}-{name}"
        # Client hosts from .101 on: a module's lab gets three of them per test, and with
        # clients from .21 the tenth took the observer's .30 (its mounts then hung and failed
        # with ENOTCONN once their ping-timeout ran out).
        number = {"s": 10, "c": 100, "o": 30}[name[0]] + int(name[1:] or "0")
        if name[0] == "c" and number > 254:
            raise RuntimeError(f"no address left for client host {name} (10.200.0.101-254)")
        port = f"p{name}"
        self.netns.append(ns)
        _run("ip", "netns", "add", ns)
        # Made inside the bridge's namespace with its peer moved at once: no interface ever
        # appears in the machine's own namespace.
        _run("ip", "-n", self.switch, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", ns)
        _run("ip", "-n", self.switch, "link", "set", port, "master", "br0", "up")
        _run("ip", "-n", ns, "addr", "add", f"{NET}.{number}/24", "dev", "eth0")
        _run("ip", "-n", ns, "link", "set", "eth0", "up")
        _run("ip", "-n", ns, "link", "set", "lo", "up")
        self.ports[ns] = port
        return ns

    def link_of(self, ns: str) -> Callable[[bool], None]:
        port = self.ports[ns]

        def set_link(up: bool) -> None:
            _run("ip", "-n", self.switch, "link", "set", port, "up" if up else "down")

        return set_link

    # -- servers ---------------------------------------------------------------------
    def _start(self, volume_options: Sequence[tuple[str, str]]) -> None:
        self.netns.append(self.switch)
        _run("ip", "netns", "add", self.switch)
        _run("ip", "-n", self.switch, "link", "add", "br0", "type", "bridge")
        _run("ip", "-n", self.switch, "link", "set", "br0", "up")
        # glusterd runs gsyncd (python geo-replication set-up) several times at each start,
        # 8-12 s on 2 loaded cores; a stub answering --version skips what no test needs.
        stub = self.work / "gsyncd-stub"
        stub.write_text("#!/bin/sh\necho gsyncd.py 4.0.0\n")
        stub.chmod(0o755)
        for i in range(1, SERVERS + 1):
            self._start_glusterd(i, stub)
        for i in range(2, SERVERS + 1):
            self.gluster("peer", "probe", f"{NET}.1{i}")
        wait_until(self.peers_in_cluster, 120, "peers in cluster")
        self.create_volume(self.volume, volume_options)
        self.mountpoint.mkdir()
        self.mount(self.mountpoint)

    def create_volume(self, volume: str, options: Sequence[tuple[str, str]],
                      small_bricks: Sequence[tuple[int, int]] = ()) -> None:  # fmt: skip
        """A ``replica 3`` volume over the three brick hosts, with ``options`` set, started.
        ``small_bricks``: (server, bytes) whose brick lives on a filesystem of its own of that
        size (``small_filesystem``); ``brick()`` then gives its path as the test sees it."""
        for i, size in small_bricks:
            root = self.small_filesystem(i, f"{volume}-fs", size)
            (root / "brick").mkdir()
            self.brick_paths[(volume, i)] = root / "brick"
        paths = {i: self.brick_paths.get((volume, i), self.brick(i, volume)) for i in range(1, SERVERS + 1)}
        bricks = [f"{NET}.1{i}:{self._on_server(i, paths[i])}" for i in range(1, SERVERS + 1)]
        # force: the bricks are directories on the root filesystem (plain ext4 dirs work).
        self.gluster("volume", "create", volume, "replica", str(SERVERS), *bricks, "force")
        for key, value in options:
            self.gluster("volume", "set", volume, key, value)
        self.gluster("volume", "start", volume)

    def mount(self, path: Path, *, volume: str | None = None, options: Sequence[str] | None = None) -> None:
        """Mount a volume at ``path`` in the test's own mount namespace (its FUSE client in the
        observer's network namespace); ``close()`` unmounts it."""
        if self.observer is None:
            self.observer = self.node("o")
        path.mkdir(exist_ok=True)
        opts = [*(self.mount_options if options is None else options), f"log-file={path}-fuse.log"]
        _run("nsenter", f"--net=/run/netns/{self.observer}", "mount", "-t", "glusterfs", "-o", ",".join(opts),
             f"{NET}.11:/{volume or self.volume}", str(path))  # fmt: skip
        self.mounts.append(path)

    def _start_glusterd(self, i: int, stub: Path) -> None:
        ns = self.node(f"s{i}")
        d = self.work / f"s{i}"
        for sub in ("lib", "run", "log", "brick"):
            (d / sub).mkdir(parents=True)
        # glusterd needs its hooks and groups skeleton in its working directory.
        shutil.copytree("/var/lib/glusterd", d / "lib", dirs_exist_ok=True, symlinks=True)
        gsyncd = _gsyncd()
        stub_mount = f" && mount --bind {stub} {gsyncd}" if gsyncd else ""
        # `ip netns exec` gives the daemon a mount namespace of its own: the binds stay there.
        _run("ip", "netns", "exec", ns, "sh", "-c",
             f"mount --bind {d / 'lib'} /var/lib/glusterd && mount --bind {d / 'run'} /run && "
             f"mount --bind {d / 'log'} /var/log/glusterfs{stub_mount} && "
             f"exec {GLUSTERD} -p /run/glusterd.pid --log-file=/var/log/glusterfs/glusterd.log")  # fmt: skip
        wait_until(lambda: (d / "run" / "glusterd.socket").is_socket(), 30, f"glusterd s{i} listening")

    def brick(self, i: int, volume: str | None = None) -> Path:
        """Brick ``i`` of ``volume`` (the lab's by default), as the test's processes reach it."""
        return self.brick_paths.get((volume or self.volume, i), self.work / f"s{i}" / "brick" / (volume or self.volume))

    def _server_root(self, i: int) -> Path:
        """Server ``i``'s mount namespace as a path: its glusterd's root (/proc/PID/root)."""
        return Path(f"/proc/{(self.work / f's{i}' / 'run' / 'glusterd.pid').read_text().strip()}/root")

    def _on_server(self, i: int, path: Path) -> Path:
        """``path`` as server ``i`` names it (a path under its ``_server_root`` loses that prefix)."""
        root = self._server_root(i)
        return Path("/") / path.relative_to(root) if path.is_relative_to(root) else path

    def small_filesystem(self, i: int, name: str, size: int) -> Path:
        """A tmpfs of ``size`` bytes mounted in server ``i``'s mount namespace only (where its
        glusterd and bricks run), at ``s<i>/brick/<name>``; returns its root as the test's
        processes reach it (through that glusterd's /proc/PID/root). tmpfs keeps trusted.*
        xattrs, which bricks need. It goes with the namespace, when the lab's processes end."""
        path = self.work / f"s{i}" / "brick" / name
        path.mkdir(parents=True)
        pid = (self.work / f"s{i}" / "run" / "glusterd.pid").read_text().strip()
        _run("nsenter", "-t", pid, "-m", "mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(path))
        return self._server_root(i) / path.relative_to("/")

    def gluster(self, *args: str) -> str:
        """The gluster CLI against server 1, in glusterd's own mount and network namespaces
        (`volume heal ... info` runs glfsheal, which needs the default socket path)."""
        pid = (self.work / "s1" / "run" / "glusterd.pid").read_text().strip()
        return _run("nsenter", "-t", pid, "-m", "-n", "gluster", "--mode=script", *args)

    def _in_netns(self, ns: str) -> list[int]:
        try:
            inode = os.stat(f"/run/netns/{ns}").st_ino
        except OSError:
            return []
        pids = []
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                with contextlib.suppress(OSError):
                    if os.readlink(f"/proc/{entry}/ns/net") == f"net:[{inode}]":
                        pids.append(int(entry))
        return pids

    def entry_locks(self, path: str, host: str) -> list[str]:
        """The names in directory ``path`` (from the volume's root) that client host ``host``
        holds a granted entry lock on, on any brick: a `gluster volume statedump` of the
        bricks (each into its server's /run/gluster), its locks sections read."""
        started = time.time()
        self.gluster("volume", "statedump", self.volume)
        names: set[str] = set()
        for i in range(1, SERVERS + 1):
            for dump in (self.work / f"s{i}" / "run" / "gluster").glob("*.dump.*"):
                if dump.stat().st_mtime >= started - 1:
                    names |= _granted_entry_locks(dump.read_text(errors="replace"), path, host)
        return sorted(names)

    def brick_pid(self, i: int) -> int | None:
        for pid in self._in_netns(f"{self.tag}-s{i}"):
            with contextlib.suppress(OSError):
                if Path(f"/proc/{pid}/comm").read_text().strip() == "glusterfsd":
                    return pid
        return None

    def kill_brick(self, i: int) -> None:
        """SIGKILL the brick process of server ``i``; returns once it is reaped (until then
        glusterd counts it as running and `volume start force` leaves it down).

        Waits for the brick first: a glusterd that imported a newer volume configuration from
        its peers restarts its bricks, and for a second or so runs none (``settle``)."""
        wait_until(lambda: self.brick_pid(i) is not None, 60, f"server {i} running its brick")
        pid = self.brick_pid(i)
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        wait_until(lambda: not Path(f"/proc/{pid}").exists(), 30, "killed brick reaped")

    def bricks_online(self) -> bool:
        detail = self.gluster("volume", "status", self.volume, "detail")
        online = [line for line in detail.splitlines() if line.startswith("Online")]
        return len(online) == SERVERS and all(line.rstrip().endswith("Y") for line in online)

    def peers_in_cluster(self) -> bool:
        """Server 1 sees both other servers in the cluster. "Connected" in `pool list` comes
        before the peer handshake ends: `volume create` then fails with "Host ... is not in
        'Peer in Cluster' state" (seen once on a loaded machine)."""
        try:
            status = self.gluster("peer", "status")
        except RuntimeError:
            return False
        return status.count("State: Peer in Cluster (Connected)") >= SERVERS - 1

    def _config_versions(self, volume: str) -> set[str]:
        """The `version=` of ``volume``'s configuration as each server stores it."""
        versions = set()
        for i in range(1, SERVERS + 1):
            info = self.work / f"s{i}" / "lib" / "vols" / volume / "info"
            lines = info.read_text().splitlines() if info.exists() else []
            versions.add(next((line for line in lines if line.startswith("version=")), ""))
        return versions

    def settle(self, volume: str | None = None) -> None:
        """Back to a whole lab after a fault: every peer in the cluster, ``volume``'s
        configuration (the lab's by default) the same on every server, every brick online.

        A server cut off while its peers changed the volume (a `volume set`/`reset` made while
        it was away) imports the new configuration once it is back and restarts its brick
        (measured: brick 3's glusterfsd gone for ~1 s, 1.5 s after the link came back and
        the option was reset): a test that found the lab that way met "server 3 runs no
        brick" (CI, stop 32). So volume changes wait for the peers (``peers_in_cluster``)
        and every test starts from a settled lab."""
        name = volume or self.volume
        wait_until(self.peers_in_cluster, 120, "peers in cluster")
        wait_until(lambda: len(self._config_versions(name)) == 1, 120, f"one configuration of {name}")
        self.restart_bricks()

    def restart_bricks(self) -> float:
        """`volume start force` until every brick is online; returns the seconds it took."""
        start = time.monotonic()

        def started() -> bool:
            with contextlib.suppress(RuntimeError):
                self.gluster("volume", "start", self.volume, "force")
            return self.bricks_online()

        wait_until(started, 60, "bricks online")
        return time.monotonic() - start

    def heal(self, volume: str | None = None) -> float:
        """Heal ``volume`` (the lab's by default) until no entry is pending on any brick;
        returns the seconds it took.

        `volume heal` is asked again at every look: the self-heal daemon crawls the index
        once per request (else every `cluster.heal-timeout`, 600 s), and entries marked after
        a crawl began wait for the next one."""
        start = time.monotonic()

        def healed() -> bool:
            try:
                self.gluster("volume", "heal", volume or self.volume)
                summary = self.gluster("volume", "heal", volume or self.volume, "info", "summary")
            except RuntimeError:
                return False
            counts = [int(n) for n in _ENTRIES.findall(summary)]
            return len(counts) == SERVERS and sum(counts) == 0

        wait_until(healed, 240, "volume healed")
        return time.monotonic() - start

    def host(self, name: str, argv: Sequence[str], log: Path, *, volume: str | None = None,
             mount_options: Sequence[str] | None = None, mountpoint: Path | None = None) -> GlusterHost:  # fmt: skip
        """A client host mounting ``volume`` (the lab's by default) at ``mountpoint`` (the
        lab's observer mount's path by default; another volume's: where the observer mounted
        it, so that paths are the same on every host), with ``mount_options`` (the lab's by
        default)."""
        return GlusterHost(self, name, argv, log, volume or self.volume, mount_options, mountpoint)

    def close(self) -> None:
        for host in self.hosts:
            with contextlib.suppress(OSError):
                host.stop()
        for path in self.mounts:
            subprocess.run(["umount", "-l", str(path)], capture_output=True, check=False)
        # Every process living in one of the lab's namespaces: glusterds, bricks, self-heal
        # daemons, the observer's FUSE client (never anything of the machine's).
        for ns in self.netns:
            for pid in self._in_netns(ns):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        for ns in self.netns:
            with contextlib.suppress(AssertionError):
                wait_until(lambda ns=ns: not self._in_netns(ns), 10, "lab processes gone")  # type: ignore[misc]
        for ns in reversed(self.netns):  # deleting a namespace removes its veth ends too
            subprocess.run(["ip", "netns", "delete", ns], capture_output=True, check=False)
