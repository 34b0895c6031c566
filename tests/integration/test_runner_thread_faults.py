"""A whole runner (in this process, spoolrender.testing's fake renderer) whose spool stops
answering for a while: the trouble is logged once, reminded, and said over, not logged at
every pass; its threads are all there afterwards, and one that ends is said at once
(docs/reliability.md, "A spool that does not answer"). The fault is ENOTCONN, what a
GlusterFS client cut off past its ping-timeout answers to every call, injected at the
runner's own calls into the spool: the listing of incoming/, the beacon, the heartbeats.
The real cut, on real FUSE mounts: tests/reliability/test_gluster_hosts.py."""

from __future__ import annotations

import errno
import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import spoolrender.runner.reports as reports_module
import spoolrender.spool.heartbeat as heartbeat_module
from spoolrender import Spool
from spoolrender.intake.claim import SpoolScanner
from spoolrender.spool.beacons import write_beacon
from spoolrender.spool.durable import write_atomic
from spoolrender.spool.heartbeat import HeartbeatWriter
from spoolrender.testing import FakeRenderer, Succeed, make_spool, running_runner

FAST: dict[str, Any] = {
    "slots": 1,
    "settle_seconds": 0.1,
    "heartbeat_seconds": 0.05,
    "lease_seconds": 60.0,
    "poll_seconds": 0.1,
    "rescan_seconds": 0.05,
}
PASSES = 80  # the fault lasts this many passes (rescan_seconds) of the runner's loop
WAIT_S = 120.0


def wait_for(condition: Callable[[], object], what: str, timeout: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"not within {timeout:g} s: {what}"
        time.sleep(0.02)


def said(caplog: pytest.LogCaptureFixture, text: str, level: str) -> int:
    return sum(1 for r in caplog.records if r.levelname == level and text in r.getMessage())


def test_a_spool_that_does_not_answer_for_eighty_passes_is_logged_once_reminded_and_said_over(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """ENOTCONN was not a spool I/O error: the loop logged an ERROR at every pass
    (rescan_seconds: 51 ERROR lines from a GlusterFS host cut off for 18 s), the heartbeat
    thread a warning per beat, and the beacon's failure nothing at all."""
    caplog.set_level(logging.INFO)
    config = make_spool(tmp_path / "spool", FAST)
    fake = FakeRenderer(default=Succeed(size=10))
    fake.script("long", Succeed(size=10, progress=tuple(i / 40 for i in range(41)), seconds=PASSES * 0.05 + 4))
    cut = threading.Event()
    failed = [0]

    def failing(real: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            if cut.is_set():
                failed[0] += 1
                raise OSError(errno.ENOTCONN, os.strerror(errno.ENOTCONN), str(config.spool))
            return real(*args, **kwargs)

        return call

    monkeypatch.setattr(SpoolScanner, "scan", failing(SpoolScanner.scan))
    monkeypatch.setattr(reports_module, "write_beacon", failing(write_beacon))
    monkeypatch.setattr(heartbeat_module, "write_atomic", failing(write_atomic))
    spool = Spool(config.spool)
    long = spool.submit({"id": "long", "composition": "Intro", "output": "long.mp4"}, props_check=False)
    with running_runner(config, fake):
        fake.wait_for_run("long")
        cut.set()
        cut_at = time.monotonic()
        wait_for(lambda: time.monotonic() - cut_at >= PASSES * FAST["rescan_seconds"], "the fault's length")
        cut.clear()
        lasted = time.monotonic() - cut_at
        long.wait(timeout=WAIT_S)
        after = spool.submit({"id": "after", "composition": "Intro", "output": "after.mp4"}, props_check=False)
        after.wait(timeout=WAIT_S)
        wait_for(lambda: "every thread of this runner runs" in caplog.text, "the threads said to run after it")
    not_connected = os.strerror(errno.ENOTCONN)
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and not_connected in errors[0] and "claiming paused" in errors[0], errors
    # Reminders at most once per backoff delay (1, 2, 4... s): a handful, never one per pass.
    reminders = said(caplog, "spool I/O: still", "WARNING")
    assert reminders <= 2 + lasted // 2, (reminders, lasted)
    assert said(caplog, "heartbeat for", "WARNING") == 0
    assert said(caplog, "spool I/O works again", "INFO") == 1
    [threads] = [r.getMessage() for r in caplog.records if "every thread of this runner runs" in r.getMessage()]
    assert {"heartbeat", "slot-0", "watch"} <= set(threads.rpartition(": ")[2].split(", ")), threads
    assert failed[0] >= 3  # the beacon, the heartbeats and the listing did fail meanwhile
    assert [r.outcome for r in fake.runs_of("long")] == ["rendered"]
    print(f"\nENOTCONN for {lasted:.1f} s ({PASSES} passes): {len(errors)} ERROR, {reminders} reminder(s), "
          f"{failed[0]} failed call(s)")  # fmt: skip


def test_a_background_thread_that_ended_is_said_at_once_and_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A thread that ended (as the heartbeat thread did on ENOTCONN before 964d445) left only
    a traceback on stderr, while the runner went on claiming jobs it no longer kept alive."""
    config = make_spool(tmp_path / "spool", FAST)
    monkeypatch.setattr(HeartbeatWriter, "_loop", lambda self: None)  # the thread ends at once
    beacons = [0]

    def counted(*args: Any, **kwargs: Any) -> None:
        beacons[0] += 1
        write_beacon(*args, **kwargs)

    monkeypatch.setattr(reports_module, "write_beacon", counted)
    with running_runner(config, FakeRenderer()) as runner:
        wait_for(lambda: "the runner's heartbeat thread has ended" in caplog.text, "the ended thread said")
        seen = beacons[0]
        wait_for(lambda: beacons[0] >= seen + 10, "ten beacons more")  # each looks at the threads again
        alive = runner.threads_alive()
    assert alive["heartbeat"] is False and alive["watch"] is True
    assert said(caplog, "the runner's heartbeat thread has ended", "ERROR") == 1
