"""The start-up probes of spoolrender/fscheck.py, on real filesystems that lack a feature.

The filesystems are real: sshfs (FUSE) over OpenSSH's own sftp-server, with the SFTP
requests a poorer server would lack denied by sftp-server's `-P`, or sshfs's
`-o disable_hardlink`. Only the ssh transport is skipped (sshfs's `ssh_command` starts
sftp-server directly): tests/reliability/test_netfs_hosts.py covers sshd and the network.
One test uses a fake, because no filesystem at hand breaks O_EXCL; it says so.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

import pytest

from spoolrender.errors import PublishError, UnsupportedFilesystem
from spoolrender.fscheck import PROBE_PREFIX, check_filesystem
from spoolrender.layout import init_spool
from spoolrender.publish import SCRATCH_DIR, RenderedFile, publish_output, remove_scratch

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
            (root / SCRATCH_DIR / f"job{trial}" / f"sub{i}").mkdir(parents=True)
            (root / SCRATCH_DIR / f"job{trial}" / f"sub{i}" / "part").write_bytes(b"x")
        racers = [threading.Thread(target=remove, args=(f"job{trial}",)) for _ in range(2)]
        for t in racers:
            t.start()
        for t in racers:
            t.join(60)
    assert errors == []
    assert os.listdir(root / SCRATCH_DIR) == []
