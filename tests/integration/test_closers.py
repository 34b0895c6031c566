"""fanotify's closers stay bounded (issue 20 item 9): real writer processes, real fanotify.

A writer here is one real process that opened a file in the watched directory, wrote it,
closed it and sleeps on (``sh -c 'printf x > f; exec sleep 600'``: the same pid): the
hostile user's pattern, each sleeping writer once cost the runner a pidfd forever.
fanotify needs CAP_SYS_ADMIN: root only, as CI runs.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.processes import spoolrender_cmd
from support.spool_jobs import drop, entries, write_spool_config
from support.waiting import wait_for

from spoolrender.intake.upload_closers import CloserTracker
from spoolrender.spool.layout import SpoolLayout

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="fanotify needs root (CAP_SYS_ADMIN)")
WRITE_AND_SLEEP = 'printf x > "$1" && exec sleep 600'


class Writers:
    """Sleeping writer processes, each killed (by pid) at the end."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen[bytes]] = []

    def spawn(self, path: Path, *, as_nobody: bool = False) -> subprocess.Popen[bytes]:
        user = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"] if as_nobody else []
        proc = subprocess.Popen([*user, "sh", "-c", WRITE_AND_SLEEP, "sh", str(path)])
        self.procs.append(proc)
        return proc

    def written(self, path: Path, proc: subprocess.Popen[bytes]) -> bool:
        """The file is written and closed: its writer runs `sleep` now."""
        try:
            return path.stat().st_size > 0 and os.readlink(f"/proc/{proc.pid}/exe").endswith("/sleep")
        except OSError:
            return False

    def kill_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
            proc.wait()


@pytest.fixture
def writers() -> Iterator[Writers]:
    w = Writers()
    yield w
    w.kill_all()


def open_fds(pid: int | str = "self") -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def fanotify_open(pid: int) -> bool:
    """The runner follows closers (it has its fanotify descriptor)."""
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(OSError):
            if os.readlink(f"/proc/{pid}/fd/{fd}") == "anon_inode:[fanotify]":
                return True
    return False


def test_ignored_names_are_not_followed_and_followed_writers_are_capped_per_user(writers: Writers) -> None:
    """`.x.part` closers cost nothing; one user's writers beyond their cap wait for the
    settle time (alive: unknown) instead of taking descriptors; another user's writer is
    still followed, and its exit is seen at once."""
    shared = Path(tempfile.mkdtemp(prefix="spoolrender-closers-"))
    exited = threading.Event()
    tracker = CloserTracker(exited.set, settle_seconds=60, max_pidfds=6, max_pidfds_per_uid=3)
    try:
        os.chmod(shared, 0o1777)  # nobody writes here too
        assert tracker.start(shared)
        baseline = open_fds()
        ignored = [shared / f".upload-{i}.yaml.part" for i in range(12)] + [shared / f"w{i}.tmp" for i in range(6)]
        procs = [writers.spawn(p) for p in ignored]
        wait_for(lambda: all(writers.written(p, w) for p, w in zip(ignored, procs, strict=True)))
        assert not any(tracker.alive(p.stat().st_dev, p.stat().st_ino) for p in ignored)
        assert tracker.followed() == 0 and open_fds() <= baseline + 1

        jobs = [shared / f"job-{i}.yaml" for i in range(10)]
        procs = [writers.spawn(p) for p in jobs]
        wait_for(lambda: all(writers.written(p, w) for p, w in zip(jobs, procs, strict=True)))
        # Every one of them counts as "its writer may still run" (followed, or beyond the cap)...
        assert all(tracker.alive(p.stat().st_dev, p.stat().st_ino) for p in jobs)
        # ...but only root's share is followed, with a descriptor each.
        assert tracker.followed() == 3 and open_fds() <= baseline + 3 + 1

        theirs = shared / "nobody.yaml"
        proc = writers.spawn(theirs, as_nobody=True)
        wait_for(lambda: writers.written(theirs, proc))
        st = theirs.stat()
        assert tracker.alive(st.st_dev, st.st_ino) and tracker.followed() == 4
        proc.kill()
        proc.wait()
        assert exited.wait(30)
        wait_for(lambda: not tracker.alive(st.st_dev, st.st_ino))
        assert tracker.followed() == 3
    finally:
        tracker.stop()
        shutil.rmtree(shared, ignore_errors=True)


def test_a_followed_writer_is_released_once_its_file_would_be_settled(writers: Writers) -> None:
    """Following a writer longer than the settle time changes no verdict: its pidfd is closed."""
    shared = Path(tempfile.mkdtemp(prefix="spoolrender-closers-"))
    tracker = CloserTracker(lambda: None, settle_seconds=0.5)
    try:
        assert tracker.start(shared)
        baseline = open_fds()
        path = shared / "job.yaml"
        proc = writers.spawn(path)
        wait_for(lambda: writers.written(path, proc))
        st = path.stat()
        assert tracker.alive(st.st_dev, st.st_ino) and tracker.followed() == 1
        wait_for(lambda: tracker.followed() == 0 and open_fds() <= baseline, timeout=30)
        assert not tracker.alive(st.st_dev, st.st_ino) and proc.poll() is None  # still sleeping
    finally:
        tracker.stop()
        shutil.rmtree(shared, ignore_errors=True)


def test_many_sleeping_writers_cannot_take_the_runners_descriptors(
    spool: SpoolLayout, writers: Writers, tmp_path: Path
) -> None:
    """The review's reproducer, scaled to a runner with `ulimit -n 128`: more sleeping
    writers than it has descriptors (ignored names and job names). The runner's open
    descriptors stay bounded and another user's job is claimed and done as usual."""
    limit = 128  # the runner follows at most limit / 4 processes
    write_spool_config(spool, {"settle_seconds": 60, "watch": "inotify"})
    log = tmp_path / "runner.log"
    with open(log, "wb") as out:
        runner = subprocess.Popen(
            ["prlimit", f"--nofile={limit}:{limit}", *spoolrender_cmd("run", "--spool", str(spool.root), "-v")],
            stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        wait_for(lambda: fanotify_open(runner.pid), timeout=60)
        baseline = open_fds(runner.pid)
        paths = [spool.incoming / f".big-{i}.yaml.part" for i in range(limit)]
        paths += [spool.incoming / f"held-{i}.yaml" for i in range(limit // 4 + 8)]  # more than the cap
        procs = [writers.spawn(p) for p in paths]
        peak = baseline

        def all_written() -> bool:
            nonlocal peak
            peak = max(peak, open_fds(runner.pid))
            return all(writers.written(p, w) for p, w in zip(paths, procs, strict=True))

        wait_for(all_written, timeout=120)
        for _ in range(20):  # and a little longer, while the runner takes in the last events
            all_written()
        drop(spool, "other.yaml", {"renderer": "command", "command": "props", "props": {}})
        try:
            wait_for(lambda: any(n.startswith("other.") for n in entries(spool, "done")), timeout=60)
        except AssertionError:
            raise AssertionError(log.read_text()[-3000:]) from None
        # A few descriptors of the claim and render come and go besides the followed writers.
        assert peak <= baseline + limit // 4 + 16, (peak, baseline)
        assert "Too many open files" not in log.read_text()
        assert [n for n in os.listdir(spool.incoming) if n.startswith("held-")]  # still settling
    finally:
        runner.terminate()
        runner.wait(timeout=30)
