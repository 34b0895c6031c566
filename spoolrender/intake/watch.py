"""Filesystem events that wake the runner early. They are hints, never the truth.

The runner always decides from a directory listing; an event only means "look now".
Missed events (other NFS clients' writes are invisible to inotify; watchdog's queue can
overflow) cost at most one rescan interval. On network filesystems inotify sees nothing
of other hosts' writes, so "auto" picks watchdog's polling observer there.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import watchdog.events
from watchdog.events import (
    DirCreatedEvent,
    DirDeletedEvent,
    DirMovedEvent,
    FileClosedEvent,
    FileCreatedEvent,
    FileDeletedEvent,
    FileModifiedEvent,
    FileMovedEvent,
    FileSystemEvent,
    FileSystemEventHandler,
    FileSystemMovedEvent,
)
from watchdog.observers.inotify import InotifyObserver
from watchdog.observers.polling import PollingObserver

from spoolrender import defaults

log = logging.getLogger(__name__)

# The events the spool's watches ask for: everything but opens and closes without writing
# (FileOpenedEvent, FileClosedNoWriteEvent), which the kernel then does not even queue.
# Those are the runner's own reads of incoming/ (the scan's, the claim's: about six per
# job) and say nothing of an upload, yet each crossed watchdog's three threads and woke
# the runner's loop for a pass (bench/README.md, "P2 queue overhead").
# Nor a directory's "modified" (DirModifiedEvent), which watchdog adds for the directory
# beside every creation, deletion and rename in it: the file's own event says it.
# A change of attributes (watchdog >= 5 tells it apart from a write) still wakes, as before.
SPOOL_EVENTS: list[type[FileSystemEvent]] = [
    FileCreatedEvent, DirCreatedEvent, FileModifiedEvent, FileClosedEvent,
    FileMovedEvent, DirMovedEvent, FileDeletedEvent, DirDeletedEvent,
    *(getattr(watchdog.events, name) for name in ("FileAttribEvent", "DirAttribEvent")
      if hasattr(watchdog.events, name)),
]  # fmt: skip
# The pause marker is made (renamed into place) and removed: the clock probes every runner
# rewrites beside it in .spoolrender/ (an open, a write and a close each pass) are not asked for.
PAUSE_MARKER_EVENTS: list[type[FileSystemEvent]] = [
    FileCreatedEvent, FileMovedEvent, FileDeletedEvent, DirCreatedEvent, DirMovedEvent, DirDeletedEvent,
]  # fmt: skip

NETWORK_FILESYSTEMS = frozenset(
    {"nfs", "nfs4", "cifs", "smb3", "smbfs", "9p", "ceph", "glusterfs", "lustre", "gpfs", "afs",
     "fuse.sshfs", "fuse.glusterfs", "fuse.cephfs", "fuse.bindfs", "fuse.s3fs", "davfs"}
)  # fmt: skip


def mount_of(path: Path) -> tuple[Path | None, str]:
    """The mount point and fstype of the mount holding ``path`` (longest mountpoint prefix
    wins); (None, "unknown") if none is listed."""
    real = os.path.realpath(path)
    best, fstype = "", "unknown"
    for part in psutil.disk_partitions(all=True):
        mp = part.mountpoint
        if (real == mp or real.startswith(mp.rstrip("/") + "/")) and len(mp) > len(best):
            best, fstype = mp, part.fstype
    return (Path(best) if best else None), fstype


def filesystem_type(path: Path) -> str:
    """The fstype of the mount holding ``path``."""
    return mount_of(path)[1]


def is_network_filesystem(path: Path) -> bool:
    """True if other hosts (or a FUSE server) may write ``path``'s files behind our back."""
    fstype = filesystem_type(path)
    # Any FUSE filesystem too (some report plain "fuse"): whatever serves it may change
    # files behind the kernel's back, where inotify sees nothing.
    return fstype in NETWORK_FILESYSTEMS or fstype == "fuse" or fstype.startswith("fuse.")


def choose_watch_mode(mode: str, spool: Path) -> str:
    if mode != "auto":
        return mode
    return "polling" if is_network_filesystem(spool) else "inotify"


class _Wake(FileSystemEventHandler):
    def __init__(
        self,
        wake: threading.Event,
        on_event: Callable[[str, str], None],
        incoming: Path,
        retry: Path,
        *,
        writes: bool,
    ) -> None:
        self._wake = wake
        self._on_event = on_event
        self._incoming = os.fsdecode(incoming)
        self._retry = os.fsdecode(retry)
        self._writes = writes

    def on_any_event(self, event: FileSystemEvent) -> None:
        # Per name in incoming/: created and modified mean a writer is at work, closed
        # (after writing) and renamed-in that it finished (spoolrender.intake.completeness keeps the
        # books). Renames *out* (claims), deletions, opens and closes without writing are
        # not news: our own reads produce those. Only inotify reports writes and closes
        # as they happen; the polling observer's "created"/"modified" are diffs of two
        # listings with no close to follow, so there they only wake the runner.
        if isinstance(event, FileSystemMovedEvent):
            path, kind = os.fsdecode(event.dest_path), "moved_in"
            if not path:
                # A rename out of the watched directories (a claim: into running/): nothing
                # arrived, and each claim's wake-up was a pass of the loop for nothing.
                return
        elif isinstance(event, FileClosedEvent):
            path, kind = os.fsdecode(event.src_path), "closed"
        elif isinstance(event, FileCreatedEvent | DirCreatedEvent):
            path, kind = os.fsdecode(event.src_path), "created"
        elif isinstance(event, FileModifiedEvent):
            path, kind = os.fsdecode(event.src_path), "modified"
        else:
            path, kind = "", ""
        parent = os.path.dirname(path)
        if parent == self._incoming or (path and os.path.dirname(parent) == self._incoming):
            # incoming/<name>, or incoming/<queue>/<name> in a queue directory (config/queues.py)
            name = os.path.relpath(path, self._incoming)
            if kind == "moved_in" or self._writes:
                self._on_event(name, kind)
            else:
                self._on_event("", "")
        elif parent == self._retry:
            self._on_event("", "")
        self._wake.set()


def _no_move_pairing_delay() -> None:
    """Stop watchdog from holding every IN_MOVED_FROM for 0.5 s.

    watchdog keeps each rename *out* of a directory (every claim is one) at the head of
    its event queue for 0.5 s, hoping to pair it with a rename *in*, and every event
    behind it waits too: a job dropped just after a claim was seen up to 0.5 s late
    (bench/claim_latency.py: p99 463 ms, 4.6 ms without the delay). Events here only wake
    the runner, which then reads the directory, so pairing buys nothing.
    """
    try:
        from watchdog.observers.inotify_move_event_grouper import InotifyMoveEventGrouper
    except ImportError:  # pragma: no cover - another watchdog layout: keep its default
        return
    InotifyMoveEventGrouper.delay = 0.0


class SpoolWatcher:
    """Watches incoming/ (and its queue directories) and retry/; sets ``wake`` on any change."""

    def __init__(self, mode: str, poll_seconds: float) -> None:
        self.mode = mode
        if mode == "polling":
            self._observer: Any = PollingObserver(timeout=poll_seconds)
        else:
            _no_move_pairing_delay()
            # Full events: a rename into incoming/ from elsewhere arrives as a move (an
            # upload that is complete), not as a plain creation that must settle.
            self._observer = InotifyObserver(generate_full_events=True)

    def start(self, incoming: Path, retry: Path, wake: threading.Event, on_event: Callable[[str, str], None]) -> None:
        dirs = [incoming, retry]
        handler = _Wake(wake, on_event, incoming, retry, writes=self.mode != "polling")
        for d in dirs:
            # incoming/ recursively: its queue directories (config/queues.py) are drop targets too.
            self._observer.schedule(handler, os.fspath(d), recursive=d == incoming, event_filter=SPOOL_EVENTS)
        self._observer.daemon = True
        self._observer.start()
        log.debug("watching %s with %s", ", ".join(map(str, dirs)), self.mode)

    def watch_pause_marker(self, private: Path, wake: threading.Event) -> None:
        """Also wake on `pause`/`resume`: the marker appearing in or leaving ``private``.

        The same observer (so the polling mode notices at its next poll); only events
        naming the marker wake, not the clock probes every runner rewrites there.
        """
        self._observer.schedule(
            _PauseMarkerWake(wake), os.fspath(private), recursive=False, event_filter=PAUSE_MARKER_EVENTS
        )

    def stop(self) -> None:
        self._observer.stop()
        self._observer.join(timeout=5)

    def running(self) -> bool:
        """Whether the observer and each watch's emitter run (watchdog 6's polling emitter
        ended at the first failed listing: pyproject.toml asks for 7)."""
        return bool(self._observer.is_alive() and all(e.is_alive() for e in self._observer.emitters))


class _PauseMarkerWake(FileSystemEventHandler):
    def __init__(self, wake: threading.Event) -> None:
        self._wake = wake

    def on_any_event(self, event: FileSystemEvent) -> None:
        paths = [event.src_path, getattr(event, "dest_path", "")]
        if any(os.path.basename(os.fsdecode(p)) == defaults.PAUSE_FILENAME for p in paths if p):
            self._wake.set()
