"""Crash points for the reliability tests: SIGKILL this process at a named step.

``SPOOLRENDER_CRASH_AT=<name>`` makes the first pass through :func:`crash_point` with that
name kill the process with SIGKILL, exactly as a power cut or the OOM killer would, at
the worst moments of the protocol (between a decision and the move that carries it out,
between publishing an output and recording it, ...). Unset, a call costs one dict lookup.
The names are listed in :data:`CRASH_POINTS`; tests/reliability/ kills at each of them.
"""

from __future__ import annotations

import os
import signal

CRASH_POINTS = (
    "claim-before-rename",  # incoming claim: running/ dir, lock and heartbeat made, file not yet moved
    "claim-after-rename",  # incoming claim: job file moved into running/
    "retry-claim-after-rename",  # retry claim: directory moved, no lock or heartbeat yet
    "after-decide",  # a run's outcome recorded, job not moved yet
    "after-publish",  # output linked into place, job not yet in done/
    "after-move",  # job directory renamed, directories not yet fsynced
)

_TARGET = os.environ.get("SPOOLRENDER_CRASH_AT")


def crash_point(name: str) -> None:
    if _TARGET is not None and name == _TARGET:
        os.kill(os.getpid(), signal.SIGKILL)
