"""The runner loop's sweep for split jobs: nothing waits for ever, nothing is left over.

A job waits in split/ until the runner that finishes its last chunk wakes it. A crash
between two steps (a chunk finished but its runner died before waking the job; a planner
killed before queueing every chunk) would leave it waiting for nobody, so every runner,
on each rescan, wakes a waiting job that

- has nothing left to wait for (every chunk done, or one failed for good), or a cancel;
- has a chunk that is neither waiting, running nor finished, a whole lease after its
  split was decided (the age of its last run record, by the spool filesystem's clock,
  so that short cron drains on any host agree): a planner queues its chunks in
  milliseconds, and a frozen one is outlived as a frozen owner is. Its next run queues
  the chunk again (a frozen planner that wakes up later may queue a second copy: the
  first copy to finish is the chunk, the other drops itself).

A job that ended (done/ or failed/) with its ledger still there (its runner died between
moving it and removing its chunks) has its chunk files and entries removed.
"""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path

from spoolrender import defaults
from spoolrender.chunks.ledger import chunk_states, read_plan
from spoolrender.chunks.moves import discard_chunks, parent_priority, waiting_for_nothing, wake_parent
from spoolrender.config.spool_config import SpoolConfig
from spoolrender.spool.chunk_names import STORE_DIR, ledger_dir, ledgers_root
from spoolrender.spool.clock import Clock
from spoolrender.spool.layout import FINAL_NAME, SpoolLayout, list_names
from spoolrender.spool.publish import remove_tree
from spoolrender.spool.spooldir import DirHandle, SpoolPathRefused

log = logging.getLogger(__name__)


class SplitSweeper:
    def __init__(self, layout: SpoolLayout, config: SpoolConfig, clock: Clock) -> None:
        self._layout = layout
        self._config = config
        self._clock = clock

    def sweep(self, fs_now: float | None) -> list[str]:
        """Wake the split jobs nobody else will wake; returns their entry names.

        ``fs_now``: the spool filesystem's clock (spoolrender.spool.clock.spool_now), or None.
        """
        woken = []
        try:
            split = DirHandle.open(self._layout.split)
        except FileNotFoundError:
            split = None  # optional: a spool that never split a job may lack it
        if split is not None:
            # The sweep's own reads of a listed entry go through split/'s descriptor
            # (spoolrender.spool.spooldir), never through the entry's name again.
            with split:
                woken = self._wake_stranded(split, fs_now)
        self._remove_ended()
        return woken

    def _wake_stranded(self, split: DirHandle, fs_now: float | None) -> list[str]:
        woken = []
        for key in split.names():
            m = FINAL_NAME.fullmatch(key)
            if m is None:
                continue
            now = self._clock.wall() if fs_now is None else fs_now
            why = self._why_wake(split, key, m.group("uid"), now)
            # Twice: a chunk that moves twice during one look (claimed, then finished) can
            # hide from it; nothing is woken on one look alone.
            if why is None or self._why_wake(split, key, m.group("uid"), now) is None:
                continue
            if wake_parent(self._layout, key, _priority_in(split, key), now):
                log.info("job %s: woken by the sweep: %s", m.group("id"), why)
                woken.append(key)
        return woken

    def _why_wake(self, split: DirHandle, key: str, uid: str, fs_now: float) -> str | None:
        try:
            job_dir = split.sub(key)
        except (FileNotFoundError, SpoolPathRefused):
            return None  # woken or ended meanwhile, or not a job directory (never followed)
        with job_dir:
            if job_dir.exists(defaults.CANCEL_FILENAME):
                return "cancel requested"
            plan = read_plan(self._layout, key)
            if plan is None:
                return "its chunk plan is gone"
            states = chunk_states(self._layout, self._config.output_root, key, uid, plan)
            if waiting_for_nothing(states):
                return "its chunks need nothing more"
            if not states.missing:
                return None
            age = _decided_for(job_dir.through, fs_now)
        if age is None or age < self._config.lease_seconds:
            return None
        shown = ", ".join(str(i + 1) for i in states.missing)
        return f"chunk(s) {shown} of {plan.count} neither waiting, running nor finished {age:.0f} s after the split"

    def _remove_ended(self) -> None:
        for key in list_names(ledgers_root(self._layout)):
            if key.startswith(".gone-"):  # a discard killed between its rename and its rmtree
                remove_tree(ledgers_root(self._layout) / key)
                discard_chunks(self._layout, self._config.output_root, key.removeprefix(".gone-").rsplit("-", 1)[0])
                continue
            if self._ended(key):
                log.info("%s: removing the chunks of an ended job", key)
                discard_chunks(self._layout, self._config.output_root, key)
        store = self._config.output_root / STORE_DIR
        for key in list_names(store):
            # Chunk files of an ended job whose ledger is gone (a chunk that finished late).
            if not os.path.lexists(ledger_dir(self._layout, key)) and self._ended(key):
                remove_tree(store / key)

    def _ended(self, key: str) -> bool:
        for state in ("done", "failed"):
            with DirHandle.open(self._layout.state_dir(state)) as held:  # fstatat, never followed
                if held.exists(key):
                    return True
        return False


def _priority_in(split: DirHandle, key: str) -> int:
    """parent_priority of split/``key``, read through split/'s descriptor."""
    try:
        with split.sub(key) as job_dir:
            return parent_priority(job_dir.through)
    except (OSError, SpoolPathRefused):
        return defaults.DEFAULT_PRIORITY  # as parent_priority of an unreadable one


def _decided_for(job_dir: Path, fs_now: float) -> float | None:
    """Seconds since the job's last run was decided, by the spool filesystem's clock."""
    newest = None
    try:
        runs = list(job_dir.glob("run-*.json"))
    except FileNotFoundError:
        # Moved on meanwhile (woken, ended) by another host: on a path-based mount (sshfs)
        # the directory held open is then gone from under its descriptor, and a listing
        # through /proc/self/fd/N says ENOENT (a full run's ERROR "spool trouble").
        return None
    for path in runs:
        with contextlib.suppress(OSError):
            mtime = path.stat().st_mtime
            newest = mtime if newest is None else max(newest, mtime)
    return None if newest is None else max(0.0, fs_now - newest)
