"""The start-up probes of spoolrender/runner/fscheck.py, on real filesystems that lack a feature.

The filesystems are real: sshfs (FUSE) over OpenSSH's own sftp-server, with the SFTP
requests a poorer server would lack denied by sftp-server's `-P`, or sshfs's
`-o disable_hardlink`. Only the ssh transport is skipped (sshfs's `ssh_command` starts
sftp-server directly): tests/reliability/test_netfs_hosts.py covers sshd and the network.
One test uses a fake, because no filesystem at hand breaks O_EXCL; it says so.
"""

from __future__ import annotations

import logging
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

import pytest

from spoolrender.config.spool_config import load_config
from spoolrender.core.failpoints import FSCHECK_POINTS
from spoolrender.defaults import PROBE_LEFTOVER_AGE_S
from spoolrender.errors import PublishError, UnsupportedFilesystem
from spoolrender.jobfile import read_job_bytes
from spoolrender.lifecycle.recovery import Recoverer
from spoolrender.runner import fscheck
from spoolrender.runner.fscheck import PROBE_PREFIX, check_filesystem
from spoolrender.spool.clock import SystemClock
from spoolrender.spool.heartbeat import HOSTNAME
from spoolrender.spool.layout import init_spool
from spoolrender.spool.netcache import Attributes, fresh_attributes
from spoolrender.spool.probe_dirs import make_probe_dir, remove_dead_probes, start_ticks
from spoolrender.spool.publish import SCRATCH_DIR, RenderedFile, publish_output, remove_scratch, scratch_dir

SFTP_SERVER = "/usr/lib/openssh/sftp-server"


def _no_sshfs() -> str | None:
    if os.geteuid() != 0:
        return "needs root for FUSE mounts"
    if shutil.which("sshfs") is None or not Path(SFTP_SERVER).exists() or not Path("/dev/fuse").exists():
        return "sshfs, openssh-server or /dev/fuse missing (scripts/setup.sh --test installs them)"
    return None


needs_sshfs = pytest.mark.skipif(_no_sshfs() is not None, reason=str(_no_sshfs()))


class Mounts:
    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.mounted: list[Path] = []

    def sshfs(self, *, denied: str = "", options: str = "", served: Path | None = None) -> Path:
        """A directory served by sftp-server (``denied``: requests it refuses), mounted.

        ``served``: mount that (an earlier mount's) directory again, as another host would.
        """
        n = len(self.mounted)
        mountpoint = self.tmp_path / f"mnt{n}"
        if served is None:
            served = self.tmp_path / f"served{n}"
            served.mkdir()
        mountpoint.mkdir()
        server = self.tmp_path / f"sftp{n}.sh"
        server.write_text(f"#!/bin/sh\nexec {SFTP_SERVER} {'-P ' + denied if denied else ''}\n")
        server.chmod(0o755)
        opts = f"ssh_command={server}" + (f",{options}" if options else "")
        subprocess.run(["sshfs", "-o", opts, f"localhost:{served}", str(mountpoint)], check=True)
        self.mounted.append(mountpoint)
        return mountpoint

    def close(self) -> None:
        for mountpoint in self.mounted:
            subprocess.run(["fusermount3", "-u", str(mountpoint)], check=False)


@pytest.fixture
def mounts(tmp_path: Path) -> Iterator[Mounts]:
    m = Mounts(tmp_path)
    yield m
    m.close()


def test_local_filesystem_passes_and_leaves_nothing(tmp_path: Path) -> None:
    check_filesystem(tmp_path, "spool")
    assert os.listdir(tmp_path) == []


@needs_sshfs
def test_full_sshfs_passes(mounts: Mounts) -> None:
    mnt = mounts.sshfs()
    check_filesystem(mnt, "spool")
    assert [n for n in os.listdir(mnt) if n.startswith(PROBE_PREFIX)] == []


@needs_sshfs
@pytest.mark.parametrize(
    ("denied", "options", "expected"),
    [
        ("hardlink", "", "link() failed with EPERM"),
        ("", "disable_hardlink", "link() failed"),
        ("posix-rename", "", "rename() onto an existing file failed"),
        ("symlink", "", "symlink() failed"),
    ],
)
def test_missing_operation_is_named(mounts: Mounts, denied: str, options: str, expected: str) -> None:
    mnt = mounts.sshfs(denied=denied, options=options)
    with pytest.raises(UnsupportedFilesystem) as caught:
        check_filesystem(mnt, "spool")
    message = str(caught.value)
    assert expected in message and "fuse.sshfs" in message and str(mnt) in message, message
    assert os.listdir(mnt) == []  # the probe dir is gone, even after a failed check


@needs_sshfs
def test_runner_refuses_to_start_on_a_spool_without_hard_links(mounts: Mounts, tmp_path: Path) -> None:
    mnt = mounts.sshfs(denied="hardlink")
    layout = init_spool(mnt / "spool")
    (layout.incoming / "j.yaml").write_text("renderer: command\ncommand: x\n")
    proc = subprocess.run(
        [sys.executable, "-m", "spoolrender.cli", "run", "--drain", "--spool", str(layout.root)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    assert "cannot hold a spoolrender spool: link() failed" in proc.stderr
    assert "hardlink extension" in proc.stderr
    assert os.listdir(layout.incoming) == ["j.yaml"]  # nothing was claimed
    assert [n for n in os.listdir(layout.private) if n.startswith(PROBE_PREFIX)] == []


@needs_sshfs
def test_output_root_is_checked_too(mounts: Mounts, tmp_path: Path) -> None:
    output = mounts.sshfs(options="disable_hardlink")
    layout = init_spool(tmp_path / "spool")
    proc = subprocess.run(
        [sys.executable, "-m", "spoolrender.cli", "run", "--drain", "--spool", str(layout.root),
         "--output-root", str(output)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 1 and "output root" in proc.stderr and "link() failed" in proc.stderr, proc.stderr


def test_exclusive_create_that_is_not_exclusive_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A fake: no filesystem here ignores O_EXCL (old NFS clients did), so os.open is made
    # to drop the flag, as such a client would.
    real_open = os.open

    def open_without_excl(path: str | os.PathLike[str], flags: int, mode: int = 0o777) -> int:
        return real_open(path, flags & ~os.O_EXCL, mode)

    monkeypatch.setattr(os, "open", open_without_excl)
    with pytest.raises(UnsupportedFilesystem, match=re.escape("O_CREAT|O_EXCL opened an existing file")):
        check_filesystem(tmp_path, "spool")


def test_link_that_replaces_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A fake for the same reason: link() replacing an existing name is a broken server's
    # behaviour that no filesystem here shows.
    def link_replacing(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        shutil.copyfile(src, dst)

    monkeypatch.setattr(os, "link", link_replacing)
    with pytest.raises(UnsupportedFilesystem, match=re.escape("link() replaced an existing name")):
        check_filesystem(tmp_path, "spool")


@needs_sshfs
def test_interrupted_publish_is_recognised_without_inode_numbers(mounts: Mounts) -> None:
    # SFTP has no inode numbers: sshfs gives the two names of one hard-linked file two
    # different st_ino (and st_nlink 1). A publish interrupted between link() and
    # unlink() must still be recognised as ours when it is tried again, and a file that
    # merely looks alike must not.
    root = mounts.sshfs(options="dir_cache=no,attr_timeout=0,entry_timeout=0")
    (root / ".scratch").mkdir()
    temp = root / ".scratch" / "x.mp4"
    temp.write_bytes(b"video bytes")
    st = temp.stat()
    os.link(temp, root / "x.mp4")  # the interrupted publish: linked, temp still there
    assert os.stat(root / "x.mp4").st_ino != st.st_ino  # the fact that broke the old check
    published = publish_output(root, PurePosixPath("x.mp4"), temp, replace=False, expect=RenderedFile.of(st))
    assert published.bytes == len(b"video bytes") and not temp.exists()

    temp.write_bytes(b"video bytez")  # same size and mtime, other bytes
    os.utime(temp, ns=(st.st_atime_ns, os.stat(root / "x.mp4").st_mtime_ns))
    with pytest.raises(PublishError, match="already exists"):
        publish_output(root, PurePosixPath("x.mp4"), temp, replace=False)
    assert (root / "x.mp4").read_bytes() == b"video bytes"


@needs_sshfs
def test_publish_of_a_dead_runner_is_recognised_from_another_sshfs_host(mounts: Mounts) -> None:
    # Host A renders, records its decision, links the output and removes its temp file,
    # then dies before moving the job to done/. Host B mounts the same directory and
    # carries the decision out: its mount numbers the output differently from A's, so
    # only the recorded size and mtime can say the output is the decided file.
    options = "dir_cache=no,attr_timeout=0,entry_timeout=0"
    host_a = mounts.sshfs(options=options)
    host_b = mounts.sshfs(options=options, served=mounts.tmp_path / "served0")
    (host_a / SCRATCH_DIR).mkdir()
    temp_a = host_a / SCRATCH_DIR / "x.mp4"
    temp_a.write_bytes(b"video bytes")
    decided = RenderedFile.of(temp_a.stat())
    os.link(temp_a, host_a / "x.mp4")
    temp_a.unlink()  # A dies here
    assert os.stat(host_b / "x.mp4").st_ino != decided.inode  # what failed the old check
    published = publish_output(host_b, PurePosixPath("x.mp4"), host_b / SCRATCH_DIR / "x.mp4",
                               replace=False, expect=decided)  # fmt: skip
    assert published.bytes == len(b"video bytes")

    # Another file under the name (another job's output, other bytes): not ours.
    (host_a / "x.mp4").unlink()
    (host_a / "x.mp4").write_bytes(b"other video bytes")
    with pytest.raises(PublishError, match="vanished before publishing"):
        publish_output(host_b, PurePosixPath("x.mp4"), host_b / SCRATCH_DIR / "x.mp4", replace=False, expect=decided)


@needs_sshfs
def test_scratch_removed_by_two_runners_at_once(mounts: Mounts) -> None:
    # A runner removes its scratch dir while another runner's sweep removes it as an
    # orphan. sshfs is path-based: fstat() of a directory deleted through another path
    # fails (a local disk never does), and Python 3.11's rmtree(ignore_errors=True) lets
    # that through; it reached the runner as "spool I/O failed" for a job already done.
    root = mounts.sshfs(options="dir_cache=no,attr_timeout=0,entry_timeout=0")
    (root / "d").mkdir()
    fd = os.open(root / "d", os.O_RDONLY)
    try:
        os.rmdir(mounts.tmp_path / "served0" / "d")  # deleted on the server's side
        with pytest.raises(OSError):
            os.fstat(fd)
    finally:
        os.close(fd)
    errors: list[BaseException] = []

    def remove(key: str) -> None:
        try:
            remove_scratch(root, key)
        except BaseException as exc:
            errors.append(exc)

    for trial in range(20):  # the race is timing-bound: without the fix ~1 in 3 runs of 10 failed
        for i in range(15):
            (scratch_dir(root, f"job{trial}") / f"sub{i}").mkdir(parents=True)
            (scratch_dir(root, f"job{trial}") / f"sub{i}" / "part").write_bytes(b"x")
        racers = [threading.Thread(target=remove, args=(f"job{trial}",)) for _ in range(2)]
        for t in racers:
            t.start()
        for t in racers:
            t.join(60)
    assert errors == []
    assert os.listdir(root / SCRATCH_DIR) == []


# --- caches of a network filesystem (issue 21, item 1) ---------------------------------

# The two option sets of the report: sshfs's own cache and the kernel's, and the kernel's alone.
CACHING = ["cache=yes,kernel_cache,attr_timeout=30,entry_timeout=30", "dir_cache=no,attr_timeout=30,entry_timeout=30"]


@needs_sshfs
@pytest.mark.parametrize("options", CACHING)
def test_a_write_on_the_server_is_seen_past_the_mounts_caches(mounts: Mounts, options: str) -> None:
    # The server's disk stands in for another host's write (sftp-server writes there).
    mnt = mounts.sshfs(options=options)
    served = mounts.tmp_path / "served0" / "job.yaml"
    served.write_bytes(b"renderer: command\n")
    path = mnt / "job.yaml"
    assert path.read_bytes() == b"renderer: command\n"  # pages and attributes cached, as a scan leaves them
    os.lstat(path)
    with open(served, "ab") as fh:
        fh.write(b"command: x\n")
    whole = served.read_bytes()
    # The trap (30 s of caching): what the runner saw before.
    assert os.lstat(path).st_size == len(b"renderer: command\n")
    assert path.read_bytes() == b"renderer: command\n"  # a plain read: the cached prefix
    assert fresh_attributes(path).size == len(whole)
    assert read_job_bytes(path, 1000, uncached=True) == whole
    with open(served, "r+b") as fh:  # a rewrite that keeps the size (and maybe the mtime second)
        fh.write(b"RENDERER")
    assert read_job_bytes(path, 1000, uncached=True) == served.read_bytes()


@needs_sshfs
def test_a_caching_mount_is_reported_and_a_fresh_one_is_not(mounts: Mounts, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="spoolrender.runner.fscheck")
    check_filesystem(mounts.sshfs(options=CACHING[1]), "spool")
    assert "this mount caches attributes" in caplog.text
    caplog.clear()
    check_filesystem(mounts.sshfs(options="dir_cache=no,attr_timeout=0,entry_timeout=0,negative_timeout=0"), "spool")
    assert "caches attributes" not in caplog.text


@needs_sshfs
def test_a_mount_whose_cache_outlives_revalidation_is_refused_with_the_options(
    mounts: Mounts, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A fake in a real caching mount: no filesystem here ignores a forced statx (a client
    # without statx, or a FUSE server answering from its own cache, would), so the
    # revalidation is made a plain lstat.
    monkeypatch.setattr(fscheck, "fresh_attributes", lambda path: Attributes.of(os.lstat(path)))
    mnt = mounts.sshfs(options=CACHING[1])
    with pytest.raises(UnsupportedFilesystem) as caught:
        check_filesystem(mnt, "spool")
    message = str(caught.value)
    assert "keeps its old size here even after a forced revalidation" in message, message
    assert "sshfs -o dir_cache=no,attr_timeout=0,entry_timeout=0,negative_timeout=0" in message, message
    assert os.listdir(mnt) == []


# --- the probes' own files (issue 21, item 5) -------------------------------------------


def _leftovers(*dirs: Path) -> list[str]:
    return [f"{d.name}/{n}" for d in dirs if d.is_dir() for n in os.listdir(d) if n.startswith(PROBE_PREFIX)]


def test_a_runner_killed_while_probing_leaves_nothing_after_the_next_start(tmp_path: Path) -> None:
    layout = init_spool(tmp_path / "spool")
    output = layout.root / "output"
    scratch = output / SCRATCH_DIR

    def run(crash_at: str | None) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if k != "SPOOLRENDER_CRASH_AT"}
        if crash_at:
            env["SPOOLRENDER_CRASH_AT"] = crash_at
        return subprocess.run(
            [sys.executable, "-m", "spoolrender.cli", "run", "--drain", "-v", "--spool", str(layout.root)],
            capture_output=True, text=True, timeout=120, check=False, env=env,
        )  # fmt: skip

    # A real SIGKILL at the point where every probe file exists (spoolrender.core.failpoints).
    spool_point, output_point = FSCHECK_POINTS
    assert run(spool_point).returncode == -signal.SIGKILL
    (left,) = _leftovers(layout.private)
    assert {"excl", "linked", "moved", "old", "reserved"} <= set(os.listdir(layout.private / left.split("/")[1]))
    assert run(output_point).returncode == -signal.SIGKILL
    # The second start removed the first one's leftover; its own is in the scratch dir,
    # never among the outputs.
    assert _leftovers(layout.private) == [] and _leftovers(output) == []
    assert len(_leftovers(scratch)) == 1
    clean = run(None)
    assert clean.returncode == 0, clean.stderr
    assert _leftovers(layout.private, output, scratch) == []
    assert "start-up probe dir(s) of dead runners" in clean.stderr


def test_only_dead_probers_leftovers_are_removed(tmp_path: Path) -> None:
    parent = tmp_path / "private"
    parent.mkdir()
    me = os.getpid()
    my_start = start_ticks(me)
    assert my_start is not None
    dead = subprocess.Popen(["true"])
    dead.wait()  # reaped: its pid is gone
    hour_ago = time.time() - PROBE_LEFTOVER_AGE_S - 60
    names = {
        f"{PROBE_PREFIX}{HOSTNAME}-{me}.{my_start}-00000001": "kept",  # this host, alive (us)
        f"{PROBE_PREFIX}{HOSTNAME}-{me}.{my_start + 1}-00000002": "removed",  # our pid, another start: reused
        f"{PROBE_PREFIX}{HOSTNAME}-{dead.pid}.123-00000003": "removed",  # this host, pid gone
        f"{PROBE_PREFIX}{HOSTNAME}-{dead.pid}-00000004": "removed",  # 8329ac5's name, pid gone
        f"{PROBE_PREFIX}{HOSTNAME}-{me}-00000005": "kept",  # 8329ac5's name, pid runs, recent
        f"{PROBE_PREFIX}other-host.example-{me}.{my_start}-00000006": "kept",  # another host's, recent
        f"{PROBE_PREFIX}other-host.example-1.1-00000007": "removed",  # another host's, an hour old
        f"{PROBE_PREFIX}garbled": "kept",  # unreadable name, recent
    }
    for name in names:
        (parent / name).mkdir()
        (parent / name / "excl").write_bytes(b"first")
    os.utime(parent / f"{PROBE_PREFIX}other-host.example-1.1-00000007", (hour_ago, hour_ago))
    own = make_probe_dir(parent)
    removed = remove_dead_probes(parent, own)
    assert sorted(removed) == sorted(n for n, fate in names.items() if fate == "removed")
    assert sorted(os.listdir(parent)) == sorted([own.name, *(n for n, fate in names.items() if fate == "kept")])


def test_the_scratch_sweep_leaves_probe_dirs_alone(tmp_path: Path) -> None:
    # A runner's probe of the output root lives in the scratch dir while another runner
    # sweeps orphaned scratch dirs: the sweep must not pull it from under the probe.
    layout = init_spool(tmp_path / "spool")
    config = load_config(layout.root)
    scratch = config.output_root / SCRATCH_DIR
    scratch.mkdir(parents=True)
    probe = make_probe_dir(scratch)
    (scratch / "orphan.1.2").mkdir()
    Recoverer(layout, config, SystemClock(), random.Random(0)).sweep(set())
    assert os.listdir(scratch) == [probe.name]
