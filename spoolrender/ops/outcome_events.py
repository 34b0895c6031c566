"""Waking :meth:`spoolrender.api.Job.wait` when a job may have reached done/ or failed/."""

from __future__ import annotations

import os
import threading

from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers.inotify import InotifyObserver

from spoolrender.config.spool_config import SpoolConfig
from spoolrender.intake.watch import choose_watch_mode
from spoolrender.spool.layout import SpoolLayout


class OutcomeEvents(FileSystemEventHandler):
    """An event set when anything changes in done/ or failed/: wait() looks at once.

    Only a hint, as for the runner (:mod:`spoolrender.intake.watch`): the listing decides, and
    the poll in wait() stays the safety net. inotify only where the spool is local; on a
    network filesystem it would miss other hosts' moves, so there wait() just polls.
    """

    def __init__(self, config: SpoolConfig) -> None:
        self._event = threading.Event()
        self._observer: InotifyObserver | None = None
        if choose_watch_mode(config.watch, config.spool) == "inotify":
            layout = SpoolLayout(config.spool)
            self._observer = InotifyObserver()
            for directory in (layout.done, layout.failed):
                self._observer.schedule(self, os.fspath(directory), recursive=False)

    def on_any_event(self, event: FileSystemEvent) -> None:
        self._event.set()

    def __enter__(self) -> threading.Event:
        if self._observer is not None:
            self._observer.daemon = True
            try:
                self._observer.start()
            except OSError:  # out of inotify watches or instances: polling is enough
                self._observer = None
        return self._event

    def __exit__(self, *exc: object) -> None:
        if self._observer is not None:
            self._observer.stop()
            self._observer.join(timeout=5)
