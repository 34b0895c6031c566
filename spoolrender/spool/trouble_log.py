"""A background task's trouble in the log: once when it starts, reminders, once when it ends.

A thread that tries again after each failure (hook dispatch every ``rescan_seconds``,
`serve`'s event stream every poll) and logs each one floods the log while its spool is
unreachable: a GlusterFS client cut off for 20 s wrote an ERROR line every pass. The
runner's own spool trouble has :class:`spoolrender.spool.io_trouble.SpoolIOCondition`, which also
pauses claiming; this is the same account of it for a task that only has to say so: one
line when the trouble starts (the error in full), a reminder at most every
``TROUBLE_REMINDER_S`` (or at once if the error changes: another errno or exception), and
one line when the task works again. A trouble that does not pass is thus never silent.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from spoolrender import defaults
from spoolrender.errors import SpoolrenderError


def _kind(exc: BaseException) -> tuple[str, int | None]:
    # What makes a failure "another" error: its type and errno, not its text, which names
    # the file tried (a pass that fails on a new name each time is the same trouble).
    return type(exc).__name__, exc.errno if isinstance(exc, OSError) else None


class TroubleLog:
    """The log lines of one task's trouble (thread-safe): :meth:`failed` after each failed
    try, :meth:`succeeded` after each one that worked."""

    def __init__(
        self,
        logger: logging.Logger,
        what: str,
        *,
        level: int = logging.ERROR,
        remind_s: float = defaults.TROUBLE_REMINDER_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._log = logger
        self._what = what  # "hooks: dispatching": the task, as the lines name it
        self._level = level  # of the first line; reminders are warnings, the end is info
        self._remind_s = remind_s
        self._clock = clock
        self._lock = threading.Lock()
        self._since: float | None = None  # monotonic: the trouble started then (None: no trouble)
        self._kind: tuple[str, int | None] | None = None
        self._failures = 0
        self._next_reminder = 0.0

    @property
    def active(self) -> bool:
        return self._since is not None

    def failed(self, exc: BaseException) -> None:
        """A try failed with ``exc``: logged if the trouble starts, changes or is due a reminder."""
        now = self._clock()
        with self._lock:
            started = self._since is None
            if started:
                self._since, self._failures = now, 0
            self._failures += 1
            changed = _kind(exc) != self._kind
            self._kind = _kind(exc)
            remind = not started and (changed or now >= self._next_reminder)
            if started or remind:
                self._next_reminder = now + self._remind_s
            failures, lasted = self._failures, now - (self._since or now)
        if started or (changed and remind):
            # A failure that is not the filesystem's or ours (a bug) comes with its traceback.
            expected = isinstance(exc, OSError | SpoolrenderError)
            self._log.log(self._level, "%s failed: %s; trying again (said again every %g s while it fails)",
                          self._what, exc, self._remind_s, exc_info=None if expected else exc)  # fmt: skip
        elif remind:
            self._log.warning("%s still fails: %s (%d failure(s) in %.0f s)", self._what, exc, failures, lasted)

    def succeeded(self) -> None:
        """A try worked: the trouble (if any) is over, and the log says so once."""
        with self._lock:
            if self._since is None:
                return
            failures, lasted = self._failures, self._clock() - self._since
            self._since, self._kind = None, None
        self._log.info("%s works again after %.0f s (%d failure(s))", self._what, lasted, failures)
