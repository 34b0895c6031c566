"""Who closed a file in incoming/ after writing it, and does that process still run?

inotify says *that* a file was closed after writing, not by whom, and a close is not the
end of an upload when the same process opens the file again: ``printf a > f; sleep 2;
printf b >> f`` closes ``f`` twice from one shell that lives on in between. fanotify
reports the pid with each close-after-write; a pidfd then tells us, without polling and
without being fooled by pid reuse, when that process has exited. A file closed after
writing counts as complete (:mod:`spoolrender.intake`) once every process that closed it
has exited: sftp-server, rsync, cp and a script all exit right after their last close,
while a long-lived writer (a daemon writing in place) waits for the settle time.

fanotify needs CAP_SYS_ADMIN (root): as root this is on; an unprivileged runner, as
contrib's systemd unit runs it, goes without, and a close decides alone there
(docs/reliability.md says what that leaves open). Only with inotify watching (a local
filesystem): other hosts' closes never reach this kernel.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import logging
import os
import select
import struct
import threading
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger(__name__)

_FAN_CLASS_NOTIF = 0x0
_FAN_CLOEXEC = 0x1
_FAN_NONBLOCK = 0x2
_FAN_MARK_ADD = 0x1
_FAN_CLOSE_WRITE = 0x8
_FAN_EVENT_ON_CHILD = 0x0800_0000
_AT_FDCWD = -100
_METADATA = struct.Struct("=IBBHQii")  # event_len, vers, reserved, metadata_len, mask, fd, pid
_MAX_TRACKED = 10_000  # inodes remembered at most (a long-lived writer of many files)

Key = tuple[int, int]  # st_dev, st_ino


class CloserTracker:
    """Follows close-after-write events in one directory and their processes' lives."""

    def __init__(self, on_change: Callable[[], None]) -> None:
        self._on_change = on_change
        self._lock = threading.Lock()
        self._by_pidfd: dict[int, set[Key]] = {}
        self._pidfd_of: dict[int, int] = {}  # pid -> its pidfd while it runs
        self._by_key: dict[Key, set[int]] = {}
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
            fds = [self._fan, self._poke_r, self._poke_w, *self._by_pidfd]
            self._by_pidfd.clear()
            self._by_key.clear()
            self._pidfd_of.clear()
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)

    def alive(self, dev: int, ino: int) -> bool:
        """Does a process that closed this inode after writing (in incoming/) still run?"""
        if self._thread is None:
            return False
        # The kernel queues the fanotify event in the same close() that queues inotify's
        # IN_CLOSE_WRITE; the scanner asks after handling the latter, so reading the queue
        # now makes sure the closer of a just-closed file is known (no race with our thread).
        if self._drain():
            self._poke()
        with self._lock:
            return bool(self._by_key.get((dev, ino)))

    def _poke(self) -> None:
        with contextlib.suppress(OSError):  # a full pipe already says "look again"
            os.write(self._poke_w, b"x")

    def _run(self) -> None:
        while not self._stop.is_set():
            poller = select.poll()
            poller.register(self._fan, select.POLLIN)
            poller.register(self._poke_r, select.POLLIN)
            with self._lock:
                pidfds = list(self._by_pidfd)
            for pidfd in pidfds:
                poller.register(pidfd, select.POLLIN)
            for fd, _ in poller.poll():
                if fd == self._poke_r:
                    with contextlib.suppress(OSError):
                        os.read(self._poke_r, 4096)
                elif fd == self._fan:
                    self._drain()
                else:
                    self._exited(fd)  # a pidfd polls readable once its process has exited

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
                continue  # queue overflow: the settle time covers what we missed
            try:
                st = os.fstat(fd)
            finally:
                os.close(fd)  # fanotify opened the file for us; never keep it open
            if pid <= 0 or pid == os.getpid():
                continue  # not visible from our pid namespace; or ourselves
            new = self._track(pid, (st.st_dev, st.st_ino)) or new
        return new

    def _track(self, pid: int, key: Key) -> bool:
        """Remember that ``pid`` closed ``key``; True if it is a new process to follow."""
        with self._lock:
            known = self._pidfd_of.get(pid)
            if known is not None:
                # Still the same process: its pidfd has not polled readable (exited) yet.
                self._by_pidfd[known].add(key)
                self._by_key.setdefault(key, set()).add(known)
                return False
        try:
            pidfd = os.pidfd_open(pid)
        except OSError as exc:
            if exc.errno != errno.ESRCH:
                log.debug("pidfd_open(%d): %s", pid, exc)
            return False  # already gone: its close was its last word
        with self._lock:
            self._pidfd_of[pid] = pidfd
            self._by_pidfd[pidfd] = {key}
            self._by_key.setdefault(key, set()).add(pidfd)
            while len(self._by_key) > _MAX_TRACKED:
                oldest = next(iter(self._by_key))
                for fd in self._by_key.pop(oldest):
                    self._by_pidfd.get(fd, set()).discard(oldest)
        return True

    def _exited(self, pidfd: int) -> None:
        with self._lock:
            keys = self._by_pidfd.pop(pidfd, set())
            for pid in [p for p, fd in self._pidfd_of.items() if fd == pidfd]:
                del self._pidfd_of[pid]
            for key in keys:
                holders = self._by_key.get(key)
                if holders is not None:
                    holders.discard(pidfd)
                    if not holders:
                        del self._by_key[key]
        with contextlib.suppress(OSError):
            os.close(pidfd)
        if keys:
            self._on_change()
