"""Heartbeats (a running job's proof of life) and judging whether an owner is dead.

While a job runs, its runner holds ``running/<job>/lock-<token>`` (an flock) and rewrites
``running/<job>/heartbeat-<token>`` every few seconds with a counter that always changes.

Both names carry the claim's token (:mod:`spoolrender.spool.heartbeat_file` says why, and how
an older runner's ``heartbeat`` is still read).

Two ways to prove an owner dead:
- same host: the kernel releases a flock when its holder dies (SIGKILL included), so a
  lock we can take at once proves it, instantly;
- any host: flocks are not trustworthy across NFS clients, so an observer times how long
  it has seen the heartbeat *unchanged* on its own monotonic clock; past the lease, the
  owner is dead or so stuck that its job must go elsewhere. No two clocks are compared.
"""

from __future__ import annotations

import dataclasses
import errno
import fcntl
import json
import logging
import os
import socket
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from spoolrender import defaults
from spoolrender.core.failpoints import crash_point
from spoolrender.errors import ClaimLost
from spoolrender.spool.clock import Clock
from spoolrender.spool.durable import overwrite_in_place, write_atomic

# The heartbeat file itself (its record, its name per claim, reading it) lives in
# heartbeat_file; most callers know these names from here.
from spoolrender.spool.heartbeat_file import Heartbeat as Heartbeat
from spoolrender.spool.heartbeat_file import entry_token as entry_token
from spoolrender.spool.heartbeat_file import heartbeat_path as heartbeat_path
from spoolrender.spool.heartbeat_file import heartbeat_stat as heartbeat_stat
from spoolrender.spool.heartbeat_file import lock_path as lock_path
from spoolrender.spool.heartbeat_file import read_heartbeat as read_heartbeat
from spoolrender.spool.io_trouble import SPOOL_IO_ERRNOS, SpoolIOCondition

log = logging.getLogger(__name__)

HOSTNAME = socket.gethostname()
HEARTBEAT_MODE = 0o644  # readable by every host's runner and by status


class JobLock:
    """The flock a claim holds on ``running/<job>/lock-<token>`` for as long as it owns the job.

    Not filelock's FileLock: its acquire creates missing parent directories, so a runner
    that stalled after its claim (SIGSTOP, a VM pause, an NFS hang) and woke after another
    runner had moved the job away would recreate ``running/<job>/`` as an empty phantom.
    Here the lock file is created only inside a directory that exists; ENOENT means the
    claim was lost. No soft-lock fallback either: where flock is unsupported (some NFS) a
    marker file would outlive a SIGKILLed owner, and the heartbeat lease covers that case.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None
        # Made empty by this acquire (not an existing file opened): the claim's first
        # heartbeat may be written into it (:meth:`publish_as`).
        self.fresh = False

    def acquire(self) -> None:
        """Take the lock; ClaimLost if the directory is gone or someone else holds it."""
        flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            # O_CREAT but never mkdir; O_NOFOLLOW: a planted symlink is not our lock file.
            # O_EXCL first: a new claim's token names no file yet, and a file we made is
            # known to be empty and ours; else the one there is locked all the same.
            try:
                fd, fresh = os.open(self.path, flags | os.O_EXCL, 0o644), True
            except FileExistsError:
                fd, fresh = os.open(self.path, flags, 0o644), False
        except FileNotFoundError as exc:
            raise ClaimLost(f"{self.path.parent.name} is gone: another runner took the job over") from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            os.close(fd)
            raise ClaimLost(f"{self.path.parent.name}: another process holds this claim's lock") from exc
        except OSError:
            os.close(fd)
            raise
        self._fd, self.fresh = fd, fresh

    def publish_as(self, target: Path, data: bytes, mode: int) -> None:
        """Write ``data`` into the lock file (made empty by :meth:`acquire`) and link it as
        ``target``, a name of the same directory: the claim's first heartbeat, which then
        costs no inode of its own (ext4 without a journal scans past every inode freed in
        the last seconds to make one: P2 in bench/README.md). Once per lock; raises
        OSError (FileExistsError: ``target`` exists) and the caller writes it another way.

        ``target`` appears complete, by one link(), like a temporary file renamed into
        place. Nothing reads a lock file's bytes: lock_is_free and older runners only
        flock it. The next beat replaces ``target`` (a new inode), the lock keeps its own.
        """
        fd = self._fd
        if fd is None or not self.fresh:
            raise FileExistsError(errno.EEXIST, "the lock file is not new and empty", str(self.path))
        self.fresh = False
        view = memoryview(data)
        while view:
            view = view[os.pwrite(fd, view, len(data) - len(view)) :]
        # Exactly ``mode``, as a heartbeat written by write_atomic (not the umask's): the
        # lock file's too from now on, readable as under the default umask 022 (contrib's
        # units); under a stricter one others may now open it and hold a shared flock,
        # which only makes this host's recovery wait for the lease.
        os.fchmod(fd, mode)
        # A crash here leaves a lock file holding a beat and no heartbeat name: a claim that
        # died before its first beat, as before (tests/reliability/test_crash_points.py).
        crash_point("first-beat-before-link")
        os.link(self.path, target)

    def release(self) -> None:
        # The file stays: unlinking a lock file on release lets two processes end up
        # holding locks on two different inodes of one name.
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)  # closing the only descriptor releases the flock


def acquire_job_lock(job_dir: Path, token: str) -> JobLock | None:
    """Take the claim's lock for as long as we own the job.

    Raises ClaimLost if the job's directory is gone (or the lock is held); returns None
    where the filesystem cannot lock at all (liveness then rests on the heartbeat lease).
    """
    lock = JobLock(lock_path(job_dir, token))
    try:
        lock.acquire()
    except ClaimLost:
        raise
    except OSError as exc:
        if exc.errno in SPOOL_IO_ERRNOS:
            raise  # no room for the lock file (a full disk): not a filesystem without locks
        log.warning("cannot lock %s (%s); relying on the heartbeat lease", job_dir.name, exc)
        return None
    return lock


def lock_is_free(job_dir: Path, token: str) -> bool:
    """True if nobody holds the claim's flock (on this host that means the owner is dead).

    A missing lock file proves nothing (the owner writes its heartbeat only after taking
    the lock, so it should exist): False, and the lease decides. The probe opens the file
    without O_CREAT, so it can never recreate a directory that was moved away meanwhile,
    and on its own descriptor: flock conflicts between descriptors even within one
    process, so a lock we hold ourselves never looks free.
    """
    try:
        fd = os.open(lock_path(job_dir, token), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False
    finally:
        os.close(fd)  # also drops our probe's lock at once
    return True


def boot_id() -> str | None:
    """This boot of the host (Linux); None where it cannot be read."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip() or None
    except OSError:
        return None


def process_start(pid: int) -> int | None:
    """When process ``pid`` started, in clock ticks since boot; None if it does not exist.

    Raw ticks from /proc, not psutil's create_time(): that one adds the boot time, which
    the kernel recomputes from the wall clock and which can shift by a second.
    """
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            # The command name (field 2) may contain spaces and parentheses: split after
            # its closing parenthesis; starttime is field 22, the 20th after it.
            return int(fh.read().rsplit(b")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


class LivenessTracker:
    """Remembers, per running entry, since when (monotonic) its heartbeat has not changed.

    With a ``state_file`` the observations outlive this process: every process on a host
    shares one monotonic clock (until a reboot, hence the boot id), so successive short
    runs (cron-started ``run --drain`` taking a few seconds each) add up to a lease and
    still recover a dead host's jobs. Several runners on one host share the file; each
    merges what it finds, keeping the earliest sighting of an unchanged heartbeat.

    Each observation is ``(signature, first seen, last seen)``. Another process's earlier
    sighting is adopted only if it reaches up to our own first one: a signature can come
    back (a heartbeat file missing now and again is the same "no file" each time), and an
    old sighting from before it changed in between must not count as one long silence.
    """

    def __init__(self, clock: Clock, state_file: Path | None = None) -> None:
        self._clock = clock
        self._state_file = state_file
        self._seen: dict[str, tuple[str, float, float]] = {}

    def silent_for(self, name: str, signature: object) -> float:
        """Seconds this observer has seen ``signature`` unchanged for entry ``name``."""
        now = self._clock.monotonic()
        sig = json.dumps(signature)
        previous = self._seen.get(name)
        if previous is None or previous[0] != sig:
            self._seen[name] = (sig, now, now)
            return 0.0
        self._seen[name] = (sig, previous[1], now)
        return now - previous[1]

    def forget_except(self, names: Iterable[str]) -> None:
        """Keep observations of ``names`` only: entries gone, or our own jobs (which we do not
        observe, and whose stale sightings we must not write back for others to adopt)."""
        keep = set(names)
        for name in list(self._seen):
            if name not in keep:
                del self._seen[name]

    def load(self) -> None:
        """Merge the host's shared observations into ours (earliest continuous sighting wins)."""
        if self._state_file is None:
            return
        try:
            data = json.loads(self._state_file.read_bytes())
            if data.get("boot") != boot_id():
                return  # another boot: its monotonic times mean nothing now
            theirs = {str(k): (str(v[0]), float(v[1]), float(v[-1])) for k, v in data["seen"].items()}
        except (OSError, ValueError, KeyError, TypeError, IndexError):
            return
        for name, (sig, first, last) in theirs.items():
            mine = self._seen.get(name)
            if mine is None:
                self._seen[name] = (sig, first, last)
            elif mine[0] == sig and first < mine[1] <= last:
                self._seen[name] = (sig, first, max(last, mine[2]))

    def save(self) -> None:
        if self._state_file is None:
            return
        data = {"boot": boot_id(), "seen": {k: list(v) for k, v in self._seen.items()}}
        try:
            self._state_file.parent.mkdir(parents=True, exist_ok=True)
            # Atomic replace, no fsync: losing observations in a power cut only delays
            # a recovery by one lease.
            write_atomic(self._state_file, json.dumps(data).encode(), durable=False)
        except OSError as exc:
            log.warning("cannot save liveness observations: %s", exc)


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
    pgid_start: int | None = None
    spool_io: str | None = None  # why this job's last write to the spool failed (spool/io_trouble.py)


_BOOT = boot_id()


def _cancel_requested(job_dir: Path) -> bool:
    """Whether ``job_dir`` holds a `spoolrender cancel` request. A look that fails finds none,
    and the next beat looks again: a spool that does not answer for now (a GlusterFS client
    cut off past its ping-timeout says ENOTCONN to every call) raised it out of the heartbeat
    thread, which ended, and once the spool answered again none of the runner's claims beat."""
    try:
        return (job_dir / defaults.CANCEL_FILENAME).exists()
    except OSError:
        return False


class HeartbeatWriter:
    """One thread that refreshes the heartbeat of every job this runner owns."""

    def __init__(self, clock: Clock, interval: float, runner_id: str, spool_io: SpoolIOCondition | None = None) -> None:
        self._clock = clock
        self._spool_io = spool_io
        self._interval = interval
        self._runner_id = runner_id
        self._jobs: dict[str, ActiveJob] = {}
        self._lock = threading.Lock()
        # Held while a heartbeat file is written: remove() waits for it (see there).
        self._writing = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="heartbeat", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def running(self) -> bool:
        """Whether the thread runs (started and not ended)."""
        return self._thread is not None and self._thread.is_alive()

    def add(self, job: ActiveJob, lock: JobLock | None = None) -> None:
        """Beat ``job`` from now on, the first time at once. That first beat, at the claim,
        does not look for a cancel request: the run's first step does (executor), and the
        claim is the claiming loop's, which every other claim waits for (P2). ``lock``:
        the claim's, just taken: the first beat is written into its file
        (:meth:`JobLock.publish_as`)."""
        with self._lock:
            self._jobs[job.token] = job
        self.beat(job, poll_cancel=False, first_into=lock)

    def remove(self, token: str) -> None:
        """Stop beating ``token``; on return nothing writes into its directory any more.

        The wait matters: the caller may delete the directory next (a lost claim race), and
        a beat already under way would otherwise create a file in it during the deletion,
        leaving an empty claim in running/.
        """
        with self._lock:
            self._jobs.pop(token, None)
        with self._writing:
            pass

    def set_progress(self, token: str, progress: float | None, stage: str | None) -> None:
        with self._lock:
            job = self._jobs.get(token)
            if job is not None:
                job.progress, job.stage = progress, stage

    def progress_of(self, token: str) -> tuple[float | None, str | None]:
        """The progress and stage last reported for ``token`` (the live display reads them)."""
        with self._lock:
            job = self._jobs.get(token)
            return (None, None) if job is None else (job.progress, job.stage)

    def set_pgid(self, token: str, pgid: int | None) -> None:
        start = None if pgid is None else process_start(pgid)
        with self._lock:
            job = self._jobs.get(token)
            if job is not None:
                job.pgid, job.pgid_start = pgid, start
        if job is not None:
            self.beat(job)  # at once: a recoverer must know the group if we die now

    def set_spool_io(self, token: str, error: str | None) -> None:
        """Say in the job's heartbeat that its writes to the spool fail (None: no more)."""
        with self._lock:
            job = self._jobs.get(token)
            changed = job is not None and job.spool_io != error
            if job is not None:
                job.spool_io = error
        if job is not None and changed:
            self.beat(job)  # at once: the runner may give up on the job right after

    def beat(self, job: ActiveJob, *, poll_cancel: bool = True, first_into: JobLock | None = None) -> bool:
        """Write one heartbeat; False (and ``on_lost``) if the job's directory is gone.
        ``poll_cancel``: then look for a `spoolrender cancel` request too. ``first_into``:
        the claim's new lock, whose file this beat may be written into (add)."""
        with self._writing:
            gone = self._write(job, first_into)
        if gone:
            with self._lock:
                still_ours = self._jobs.pop(job.token, None) is not None
            if not still_ours:
                return True  # the owner itself moved the job out of running/ meanwhile
            # Our running/ directory is gone: another runner judged us dead and took the
            # job. Stop working on it; fencing makes sure we never publish it.
            log.warning("job %s was taken away from this runner (heartbeat dir gone)", job.job_dir.name)
            job.on_lost()
            return False
        with self._lock:
            if self._jobs.get(job.token) is not job:
                return True  # removed meanwhile: nothing of it to poll any more
        # Polled here, with the heartbeat, because the request may come from any host
        # sharing the spool: a file in the job's directory is what all of them can see.
        if poll_cancel and job.on_cancel is not None and _cancel_requested(job.job_dir):
            log.info("job %s: cancel requested", job.job_dir.name)
            job.on_cancel()
        return True

    def _write(self, job: ActiveJob, first_into: JobLock | None = None) -> bool:
        """Write the heartbeat file of ``job`` if it is still ours; True if its directory is gone."""
        with self._lock:
            if self._jobs.get(job.token) is not job:
                return False  # removed meanwhile: its directory is not ours to write into
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
                boot=_BOOT,
                pgid_start=job.pgid_start,
                spool_io=job.spool_io,
            )
            job_dir = job.job_dir
        # The claim's own name (and so its own temporary name): nobody else ever operates on
        # them, so a frozen owner's locks on them block no other claim (module docstring).
        path = heartbeat_path(job_dir, job.token)
        if first_into is not None and first_into.fresh:
            try:
                # The claim's first beat: its new lock file, linked as the heartbeat (one
                # inode less per claim); no fsync, as below.
                first_into.publish_as(path, hb.to_json(), HEARTBEAT_MODE)
                return False
            except FileNotFoundError:
                return True
            except OSError:
                pass  # a name there already, no hard links, no room: the replace below decides
        try:
            # Atomic replace so readers never see half a heartbeat; no fsync: a heartbeat
            # lost in a power cut only makes the job look dead sooner, which is the truth.
            write_atomic(path, hb.to_json(), durable=False, mode=HEARTBEAT_MODE)
        except FileNotFoundError:
            return True
        except OSError as exc:
            if exc.errno not in SPOOL_IO_ERRNOS or self._spool_io is None:
                log.warning("heartbeat for %s failed: %s", job_dir.name, exc)
                return False
            # A full disk has no room for the replacement file: the owner is alive all the
            # same, so say so where the old heartbeat already has its room (other hosts
            # judge by change, and the job must not be taken for dead meanwhile).
            self._spool_io.failed(exc, f"writing the heartbeat of {job_dir.name}", retried=False)
            with self._lock:
                job.spool_io = job.spool_io or os.strerror(exc.errno)
            overwrite_in_place(path, dataclasses.replace(hb, spool_io=job.spool_io).to_json())
            return False
        if hb.spool_io is not None:
            with self._lock:
                job.spool_io = None  # room again: the next beat says so (a stuck decision re-marks it)
        return False

    def _loop(self) -> None:
        while not self._stop.wait(self._interval):
            with self._lock:
                jobs = list(self._jobs.values())
            for job in jobs:
                self.beat(job)
