"""When is a file in incoming/ a complete upload? Every signal the host offers, in order.

A file is claimed only when it is complete. The signals, and which one decides when:

1. The local writer check (:mod:`spoolrender.intake.upload_writers`: a read lease, else /proc) is
   authoritative for processes on this host: a file held open for writing is never
   complete, however long it has been quiet (``scp -l 100`` pauses for more than 20 s).
   It is asked here for every file that the other signals call complete, and once more by
   the runner just before the claim's rename.
2. inotify bookkeeping per name (watchdog's full events): modified (or created empty)
   means a writer is at work; a close-after-write or a rename into incoming/ means it
   finished; a non-empty creation with no write is a ``link()``, judged by time.
   Any modification after a close revokes it. A close is final only once every process
   seen closing the file after writing has exited (:mod:`spoolrender.intake.upload_closers`, fanotify,
   root only): ``printf ... > f; sleep 2; printf ... >> f`` closes ``f`` twice and its
   shell lives on in between. Without fanotify the close decides alone.
3. Files seen for the first time at start-up (a backlog, or a job ``submit`` renamed in
   before the runner started) are complete at once when the writer check proves that no
   local process writes them and the spool is on a local filesystem.
4. The settle time: size and mtime unchanged for ``settle_seconds`` (our monotonic clock,
   or the file's age by the spool filesystem's clock). On a network filesystem other
   hosts' writers are invisible to 1-3, and this is all there is (docs/reliability.md
   gives the measured quiet gaps of each client). A name that events say is being written
   while the writer check cannot tell (an unprivileged runner, another user's upload)
   waits for its close, for at most ``UNCLOSED_WRITE_S`` of quiet (a lost event).

Empty files are never complete before they are closed (or proven free) *and* settled, so
``rsync --inplace``'s long-empty file is not claimed; a closed, settled empty file is
claimed and failed with a clear reason.
"""

from __future__ import annotations

import enum
import threading
from dataclasses import dataclass

from spoolrender import defaults
from spoolrender.intake.upload_writers import Writer


class Activity(enum.Enum):
    """What inotify said about a name since it appeared in incoming/."""

    NONE = "none"  # no event (found by a listing: start-up, polling mode, lost events)
    CREATED = "created"  # created and nothing since: an empty file being opened, or a link()
    WRITING = "writing"  # modified, not closed since
    CLOSED = "closed"  # closed after writing, not modified since
    RENAMED = "renamed"  # renamed (or hard-linked and closed) into incoming/, whole


class UploadTracker:
    """Per-name event bookkeeping for incoming/, fed by the watcher's thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._activity: dict[str, Activity] = {}

    def note(self, name: str, event: str) -> None:
        """``event``: created, modified, closed (after writing) or moved_in."""
        with self._lock:
            if event == "moved_in":
                self._activity[name] = Activity.RENAMED
            elif event == "closed":
                self._activity[name] = Activity.CLOSED
            elif event == "created":
                self._activity[name] = Activity.CREATED
            elif event == "modified":
                # A modification after a close revokes completeness (``>`` then ``>>``).
                self._activity[name] = Activity.WRITING

    def activity(self, name: str) -> Activity:
        with self._lock:
            return self._activity.get(name, Activity.NONE)

    def forget(self, name: str) -> None:
        with self._lock:
            self._activity.pop(name, None)

    def retain(self, present: set[str]) -> None:
        with self._lock:
            for gone in [n for n in self._activity if n not in present]:
                del self._activity[gone]


@dataclass(frozen=True)
class Verdict:
    complete: bool
    why: str  # for the runner's debug log
    recheck_after: float | None = None  # seconds until this may change without an event


def judge(
    *,
    activity: Activity,
    writer: Writer,
    local: bool,
    empty: bool,
    settled: bool,
    quiet_for: float,
    at_startup: bool,
    closers_alive: bool,
    settle: float,
    recheck: float,
) -> Verdict:
    """Is one regular file in incoming/ complete? ``writer`` from :mod:`spoolrender.intake.upload_writers`.

    ``settled``: unchanged for the settle time; ``quiet_for``: seconds since it last
    changed; ``closers_alive``: a process that closed it after writing still runs.
    """
    if writer is Writer.HELD:
        return Verdict(False, "open for writing by a local process", recheck)
    # On a network filesystem "no local writer" says nothing about other hosts' writers.
    proven_free = writer is Writer.FREE and local
    # Written and not closed yet; or created empty (rsync --inplace creates the file and
    # writes nothing for seconds). A non-empty creation without writes is a link().
    in_progress = activity is Activity.WRITING or (activity is Activity.CREATED and empty)
    if in_progress and not proven_free:
        if quiet_for < defaults.UNCLOSED_WRITE_S:
            return Verdict(False, "being written (no close seen yet)", defaults.UNCLOSED_WRITE_S - quiet_for)
        return Verdict(settled, "written, never closed, quiet a long time")
    if empty:
        # Never complete before closed or proven free (checked above), and then settled.
        return Verdict(settled, "empty" if settled else "empty, settling", None if settled else settle - quiet_for)
    if activity is Activity.RENAMED:
        return Verdict(True, "renamed into incoming/")
    if activity is Activity.CLOSED:
        if not closers_alive:
            return Verdict(True, "closed after writing")
        if settled:
            return Verdict(True, "closed, its writer still runs, settled")
        return Verdict(False, "closed, but the process that wrote it still runs", recheck)
    if activity in (Activity.NONE, Activity.CREATED) and at_startup and proven_free:
        return Verdict(True, "found at start-up, no local writer")
    if settled:
        return Verdict(True, "settled")
    return Verdict(False, "settling", settle - quiet_for)
