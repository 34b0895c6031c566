"""HeartbeatWriter.remove(): once it returns, nothing writes into the job's directory.

Found over sshfs (tests/reliability/test_netfs_hosts.py): a runner that lost a claim race
removed its claim directory while the heartbeat thread was writing that claim's first
heartbeat; the write landed after the rmtree had listed the directory, the directory
stayed, and another host removed it as an "abandoned claim" a lease later.
"""

from __future__ import annotations

import errno
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import spoolrender.spool.heartbeat as heartbeat_module
from spoolrender.spool.clock import ManualClock
from spoolrender.spool.durable import write_atomic
from spoolrender.spool.heartbeat import ActiveJob, HeartbeatWriter, read_heartbeat
from spoolrender.spool.heartbeat_file import heartbeat_path
from spoolrender.spool.io_trouble import SpoolIOCondition


def test_remove_waits_for_a_beat_in_flight_and_no_beat_follows(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    job_dir = tmp_path / "running" / "j.tok.tok"
    job_dir.mkdir(parents=True)
    writer = HeartbeatWriter(ManualClock(), 60.0, "runner")  # no thread: beats by hand
    job = ActiveJob(job_dir, "tok", 1, 0.0, on_lost=lambda: None)
    writer.add(job)  # the first beat, written at once
    first = read_heartbeat(job_dir, "tok")
    assert first is not None and first.counter == 1

    entered, release = threading.Event(), threading.Event()
    real_write = write_atomic

    def slow_write(target: Path, data: bytes, **kwargs: Any) -> None:
        entered.set()
        release.wait(30)  # a slow network filesystem, paused mid-beat
        real_write(target, data, **kwargs)

    monkeypatch.setattr(heartbeat_module, "write_atomic", slow_write)
    beating = threading.Thread(target=writer.beat, args=(job,))
    beating.start()
    assert entered.wait(30)
    removed = threading.Event()

    def remove() -> None:
        writer.remove("tok")
        removed.set()

    remover = threading.Thread(target=remove)
    remover.start()
    assert not removed.wait(0.5)  # remove() waits for the write in flight...
    release.set()
    beating.join(30)
    remover.join(30)
    assert removed.is_set()  # ...and returns once it is done
    in_flight = read_heartbeat(job_dir, "tok")
    assert in_flight is not None and in_flight.counter == 2

    monkeypatch.setattr(heartbeat_module, "write_atomic", real_write)
    writer.beat(job)  # a late beat of a removed job (the heartbeat thread's snapshot)
    after = read_heartbeat(job_dir, "tok")
    assert after is not None and after.counter == 2  # wrote nothing


def test_a_rewrite_in_place_whose_close_fails_is_reported_not_raised(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a full spool a heartbeat is rewritten in place; a GlusterFS client with two of three
    bricks full answered that rewrite's close() (the FUSE flush) with ENOSPC. Raised out of
    overwrite_in_place it ended the heartbeat thread ("Exception in thread heartbeat", seen in
    tests/reliability/test_gluster_hosts.py's full-brick test), so the runner's claims stopped
    beating for good. The beat now reports the spool's condition and the next one, with
    room again, writes the heartbeat."""
    job_dir = tmp_path / "running" / "j.tok.tok"
    job_dir.mkdir(parents=True)
    condition = SpoolIOCondition(ManualClock())
    writer = HeartbeatWriter(ManualClock(), 60.0, "runner", condition)  # no thread: beats by hand
    job = ActiveJob(job_dir, "tok", 1, 0.0, on_lost=lambda: None)
    writer.add(job)
    heartbeat = heartbeat_path(job_dir, "tok")
    real_write, real_close = write_atomic, os.close

    def no_room(target: Path, data: bytes, **kwargs: Any) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(target))

    def close_reporting_enospc(fd: int) -> None:
        # The file was rewritten, but the filesystem says at close that the write failed.
        on_heartbeat = os.readlink(f"/proc/self/fd/{fd}") == str(heartbeat)
        real_close(fd)
        if on_heartbeat:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(heartbeat_module, "write_atomic", no_room)
    monkeypatch.setattr(os, "close", close_reporting_enospc)
    assert writer.beat(job)  # no exception: the job is still ours
    monkeypatch.setattr(os, "close", real_close)
    assert condition.active and condition.text() == os.strerror(errno.ENOSPC)
    monkeypatch.setattr(heartbeat_module, "write_atomic", real_write)
    assert writer.beat(job)
    after = read_heartbeat(job_dir, "tok")
    assert after is not None and after.counter == 3, after


def test_the_heartbeat_thread_outlives_a_spool_it_cannot_reach(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A GlusterFS client host cut off past `network.ping-timeout` answers every call with
    ENOTCONN (tests/reliability/test_gluster_hosts.py's client cut): the heartbeat's write
    failed and was logged, then the beat's look for a cancel request raised the same error
    out of `Path.exists()` and ended the heartbeat thread ("Exception in thread heartbeat"),
    so once the link was back none of the runner's claims beat any more. A look that fails
    finds no request, and the thread beats again once the spool answers."""
    job_dir = tmp_path / "running" / "j.tok.tok"
    job_dir.mkdir(parents=True)
    writer = HeartbeatWriter(ManualClock(), 0.01, "runner")
    job = ActiveJob(job_dir, "tok", 1, 0.0, on_lost=lambda: None, on_cancel=lambda: None)
    writer.add(job)
    real_write, real_stat = write_atomic, os.stat
    cut_off = threading.Event()
    looked = threading.Event()

    def not_connected(path: Any, *args: Any, **kwargs: Any) -> Any:
        if cut_off.is_set() and str(path).startswith(str(job_dir)):
            looked.set()
            raise OSError(errno.ENOTCONN, os.strerror(errno.ENOTCONN), str(path))
        return real_stat(path, *args, **kwargs)

    def write_unless_cut_off(target: Path, data: bytes, **kwargs: Any) -> None:
        if cut_off.is_set():
            raise OSError(errno.ENOTCONN, os.strerror(errno.ENOTCONN), str(target))
        real_write(target, data, **kwargs)

    monkeypatch.setattr(heartbeat_module, "write_atomic", write_unless_cut_off)
    monkeypatch.setattr(os, "stat", not_connected)
    cut_off.set()
    writer.start()
    try:
        assert looked.wait(30)  # the thread looked for a cancel request while cut off
        before = read_heartbeat(job_dir, "tok")
        assert before is not None
        cut_off.clear()
        deadline = time.monotonic() + 30
        while (hb := read_heartbeat(job_dir, "tok")) is None or hb.counter <= before.counter:
            assert time.monotonic() < deadline, "no beat once the spool answered again"
            time.sleep(0.01)
    finally:
        writer.stop()
