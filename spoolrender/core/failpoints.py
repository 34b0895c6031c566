"""Crash and pause points for the reliability tests: SIGKILL or SIGSTOP this process at a named step.

``SPOOLRENDER_CRASH_AT=<name>`` makes the first pass through :func:`crash_point` with that
name kill the process with SIGKILL, exactly as a power cut or the OOM killer would, at
the worst moments of the protocol (between a decision and the move that carries it out,
between publishing an output and recording it, ...).

``SPOOLRENDER_PAUSE_AT=<name>[,<name>...]`` makes the first pass through each named point
stop the whole process with SIGSTOP, as a VM pause, a swap storm or a hung NFS server
would: a test can then let other runners act and wake it with SIGCONT, to force the
interleavings that a kill cannot (a late claimer, a recoverer racing a stalled claim).

Unset, a call costs one dict lookup. The names are listed in :data:`CRASH_POINTS`;
tests/reliability/ kills and pauses at them.
"""

from __future__ import annotations

import os
import signal
import threading

CRASH_POINTS = (
    "first-beat-before-link",  # incoming claim: first beat written into its new lock file, not yet linked
    "claim-before-rename",  # incoming claim: running/ dir, lock and heartbeat made, file not yet moved
    "claim-after-rename",  # incoming claim: job file moved into running/ as submitted.yaml, no copy yet
    "copy-before-commit",  # a claim's private copy written under its temporary name, not yet job.yaml
    "retry-claim-after-rename",  # retry claim: directory moved, no lock or heartbeat yet
    "after-decide",  # a run's outcome recorded, job not moved yet
    "after-publish",  # output linked into place, job not yet in done/
    "after-move",  # job directory renamed, directories not yet fsynced
)
# Points of the render cache, reached only by jobs that use it (tests/reliability/test_render_cache_crash.py).
CACHE_POINTS = (
    "cache-after-hold",  # the key's in-flight claim taken, nothing rendered yet
    "cache-after-store",  # a render stored in the cache at its publish decision, not yet published
    "cache-after-hit",  # a hit linked and verified into scratch, the run not yet decided
)
# The steps of a split job (spoolrender.chunks); reached only by a job rendered in chunks.
CHUNK_CRASH_POINTS = (
    "after-plan",  # chunk plan written into the ledger, split not yet decided
    "split-after-decide",  # split decided, job not yet in split/
    "after-split-move",  # job in split/, its chunks not yet queued
    "chunk-after-decide",  # a chunk's outcome recorded, nothing moved yet
    "chunk-after-store",  # a chunk's files in the store, its entry not yet finished
    "chunk-after-finish",  # a chunk's entry in the ledger's finished/, its job not yet woken
    "after-wake",  # the job woken into retry/ by its last chunk
    "join-before-verify",  # the chunks joined into scratch, not yet verified or decided
)
# The start-up probes (spoolrender.runner.fscheck): every probe file made, none removed yet.
FSCHECK_POINTS = ("fscheck-spool", "fscheck-output-root")
# Points only reached in a race that a dedicated test sets up (paused or killed there).
RACE_POINTS = (
    "abandoned-claim-before-remove",  # recovery judged a running/ entry without job.yaml abandoned
    "abandoned-claim-parked",  # that entry renamed into .spoolrender/abandoned/, not yet cleared
    "id-holder-lookup",  # reserve_id: between listing two state directories for the holder
    "retry-claim-before-copy",  # retry claim of an entry without a private copy (older or discarded): none made yet
    "discard-before-decide",  # a discarded run's copy removed, its requeue not yet recorded
    "id-moved-aside",  # an id reservation renamed into ids/.aside/, not yet re-created or put back
    "retention-lease-taken",  # a runner holds the retention lease, nothing purged yet
    "beacon-before-replace",  # a runner's beacon written under its temporary name, not yet renamed
)

_TARGET = os.environ.get("SPOOLRENDER_CRASH_AT")
_PAUSE = {name for name in os.environ.get("SPOOLRENDER_PAUSE_AT", "").split(",") if name}
_paused: set[str] = set()
_pause_lock = threading.Lock()


def crash_point(name: str) -> None:
    if _TARGET is not None and name == _TARGET:
        os.kill(os.getpid(), signal.SIGKILL)
    if _PAUSE and name in _PAUSE:
        with _pause_lock:
            first = name not in _paused
            _paused.add(name)
        if first:
            os.kill(os.getpid(), signal.SIGSTOP)
