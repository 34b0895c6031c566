"""The runner's slots as threads kept for the runner's life, one per slot, handed one job at a time.

A new thread per job cost the claiming loop (the runner's main thread, which every claim
waits on) a ``clone``, a stack mapping and the start handshake of ``Thread.start`` (it
blocks until the new thread runs): about a tenth of the loop's time with no-op jobs
(bench/README.md, "P2 queue overhead"). A kept thread takes its next job from a queue
instead, and the loop does not wait for it.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

log = logging.getLogger(__name__)

Job = TypeVar("Job")


class SlotThread(Generic[Job]):
    """The thread of one slot: runs ``work(job)`` for each job given to :meth:`hand`, in turn,
    then sets the job's ``done`` event and calls ``finished()``.

    For one thread (the runner's loop) handing jobs over; the runner gives a slot its next
    job only once the last one's ``done`` is set. ``done`` is set before ``finished`` runs,
    so a loop that ``finished`` wakes sees the slot free (with a thread per job, the loop
    could wake before the thread had ended, and wait a whole pass for the slot).
    """

    def __init__(self, name: str, work: Callable[[Job], None], finished: Callable[[], None]) -> None:
        self.name = name
        self._work = work
        self._finished = finished
        self._jobs: queue.SimpleQueue[tuple[Job, threading.Event] | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None

    def hand(self, job: Job, done: threading.Event) -> None:
        """Run ``job`` on this slot's thread; ``done`` is set once ``work(job)`` has returned."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name=self.name, daemon=True)
            self._thread.start()
        self._jobs.put((job, done))

    def running(self) -> bool | None:
        """Whether the thread runs; None before the slot's first job (it starts then)."""
        return None if self._thread is None else self._thread.is_alive()

    def stop(self) -> None:
        """End the thread once its job (if any) is done, and wait for it."""
        if self._thread is None:
            return
        self._jobs.put(None)
        self._thread.join()
        self._thread = None

    def _loop(self) -> None:
        while (item := self._jobs.get()) is not None:
            job, done = item
            try:
                self._work(job)
            except BaseException:
                # The work catches what a job can raise; anything else must not end the
                # slot's thread (the next job handed over would wait for ever).
                log.exception("%s: uncaught error", self.name)
            finally:
                done.set()
                self._finished()
