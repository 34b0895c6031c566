"""The background threads of the runner and of `spoolrender serve` against a filesystem call
that fails (ENOTCONN, EIO, ENOSPC, EROFS, ESTALE) for a while, then works again: each must
live on, keep its duty, resume, and say so once rather than per try (docs/reliability.md,
"A spool that does not answer"). The fault is injected at the thread's own call (a
monkeypatched os/pathlib function that fails for that thread's files only); the spool, the
threads and the rest of the filesystem are real. The runner's own threads (heartbeat, the
main loop's backoff, the thread check) are in tests/integration/test_runner_thread_faults.py."""

from __future__ import annotations

import dataclasses
import errno
import io
import json
import logging
import os
import queue
import random
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import watchdog.observers.polling as polling
from support.unit_spool import Slot
from watchdog.utils.dirsnapshot import DirectorySnapshot

import spoolrender.hooks.dispatcher as hooks_module
import spoolrender.ops.metrics as metrics_module
import spoolrender.ops.retention_lease as lease_module
import spoolrender.serve.events as events_module
from spoolrender import defaults
from spoolrender.hooks.plan import pending_dir, taken_dir
from spoolrender.intake.watch import SpoolWatcher
from spoolrender.ops.metrics import RunnerMetrics
from spoolrender.ops.retention_lease import FREE, HELD, read_lease, take_lease
from spoolrender.ops.status import read_status
from spoolrender.renderers.command import _pump
from spoolrender.renderers.remotion.node_worker import RemotionWorker
from spoolrender.serve.events import EventHub
from spoolrender.serve.history import HistoryRecorder
from spoolrender.spool.durable import write_atomic
from spoolrender.spool.layout import list_names
from spoolrender.spool.trouble_log import TroubleLog

FAULTS = [errno.ENOTCONN, errno.EIO, errno.ENOSPC, errno.EROFS, errno.ESTALE]
WAIT_S = 60.0  # generous: the host is shared and busy


class Cut:
    """A fault the test switches on and off; counts the calls it failed."""

    def __init__(self, code: int = errno.ENOTCONN) -> None:
        self.code = code
        self.on = threading.Event()
        self.failed = 0

    def check(self, path: object) -> None:
        if self.on.is_set():
            self.failed += 1
            raise OSError(self.code, os.strerror(self.code), str(path))

    def wrap(self, real: Callable[..., Any], under: Path) -> Callable[..., Any]:
        """``real`` failing, while the cut is on, for paths under ``under`` only."""

        def call(path: Any, *args: Any, **kwargs: Any) -> Any:
            if str(path).startswith(str(under)):
                self.check(path)
            return real(path, *args, **kwargs)

        return call


def wait_for(condition: Callable[[], object], what: str, timeout: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"not within {timeout:g} s: {what}"
        time.sleep(0.01)


@pytest.fixture(autouse=True)
def info_logged(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)  # the lines saying a trouble is over are INFO


def lines(caplog: pytest.LogCaptureFixture, text: str) -> dict[str, int]:
    """How many records, by level name, contain ``text``."""
    counts: dict[str, int] = {}
    for record in caplog.records:
        if text in record.getMessage():
            counts[record.levelname] = counts.get(record.levelname, 0) + 1
    return counts


def test_a_trouble_is_said_once_reminded_then_said_over() -> None:
    now = [100.0]
    logger = logging.getLogger("test.trouble")
    said: list[tuple[int, str]] = []

    class Catch(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            said.append((record.levelno, record.getMessage()))

    handler = Catch()
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        trouble = TroubleLog(logger, "task", remind_s=30, clock=lambda: now[0])
        for _ in range(100):  # a hundred failed tries in 29 s: one line
            trouble.failed(OSError(errno.ENOTCONN, "Transport endpoint is not connected", "/spool/a"))
            now[0] += 0.29
        assert [level for level, _ in said] == [logging.ERROR]
        now[0] += 1
        trouble.failed(OSError(errno.ENOTCONN, "Transport endpoint is not connected", "/spool/b"))
        assert said[-1][0] == logging.WARNING and "task still fails" in said[-1][1] and "101 failure(s)" in said[-1][1]
        trouble.failed(OSError(errno.EIO, "Input/output error"))  # another error: said at once
        assert said[-1][0] == logging.ERROR and "Input/output error" in said[-1][1]
        trouble.succeeded()
        trouble.succeeded()
        assert said[-1] == (logging.INFO, "task works again after 30 s (102 failure(s))")
        assert len(said) == 4
    finally:
        logger.removeHandler(handler)
        logger.setLevel(logging.NOTSET)


@pytest.mark.parametrize("code", FAULTS, ids=errno.errorcode.get)
def test_the_purge_lease_is_renewed_again_after_the_spool_failed_for_a_while(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, code: int
) -> None:
    """Its renewing thread looked for a newer generation with `Path.exists()`, which raises
    any error but ENOENT: the first failed look ended the thread, the lease went stale while
    its holder still purged, and another runner purged beside it a lease later."""
    slot = Slot(tmp_path / "spool")
    config = dataclasses.replace(slot.config, heartbeat_seconds=0.02)
    directory = slot.layout.private / defaults.RETENTION_DIR
    cut = Cut(code)
    real_exists, real_write = Path.exists, write_atomic
    monkeypatch.setattr(Path, "exists", cut.wrap(real_exists, directory))
    monkeypatch.setattr(lease_module, "write_atomic", cut.wrap(real_write, directory))
    lease = take_lease(config, "runner-a", time.time())
    assert lease is not None
    path = directory / f"lease-{lease.generation:012d}"
    try:
        cut.on.set()
        wait_for(lambda: cut.failed >= 20, "the renewal tried again and again while the spool failed")
        path.write_text("{}")  # not the lease's body: the next renewal rewrites it
        cut.on.clear()
        wait_for(lambda: json.loads(path.read_bytes()).get("state") == HELD, "the lease renewed after the fault")
    finally:
        lease.release({"ended": 1.0})
    current = read_lease(slot.layout)
    assert current is not None and current.state == FREE and not lease.lost
    assert lines(caplog, "renewing the purge lease") in ({"ERROR": 1, "INFO": 1}, {"ERROR": 1, "INFO": 1, "WARNING": 1})


def test_a_purge_lease_released_while_the_spool_fails_says_so_and_does_not_raise(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """release() looked for a newer generation with `Path.exists()` too: the purge's report
    raised out of the retention thread, and the lease stayed held (stale in a lease)."""
    slot = Slot(tmp_path / "spool")
    directory = slot.layout.private / defaults.RETENTION_DIR
    cut = Cut()
    monkeypatch.setattr(Path, "exists", cut.wrap(Path.exists, directory))
    monkeypatch.setattr(lease_module, "write_atomic", cut.wrap(write_atomic, directory))
    lease = take_lease(slot.config, "runner-a", time.time())
    assert lease is not None
    cut.on.set()
    lease.release({"ended": 1.0})
    assert lines(caplog, "cannot release the purge lease") == {"WARNING": 1}


def worker_reading(log: io.RawIOBase) -> RemotionWorker:
    """A RemotionWorker's reading half alone (no Node process: a unit test starts none)."""
    worker = RemotionWorker.__new__(RemotionWorker)
    worker._events = queue.Queue()
    worker._log_lock = threading.Lock()
    worker._log = None
    worker._tail = []
    worker.memory = None
    worker.set_log(io.BufferedWriter(log))
    return worker


class FailingLog(io.RawIOBase):
    """A job's log file on a spool that fails for the first ``failures`` writes."""

    def __init__(self, failures: int, code: int) -> None:
        self.failures, self.code, self.data = failures, code, b""

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        if self.failures > 0:
            self.failures -= 1
            raise OSError(self.code, os.strerror(self.code))
        self.data += bytes(data)
        return len(data)


@pytest.mark.parametrize("code", FAULTS, ids=errno.errorcode.get)
def test_the_remotion_workers_reader_reads_on_while_the_job_log_cannot_be_written(code: int) -> None:
    """The worker's output reader wrote each line to the job's log (in the spool) and ended
    at the first write that failed: the render's events (progress, its end) were never read,
    the render waited for its timeout, and the warm worker was deaf for every later job."""
    log = FailingLog(3, code)
    worker = worker_reading(log)
    events = [{"type": "log", "n": n} for n in range(6)] + [{"type": "rendered", "jobId": "j#1"}]
    worker._read_stdout(io.BytesIO(b"".join(json.dumps(e).encode() + b"\n" for e in events)))
    read = []
    while (event := worker._events.get_nowait()) is not None:
        read.append(event)
    assert read == events  # every event reached the render, and the end of the stream too
    text = log.data.decode()
    assert f"--- writing this log failed 3 time(s) here ({os.strerror(code)}): lines may be missing" in text
    assert text.endswith('{"type": "rendered", "jobId": "j#1"}\n')  # written again once the log could be


def test_a_commands_log_is_written_again_once_the_spool_takes_it() -> None:
    """A command's output reader stopped writing the log for the rest of the run at the
    first failed write: a log cut off for a second lost everything after it."""
    log = FailingLog(2, errno.ENOTCONN)
    tail: deque[str] = deque(maxlen=20)
    _pump(io.BytesIO(b"".join(f"line {n}\n".encode() for n in range(5))), io.BufferedWriter(log), tail, _no_progress)
    assert list(tail) == [f"line {n}" for n in range(5)]
    text = log.data.decode()
    assert "--- writing this log failed 2 time(s) here" in text and text.endswith("line 3\nline 4\n"), text


def _no_progress(fraction: float | None, stage: str | None = None) -> None:
    pass


def hooked_spool(tmp_path: Path, **changes: Any) -> Slot:
    """A spool with a webhook on done (to a port nobody listens on: no delivery starts a
    process), and one job run to done/: one delivery due."""
    slot = Slot(tmp_path / "spool", {"hooks": {"notify": {"on": ["done"], "url": "http://127.0.0.1:9/h"}}})
    slot.config = dataclasses.replace(slot.config, **changes)
    slot.drop("intro.yaml", {"composition": "Intro"})
    assert slot.run_next().state == "done"
    return slot


def test_the_hook_dispatcher_says_a_spool_it_cannot_list_once_and_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """It logged an ERROR at every pass (rescan_seconds) for as long as the spool failed."""
    slot = hooked_spool(tmp_path, rescan_seconds=0.01)
    cut = Cut()
    monkeypatch.setattr(hooks_module, "list_names", cut.wrap(list_names, slot.layout.private))
    hooks = hooks_module.HookDispatcher(slot.layout, slot.config, random.Random(1), time.time)
    cut.on.set()
    hooks.start()
    try:
        wait_for(lambda: cut.failed >= 50, "fifty passes while the spool fails")
        cut.on.clear()
        # The delivery's attempt, as its log says: its marker is out of pending/ only while the
        # delivery is in hand (refused at once, it is back for the next attempt), a moment a
        # poll can miss on a busy host again and again (seen: 60 s at load 2 on -n 2).
        wait_for(
            lambda: any("failed (attempt 1 of" in r.getMessage() for r in list(caplog.records)),
            "the due delivery attempted once the spool answers",
        )
    finally:
        hooks.stop(force=True)
    said = lines(caplog, "hooks: looking for due deliveries")
    assert said.get("ERROR") == 1 and said.get("INFO") == 1 and said.get("WARNING", 0) <= 1, said


def test_a_delivery_state_the_spool_fails_to_read_keeps_its_marker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A delivery state that could not be read was taken for a corrupt one and its marker
    dropped: an I/O error of the spool lost the job's hooks for good."""
    slot = hooked_spool(tmp_path)
    [name] = os.listdir(pending_dir(slot.layout))
    real_read = Path.read_bytes
    cut = Cut(errno.EIO)

    def read_bytes(self: Path) -> bytes:
        if self.name.startswith("hook-"):
            cut.check(self)
        return real_read(self)

    monkeypatch.setattr(Path, "read_bytes", read_bytes)
    hooks = hooks_module.HookDispatcher(slot.layout, slot.config, random.Random(1), time.time)
    cut.on.set()
    with pytest.raises(OSError):
        hooks.deliver_due()
    assert os.listdir(pending_dir(slot.layout)) == [name] and os.listdir(taken_dir(slot.layout)) == []
    cut.on.clear()
    hooks.deliver_due()  # delivered now (refused: tried again later), the state read
    hooks.stop(force=True)


def test_the_metrics_textfile_tells_of_a_spool_it_cannot_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The spool's gauges were read first, and their OSError left the textfile unwritten
    for as long as the spool failed: spoolrender_spool_io_failing never said 1 then."""
    slot = Slot(tmp_path / "spool")
    metrics = RunnerMetrics("r", 1)
    textfile = tmp_path / "runner.prom"
    metrics.write_textfile(textfile, slot.config)
    cut = Cut()
    monkeypatch.setattr(metrics_module, "take_snapshot", lambda *a: cut.check(slot.layout.root))
    cut.on.set()
    metrics.set_spool_io(True, 3)
    metrics.write_textfile(textfile, slot.config)
    assert 'spoolrender_spool_io_failing{runner="r"} 1.0' in textfile.read_text()


def test_the_event_stream_says_a_spool_it_cannot_read_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """It warned at every poll (poll_seconds) while the spool failed."""
    slot = Slot(tmp_path / "spool")
    cut = Cut()
    real = read_status
    calls = [0]

    def snapshot(*args: Any) -> Any:
        calls[0] += 1
        cut.check(slot.layout.root)
        return real(*args)

    monkeypatch.setattr(events_module, "read_status", snapshot)
    hub = EventHub(slot.config, poll_seconds=0.01)
    hub.start()
    try:
        with hub.subscription():
            cut.on.set()
            wait_for(lambda: cut.failed >= 30, "thirty polls while the spool fails")
            cut.on.clear()
            polled = calls[0]
            wait_for(lambda: calls[0] > polled + 2, "polls after the fault")
    finally:
        hub.stop()
    assert lines(caplog, "event stream: reading the spool") == {"WARNING": 1, "INFO": 1}


def test_the_history_says_each_outage_not_only_the_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """It warned the first time only, ever: a second outage, or one that never ended, went
    unsaid, and nothing said when history was kept again."""
    slot = Slot(tmp_path / "spool")
    recorder = HistoryRecorder(slot.config, interval=1)
    cut = Cut()
    tries = [0]
    real = recorder._finished_names

    def finished() -> dict[str, set[str]]:
        tries[0] += 1
        cut.check(slot.layout.done)
        return real()

    monkeypatch.setattr(recorder, "_finished_names", finished)
    recorder.start()
    try:
        for _ in range(2):
            cut.on.set()
            failed = cut.failed
            wait_for(lambda: cut.failed >= failed + 3, "three passes while the spool fails")  # noqa: B023
            cut.on.clear()
            done = tries[0]
            wait_for(lambda: tries[0] > done + 1, "a pass that worked")  # noqa: B023
    finally:
        recorder.stop()
    assert lines(caplog, "keeping the spool's history") == {"WARNING": 2, "INFO": 2}


def test_a_polling_watch_reports_changes_after_its_directory_failed_for_a_while(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """watchdog 6's polling emitter ended at the first listing that failed with any OSError
    (a spool on a network filesystem cut off: ENOTCONN): the runner then woke only every
    rescan_seconds. pyproject.toml asks for watchdog 7, which tries again at the next poll."""
    incoming, retry = tmp_path / "incoming", tmp_path / "retry"
    incoming.mkdir()
    retry.mkdir()
    cut = Cut()
    # The emitter's listing: watchdog binds os.scandir and os.stat as default arguments.
    monkeypatch.setattr(polling, "DirectorySnapshot", cut.wrap(DirectorySnapshot, incoming))
    wake = threading.Event()
    watcher = SpoolWatcher("polling", 0.02)
    watcher.start(incoming, retry, wake, lambda name, kind: None)
    try:
        cut.on.set()
        wait_for(lambda: cut.failed >= 5, "polls of the watched directory while it fails")
        cut.on.clear()
        time.sleep(0.1)  # a few polls that work: a snapshot to compare with
        wake.clear()
        (incoming / "job.yaml").write_text("composition: Intro\n")
        assert wake.wait(WAIT_S), "no wake-up for a job dropped after the fault"
        assert watcher.running()
    finally:
        watcher.stop()
