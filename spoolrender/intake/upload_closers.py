"""Who closed a file in incoming/ after writing it, and does that process still run?

inotify says *that* a file was closed after writing, not by whom, and a close is not the
end of an upload when the same process opens the file again: ``printf a > f; sleep 2;
printf b >> f`` closes ``f`` twice from one shell that lives on in between. fanotify
reports the pid with each close-after-write; a pidfd then tells us, without polling and
without being fooled by pid reuse, when that process has exited. A file closed after
writing counts as complete (:mod:`spoolrender.intake.completeness`) once every process that closed it
has exited: sftp-server, rsync, cp and a script all exit right after their last close,
while a long-lived writer (a daemon writing in place) waits for the settle time.

fanotify needs CAP_SYS_ADMIN (root): as root this is on; an unprivileged runner, as
contrib's systemd unit runs it, goes without, and a close decides alone there
(docs/reliability.md says what that leaves open). Only with inotify watching (a local
filesystem): other hosts' closes never reach this kernel.

Bounded (issue 20): only closes of names the scan would consider (not ``.x``, ``x.part``)
are followed; a process is followed for at most the settle time after its last such close
(by then the file is settled and the verdict no longer needs it) and then released, its
pidfd closed; and at most ``max_pidfds`` processes at once, ``max_pidfds_per_uid`` of one
user. A close beyond a cap, or lost in a queue overflow, counts as "its writer may still
run": the file waits for the settle time, the rule the scan applies anyway.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import logging
import os
import resource
import select
import struct
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from spoolrender import defaults
from spoolrender.jobfile import is_candidate_name

log = logging.getLogger(__name__)

_FAN_CLASS_NOTIF = 0x0
_FAN_CLOEXEC = 0x1
_FAN_NONBLOCK = 0x2
_FAN_MARK_ADD = 0x1
_FAN_CLOSE_WRITE = 0x8
_FAN_EVENT_ON_CHILD = 0x0800_0000
_AT_FDCWD = -100
_METADATA = struct.Struct("=IBBHQii")  # event_len, vers, reserved, metadata_len, mask, fd, pid

Key = tuple[int, int]  # st_dev, st_ino


def pidfd_caps(max_pidfds: int | None, max_per_uid: int | None) -> tuple[int, int]:
    """(in total, per user): the given caps or the defaults, the total within a share of
    this process's descriptor limit (a runner started with ``ulimit -n 256`` follows 64)."""
    total = defaults.CLOSER_PIDFDS_MAX if max_pidfds is None else max_pidfds
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY:
        total = min(total, soft // defaults.CLOSER_PIDFDS_FD_LIMIT_SHARE)
    per_uid = defaults.CLOSER_PIDFDS_PER_UID if max_per_uid is None else max_per_uid
    return max(0, total), max(0, min(per_uid, total))


@dataclass
class _Followed:
    """A process that closed an upload after writing, followed by its pidfd."""

    uid: int
    pid: int
    last_close: float  # monotonic
    keys: set[Key] = field(default_factory=set)


class CloserTracker:
    """Follows close-after-write events in one directory and their processes' lives."""

    def __init__(
        self,
        on_change: Callable[[], None],
        *,
        settle_seconds: float = defaults.SETTLE_S,
        max_pidfds: int | None = None,
        max_pidfds_per_uid: int | None = None,
    ) -> None:
        self._on_change = on_change
        # Past this after its last close a followed process no longer matters: settled.
        self._hold = settle_seconds + defaults.CLOSER_HOLD_MARGIN_S
        self._max_total, self._max_per_uid = pidfd_caps(max_pidfds, max_pidfds_per_uid)
        self._lock = threading.Lock()
        self._followed: dict[int, _Followed] = {}  # by pidfd
        self._pidfd_of: dict[int, int] = {}  # pid -> its pidfd while followed
        self._by_key: dict[Key, set[int]] = {}  # inode -> pidfds of processes that closed it
        self._per_uid: Counter[int] = Counter()
        self._unfollowed: dict[Key, float] = {}  # closed by a process beyond a cap: monotonic until
        self._unknown_until = 0.0  # events lost (queue overflow, too many inodes): every close waits
        self._capped_uids: set[int] = set()  # told once in the log
        self._directory = ""
        self._fan = -1
        self._read_lock = threading.Lock()  # one reader of the fanotify queue at a time
        self._stop = threading.Event()
        self._poke_r, self._poke_w = -1, -1  # wakes the thread: stop, or new pidfds to poll
        self._thread: threading.Thread | None = None

    def start(self, directory: Path) -> bool:
        """Watch ``directory``; False (and nothing running) where fanotify is not allowed."""
        libc = ctypes.CDLL(None, use_errno=True)
        try:
            init, mark = libc.fanotify_init, libc.fanotify_mark
        except AttributeError:
            return False
        mark.argtypes = [ctypes.c_int, ctypes.c_uint, ctypes.c_uint64, ctypes.c_int, ctypes.c_char_p]
        flags = os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | getattr(os, "O_LARGEFILE", 0)
        fan = init(_FAN_CLASS_NOTIF | _FAN_CLOEXEC | _FAN_NONBLOCK, flags)
        if fan < 0:
            err = ctypes.get_errno()
            log.debug("fanotify unavailable (%s): closes decide alone", os.strerror(err))
            return False
        if mark(fan, _FAN_MARK_ADD, _FAN_CLOSE_WRITE | _FAN_EVENT_ON_CHILD, _AT_FDCWD, os.fsencode(directory)) < 0:
            log.debug("fanotify_mark failed (%s): closes decide alone", os.strerror(ctypes.get_errno()))
            os.close(fan)
            return False
        # The event's file is named by /proc/self/fd: a resolved path, so compare resolved.
        self._directory = os.path.realpath(directory)
        self._fan = fan
        self._poke_r, self._poke_w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        self._thread = threading.Thread(target=self._run, name="closers", daemon=True)
        self._thread.start()
        return True

    def stop(self) -> None:
        if self._thread is None:
            return
        self._stop.set()
        self._poke()
        self._thread.join(timeout=5)
        self._thread = None
        with self._lock:
            fds = [self._fan, self._poke_r, self._poke_w, *self._followed]
            self._followed.clear()
            self._by_key.clear()
            self._pidfd_of.clear()
            self._per_uid.clear()
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)

    def running(self) -> bool | None:
        """Whether the thread runs; None where it was not started (no fanotify)."""
        return None if self._thread is None else self._thread.is_alive()

    def followed(self) -> int:
        """How many processes are followed now (each holds one descriptor)."""
        with self._lock:
            return len(self._followed)

    def alive(self, dev: int, ino: int) -> bool:
        """Might a process that closed this inode after writing (in incoming/) still run?"""
        if self._thread is None:
            return False
        # The kernel queues the fanotify event in the same close() that queues inotify's
        # IN_CLOSE_WRITE; the scanner asks after handling the latter, so reading the queue
        # now makes sure the closer of a just-closed file is known (no race with our thread).
        if self._drain():
            self._poke()
        now = time.monotonic()
        with self._lock:
            if self._by_key.get((dev, ino)) or now < self._unknown_until:
                return True
            return now < self._unfollowed.get((dev, ino), 0.0)

    def _poke(self) -> None:
        with contextlib.suppress(OSError):  # a full pipe already says "look again"
            os.write(self._poke_w, b"x")

    def _run(self) -> None:
        # The only thread that closes a followed pidfd (besides stop(), after joining it):
        # a number closed while another thread polls it could be reused by any open.
        while not self._stop.is_set():
            timeout = self._release_expired()
            poller = select.poll()
            poller.register(self._fan, select.POLLIN)
            poller.register(self._poke_r, select.POLLIN)
            with self._lock:
                pidfds = list(self._followed)
            for pidfd in pidfds:
                poller.register(pidfd, select.POLLIN)
            for fd, events in poller.poll(None if timeout is None else max(1, int(timeout * 1000) + 1)):
                if fd == self._poke_r:
                    with contextlib.suppress(OSError):
                        os.read(self._poke_r, 4096)
                elif fd == self._fan:
                    self._drain()
                elif events & select.POLLIN:
                    self._release(fd, exited=True)  # a pidfd polls readable once its process has exited

    def _release_expired(self) -> float | None:
        """Stop following processes whose last close is older than the hold; seconds until the next expires."""
        now = time.monotonic()
        with self._lock:
            expired = [fd for fd, f in self._followed.items() if now - f.last_close >= self._hold]
            for key in [k for k, until in self._unfollowed.items() if until <= now]:
                del self._unfollowed[key]
        for pidfd in expired:
            self._release(pidfd, exited=False)
        with self._lock:
            ends = [f.last_close + self._hold for f in self._followed.values()]
            ends += self._unfollowed.values()
        return max(0.0, min(ends) - now) if ends else None

    def _release(self, pidfd: int, *, exited: bool) -> None:
        with self._lock:
            followed = self._followed.pop(pidfd, None)
            if followed is None:
                return
            del self._pidfd_of[followed.pid]
            self._per_uid[followed.uid] -= 1
            if self._per_uid[followed.uid] <= 0:
                del self._per_uid[followed.uid]
            for key in followed.keys:
                holders = self._by_key.get(key)
                if holders is not None:
                    holders.discard(pidfd)
                    if not holders:
                        del self._by_key[key]
        with contextlib.suppress(OSError):
            os.close(pidfd)
        if exited and followed.keys:
            self._on_change()

    def _drain(self) -> bool:
        """Read every queued event; True if a new process is now followed."""
        with self._read_lock:
            new = False
            while True:
                try:
                    data = os.read(self._fan, 64 * 1024)
                except (BlockingIOError, OSError):
                    return new
                new = self._handle(data) or new

    def _handle(self, data: bytes) -> bool:
        new = False
        offset = 0
        while offset + _METADATA.size <= len(data):
            length, _vers, _res, _mlen, _mask, fd, pid = _METADATA.unpack_from(data, offset)
            offset += length or _METADATA.size
            if fd < 0:
                # Queue overflow: some closes are unknown, so every close waits to settle.
                self._unknown(time.monotonic())
                continue
            try:
                st = os.fstat(fd)
                path = os.readlink(f"/proc/self/fd/{fd}")
            except OSError:
                continue
            finally:
                os.close(fd)  # fanotify opened the file for us; never keep it open
            if pid <= 0 or pid == os.getpid() or st.st_nlink == 0:
                continue  # not visible from our pid namespace; ourselves; or deleted already
            directory, _, name = path.rpartition("/")
            if directory != self._directory or not is_candidate_name(name):
                continue  # `.x.part` (renamed when done: that decides), or moved elsewhere already
            new = self._track(pid, (st.st_dev, st.st_ino)) or new
        return new

    def _unknown(self, now: float) -> None:
        with self._lock:
            self._unknown_until = now + self._hold

    def _track(self, pid: int, key: Key) -> bool:
        """Remember that ``pid`` closed ``key``; True if it is a new process to follow."""
        now = time.monotonic()
        with self._lock:
            if key not in self._by_key and len(self._by_key) + len(self._unfollowed) >= defaults.CLOSER_KEYS_MAX:
                self._unknown_until = now + self._hold
                return False
            known = self._pidfd_of.get(pid)
            if known is not None:
                # Still the same process: its pidfd has not polled readable (exited) yet.
                self._followed[known].keys.add(key)
                self._followed[known].last_close = now
                self._by_key.setdefault(key, set()).add(known)
                return False
            full = len(self._followed) >= self._max_total
        if full:
            return self._not_followed(key, now, None)
        try:
            pidfd = os.pidfd_open(pid)
        except OSError as exc:
            if exc.errno != errno.ESRCH:
                log.debug("pidfd_open(%d): %s", pid, exc)
            return False  # already gone: its close was its last word
        try:
            uid = os.stat(f"/proc/{pid}").st_uid  # the pidfd holds the pid: no reuse in between
        except OSError:
            os.close(pidfd)  # never polled: closing it here cannot hit the poll thread
            return False  # exited in between
        with self._lock:
            if len(self._followed) < self._max_total and self._per_uid[uid] < self._max_per_uid:
                self._followed[pidfd] = _Followed(uid, pid, now, {key})
                self._pidfd_of[pid] = pidfd
                self._per_uid[uid] += 1
                self._by_key.setdefault(key, set()).add(pidfd)
                return True
        os.close(pidfd)
        return self._not_followed(key, now, uid)

    def _not_followed(self, key: Key, now: float, uid: int | None) -> bool:
        """A close by a process beyond a cap: its file waits for the settle time."""
        with self._lock:
            self._unfollowed[key] = now + self._hold
            which = -1 if uid is None else uid
            tell = which not in self._capped_uids
            self._capped_uids.add(which)
        if tell:
            log.info(
                "fanotify: %s; closes beyond it wait for the settle time",
                f"{self._max_per_uid} processes of uid {uid} followed"
                if uid is not None
                else f"{self._max_total} processes followed",
            )
        return False
