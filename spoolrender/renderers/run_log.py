"""A run's log, written line by line by the thread that reads a render's output.

That thread must read on whatever the log does: a render whose output is not read blocks
on a full pipe and never ends, and the Remotion worker's reader also hands the render its
events (progress, the frame that finished the render). A write that fails (the job's
directory is on the spool, which may be full, or cut off: ENOTCONN) raised out of the
worker's reader, which ended: that render waited for its timeout and every later one of
the warm worker too. Here a failed write costs lines of the log, never the thread, and
once writes work again the log says where and why. (Which lines: those of the failed
writes, unless the file object's buffer kept them for the next write that worked.)
"""

from __future__ import annotations

import os
from typing import IO


class RunLogLines:
    """Appends lines to an open log file; a write that fails is counted, not raised."""

    def __init__(self, fh: IO[bytes]) -> None:
        self._fh = fh
        self.failures = 0  # writes that failed since the last one that worked
        self._why = ""

    def write(self, data: bytes) -> bool:
        """Write ``data`` (after a note of the writes that failed before it, if any); False if it failed."""
        note = b""
        if self.failures:
            text = f"--- writing this log failed {self.failures} time(s) here ({self._why}): lines may be missing\n"
            note = text.encode()
        try:
            self._fh.write(note + data)
            self._fh.flush()
        except OSError as exc:
            self.failures += 1
            self._why = os.strerror(exc.errno) if exc.errno else str(exc)
            return False
        self.failures = 0
        return True
