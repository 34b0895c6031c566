"""Heartbeats (a running job's proof of life) and judging whether an owner is dead.

While a job runs, its runner holds ``running/<job>/lock`` (a filelock flock) and rewrites
``running/<job>/heartbeat`` every few seconds with a counter that always changes.

Two ways to prove an owner dead:
- same host: the kernel releases a flock when its holder dies (SIGKILL included), so a
  lock we can take at once proves it, instantly;
- any host: flocks are not trustworthy across NFS clients, so an observer times how long
  it has seen the heartbeat *unchanged* on its own monotonic clock; past the lease, the
  owner is dead or so stuck that its job must go elsewhere. No two clocks are compared.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from spoolrender import defaults
from spoolrender.clock import Clock
from spoolrender.durable import write_atomic

log = logging.getLogger(__name__)

HOSTNAME = socket.gethostname()


@dataclass(frozen=True)
class Heartbeat:
    host: str
    pid: int
    token: str
    run: int
    counter: int
    progress: float | None = None
    stage: str | None = None
    started: float | None = None  # owner's wall clock, informational
    updated: float | None = None  # owner's wall clock, informational
    runner: str | None = None
    pgid: int | None = None  # the render's process group, killed if the job is recovered

    def to_json(self) -> bytes:
        return json.dumps(self.__dict__, sort_keys=True).encode("utf-8")

    @classmethod
    def from_json(cls, data: bytes) -> Heartbeat:
        raw: dict[str, Any] = json.loads(data)
        return cls(
            host=str(raw["host"]),
            pid=int(raw["pid"]),
            token=str(raw["token"]),
            run=int(raw["run"]),
            counter=int(raw["counter"]),
            progress=None if raw.get("progress") is None else float(raw["progress"]),
            stage=raw.get("stage"),
            started=raw.get("started"),
            updated=raw.get("updated"),
            runner=raw.get("runner"),
            pgid=None if raw.get("pgid") is None else int(raw["pgid"]),
        )


def read_heartbeat(job_dir: Path) -> Heartbeat | None:
    """The job's heartbeat, or None when it is missing or unreadable (treated as silent)."""
    try:
        return Heartbeat.from_json((job_dir / defaults.HEARTBEAT_FILENAME).read_bytes())
    except (OSError, ValueError, KeyError, TypeError):
        return None


def lock_path(job_dir: Path, token: str) -> Path:
    # One lock file per claim, named by its token: the job directory (and any lock file
    # in it) travels between states, and a process that still holds the flock of an
    # earlier claim of the same job must not block, or be mistaken for, the new one.
    return job_dir / f"{defaults.LOCK_FILENAME}-{token}"


def _job_lock(job_dir: Path, token: str) -> FileLock:
    # preserve_lock_file: unlinking a lock file on release lets two processes end up
    # holding locks on two different inodes of one name. No soft-lock fallback: where
    # flock is unsupported (some NFS) a marker file would outlive a SIGKILLed owner, and
    # the heartbeat lease already covers that case.
    return FileLock(
        lock_path(job_dir, token),
        timeout=0,
        thread_local=False,
        is_singleton=False,
        preserve_lock_file=True,
        fallback_to_soft=False,
    )


def acquire_job_lock(job_dir: Path, token: str) -> FileLock | None:
    """Take the job's lock for as long as we own the job.

    Raises filelock.Timeout if someone holds it; returns None where the filesystem
    cannot lock at all (liveness then rests on the heartbeat lease alone).
    """
    lock = _job_lock(job_dir, token)
    try:
        lock.acquire()
    except Timeout:
        raise
    except OSError as exc:
        log.warning("cannot lock %s (%s); relying on the heartbeat lease", job_dir.name, exc)
        return None
    return lock


def lock_is_free(job_dir: Path, token: str) -> bool:
    """True if nobody holds the claim's flock (on this host that means the owner is dead).

    A missing lock file proves nothing (the owner writes its heartbeat only after taking
    the lock, so it should exist): False, and the lease decides.
    """
    if not lock_path(job_dir, token).exists():
        return False
    # A fresh, non-singleton FileLock per probe: a singleton would be reentrant inside
    # this process, and we must never be fooled by a lock we hold ourselves.
    probe = _job_lock(job_dir, token)
    try:
        probe.acquire()
    except Timeout:
        return False
    except OSError:
        return False
    probe.release()
    return True


class LivenessTracker:
    """Remembers, per running entry, since when (monotonic) its heartbeat has not changed.

    With a ``state_file`` the observations outlive this process: every process on a host
    shares one monotonic clock (until a reboot, hence the boot id), so successive short
    runs (cron-started ``run --drain`` taking a few seconds each) add up to a lease and
    still recover a dead host's jobs. Several runners on one host share the file; each
    merges what it finds, keeping the earliest sighting of an unchanged heartbeat.
    """

    def __init__(self, clock: Clock, state_file: Path | None = None) -> None:
        self._clock = clock
        self._state_file = state_file
        self._seen: dict[str, tuple[str, float]] = {}

    def silent_for(self, name: str, signature: object) -> float:
        """Seconds this observer has seen ``signature`` unchanged for entry ``name``."""
        now = self._clock.monotonic()
        sig = json.dumps(signature)
        previous = self._seen.get(name)
        if previous is None or previous[0] != sig:
            self._seen[name] = (sig, now)
            return 0.0
        return now - previous[1]

    def forget_except(self, names: Iterable[str]) -> None:
        keep = set(names)
        for name in list(self._seen):
            if name not in keep:
                del self._seen[name]

    def load(self) -> None:
        """Merge the host's shared observations into ours (earliest sighting wins)."""
        if self._state_file is None:
            return
        try:
            data = json.loads(self._state_file.read_bytes())
            if data.get("boot") != _boot_id():
                return  # another boot: its monotonic times mean nothing now
            theirs = {str(k): (str(v[0]), float(v[1])) for k, v in data["seen"].items()}
        except (OSError, ValueError, KeyError, TypeError, IndexError):
            return
        for name, (sig, first) in theirs.items():
            mine = self._seen.get(name)
            if mine is None or (mine[0] == sig and first < mine[1]):
                self._seen[name] = (sig, first)

    def save(self) -> None:
        if self._state_file is None:
            return
        data = {"boot": _boot_id(), "seen": {k: list(v) for k, v in self._seen.items()}}
        try:
            self._state_file.parent.mkdir(parents=True, exist_ok=True)
            # Atomic replace, no fsync: losing observations in a power cut only delays
            # a recovery by one lease.
            write_atomic(self._state_file, json.dumps(data).encode(), durable=False)
        except OSError as exc:
            log.warning("cannot save liveness observations: %s", exc)


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return "unknown"


@dataclass
class ActiveJob:
    """What the heartbeat thread needs to know about one job this process runs."""

    job_dir: Path
    token: str
    run: int
    started: float
    on_lost: Callable[[], None]
    on_cancel: Callable[[], None] | None = None  # `spoolrender cancel` asked to stop
    progress: float | None = None
    stage: str | None = None
    counter: int = 0
    pgid: int | None = None


class HeartbeatWriter:
    """One thread that refreshes the heartbeat of every job this runner owns."""

    def __init__(self, clock: Clock, interval: float, runner_id: str) -> None:
        self._clock = clock
        self._interval = interval
        self._runner_id = runner_id
        self._jobs: dict[str, ActiveJob] = {}
        self._lock = threading.Lock()
        # Held while a heartbeat is written, so that remove() can wait for a beat in flight.
        self._write_lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="heartbeat", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def add(self, job: ActiveJob) -> None:
        with self._lock:
            self._jobs[job.token] = job
        self.beat(job)

    def remove(self, token: str) -> None:
        """Stop beating for ``token``; on return nothing writes into its directory any more.

        The heartbeat thread may be writing this job's heartbeat right now: wait for that
        write, or it could recreate files in a directory the caller is about to move or
        delete (a lost claim's rmtree then left the directory behind, seen over sshfs).
        """
        with self._lock:
            self._jobs.pop(token, None)
        with self._write_lock:
            pass

    def set_progress(self, token: str, progress: float | None, stage: str | None) -> None:
        with self._lock:
            job = self._jobs.get(token)
            if job is not None:
                job.progress, job.stage = progress, stage

    def set_pgid(self, token: str, pgid: int | None) -> None:
        with self._lock:
            job = self._jobs.get(token)
            if job is not None:
                job.pgid = pgid
        if job is not None:
            self.beat(job)  # at once: a recoverer must know the group if we die now

    def beat(self, job: ActiveJob) -> bool:
        """Write one heartbeat; False (and ``on_lost``) if the job's directory is gone."""
        with self._write_lock:
            return self._write(job)

    def _write(self, job: ActiveJob) -> bool:
        with self._lock:
            if self._jobs.get(job.token) is not job:
                return True  # removed meanwhile: its directory is no longer ours to write
            job.counter += 1
            hb = Heartbeat(
                host=HOSTNAME,
                pid=os.getpid(),
                token=job.token,
                run=job.run,
                counter=job.counter,
                progress=job.progress,
                stage=job.stage,
                started=job.started,
                updated=self._clock.wall(),
                runner=self._runner_id,
                pgid=job.pgid,
            )
            job_dir = job.job_dir
        try:
            # Atomic replace so readers never see half a heartbeat; no fsync: a heartbeat
            # lost in a power cut only makes the job look dead sooner, which is the truth.
            write_atomic(job_dir / defaults.HEARTBEAT_FILENAME, hb.to_json(), durable=False)
        except FileNotFoundError:
            with self._lock:
                still_ours = self._jobs.pop(job.token, None) is not None
            if not still_ours:
                return True  # the owner itself moved the job out of running/ meanwhile
            # Our running/ directory is gone: another runner judged us dead and took the
            # job. Stop working on it; fencing makes sure we never publish it.
            log.warning("job %s was taken away from this runner (heartbeat dir gone)", job_dir.name)
            job.on_lost()
            return False
        except OSError as exc:
            log.warning("heartbeat for %s failed: %s", job_dir.name, exc)
        # Polled here, with the heartbeat, because the request may come from any host
        # sharing the spool: a file in the job's directory is what all of them can see.
        if job.on_cancel is not None and (job_dir / defaults.CANCEL_FILENAME).exists():
            log.info("job %s: cancel requested", job_dir.name)
            job.on_cancel()
        return True

    def _loop(self) -> None:
        while not self._stop.wait(self._interval):
            with self._lock:
                jobs = list(self._jobs.values())
            for job in jobs:
                self.beat(job)
