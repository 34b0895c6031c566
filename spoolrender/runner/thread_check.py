"""Whether the runner's background threads still run: one that ended is said at once.

Each of them (the heartbeat, hook delivery, the spool watch, the slots) does a duty nobody
else does, and none of them is meant to end before the runner: a thread that did end (an
error it did not catch, such as the ENOTCONN that once escaped the heartbeat's look for a
cancel request) left the runner claiming jobs it no longer kept alive, and the only trace
was a traceback on stderr. The runner looks at every beacon (each heartbeat interval, and
while the spool fails); a thread found ended is logged as an ERROR, once. When the spool's
filesystem works again after trouble, one line names every thread and whether it runs: the
proof, in the log, that the trouble ended none of them.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

log = logging.getLogger(__name__)


class ThreadCheck:
    """Tells of the runner's threads that ended (each once) and, after spool trouble, of all."""

    def __init__(self) -> None:
        self._ended: set[str] = set()  # told already
        self._trouble = False  # the spool was in trouble at the last look

    def look(self, alive: Mapping[str, bool], *, trouble: bool) -> list[str]:
        """``alive``: each thread's name and whether it runs; ``trouble``: whether the spool's
        filesystem fails now. The names of the threads that have ended."""
        ended = sorted(name for name, running in alive.items() if not running)
        for name in ended:
            if name not in self._ended:
                log.error("the runner's %s thread has ended: its work is not done any more (a bug: "
                          "restart the runner, and report it)", name)  # fmt: skip
        self._ended = set(ended)
        if self._trouble and not trouble:
            if ended:
                log.error("after the spool I/O trouble, thread(s) %s have ended; running: %s",
                          ", ".join(ended), ", ".join(sorted(set(alive) - set(ended))) or "none")  # fmt: skip
            else:
                log.info("after the spool I/O trouble, every thread of this runner runs: %s", ", ".join(sorted(alive)))
        self._trouble = trouble
        return ended
