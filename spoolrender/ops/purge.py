"""Forgetting finished jobs: ``spoolrender purge`` (by age, or named entries through
ops/bulk.py) and retention's limits (ops/retention.py), which delete done/ and failed/
entries the same one way, :func:`forget_finished`, and say what they kept and why.

Separate from ops/control.py (retry, cancel, pause: jobs moved between states, with their
records) because a purge moves nothing and decides no run: it removes whole finished
entries through their state directory's descriptor and releases a done job's id.
Outputs are never touched.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from spoolrender.config.spool_config import SpoolConfig
from spoolrender.core.vocabulary import JobState
from spoolrender.spool.clock import spool_time
from spoolrender.spool.ids import release_id
from spoolrender.spool.layout import FINAL_NAME, SpoolLayout
from spoolrender.spool.spooldir import DirHandle

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Purged:
    """What a purge did: the entries it removed (``state/name``) and the ones it could not
    remove, each with why (they are kept, their ids too; the purge went on past them)."""

    removed: tuple[str, ...] = ()
    kept: tuple[tuple[str, str], ...] = ()

    def __add__(self, other: Purged) -> Purged:
        # One record per entry: retention's count limit tries again what its age limit could
        # not remove (kept twice, it was counted twice), or removes it after all.
        removed = self.removed + other.removed
        kept: dict[str, str] = {}
        for entry, why in self.kept + other.kept:
            if entry not in removed:
                kept.setdefault(entry, why)
        return Purged(removed, tuple(kept.items()))


def purge(
    config: SpoolConfig,
    older_than: float,
    states: tuple[str, ...] = (JobState.DONE, JobState.FAILED),
    *,
    dry_run: bool = False,
) -> list[str]:
    """Delete finished jobs' records older than ``older_than`` seconds; returns the entries
    removed (:func:`purge_older` also tells which could not be)."""
    return list(purge_older(config, older_than, states, dry_run=dry_run).removed)


def purge_older(
    config: SpoolConfig,
    older_than: float,
    states: tuple[str, ...] = (JobState.DONE, JobState.FAILED),
    *,
    dry_run: bool = False,
) -> Purged:
    """Delete finished jobs' records older than ``older_than`` seconds.

    Age is the job directory's mtime (its last record was written just before it moved to
    done/ or failed/) against the spool filesystem's clock. Outputs are never touched. A
    purged job is forgotten: its id may be used again.
    """
    layout = SpoolLayout(config.spool)
    layout.check()
    now = spool_time(layout.private, "purge")
    purged = Purged()
    for state in states:
        # Through the state directory's descriptor: an entry is judged by its own mtime
        # (fstatat, never following a symlink) and removed without following one anywhere.
        with DirHandle.open(layout.state_dir(state)) as directory:
            old = []
            for name in directory.names():
                if name.startswith("."):
                    continue
                st = directory.try_stat(name)
                if st is not None and now - st.st_mtime >= older_than:
                    old.append(name)
            purged += _forget_all(layout, directory, state, old, dry_run=dry_run)
    return purged


def purge_beyond(config: SpoolConfig, state: str, keep: int, *, dry_run: bool = False) -> Purged:
    """Delete the records of ``state`` (done or failed) beyond the ``keep`` newest. Newest by
    the same age as :func:`purge` (the directory's mtime)."""
    layout = SpoolLayout(config.spool)
    layout.check()
    aged = []
    with DirHandle.open(layout.state_dir(state)) as directory:
        for name in directory.names():
            if name.startswith("."):
                continue
            st = directory.try_stat(name)
            if st is not None:
                aged.append((st.st_mtime, name))
        aged.sort(reverse=True)
        return _forget_all(layout, directory, state, [name for _, name in aged[keep:]], dry_run=dry_run)


def _forget_all(layout: SpoolLayout, directory: DirHandle, state: str, names: list[str], *, dry_run: bool) -> Purged:
    if dry_run:
        return Purged(tuple(f"{state}/{name}" for name in names))
    removed: list[str] = []
    kept: list[tuple[str, str]] = []
    for name in names:
        why = forget_finished(layout, directory, state, name)
        if why is None:
            removed.append(f"{state}/{name}")
        elif directory.try_stat(name) is not None:
            kept.append((f"{state}/{name}", why))
        # else: gone meanwhile (another purge, a retry): neither this purge's nor kept
    return Purged(tuple(removed), tuple(kept))


def forget_finished(layout: SpoolLayout, directory: DirHandle, state: str, name: str) -> str | None:
    """Delete one finished job's directory (``done/<name>`` or ``failed/<name>``): the one
    way purge and retention (spoolrender.ops.retention) forget a job.

    A done job's id reservation (spool/ids.py) goes with it, if it is still that job's: a purged
    job is forgotten, its id may be used again, and ids/ must not grow without bound
    either. (reserve_id would take a purged holder's reservation over anyway.) Returns
    why the entry could not be removed (None: removed); its id is then kept.
    """
    # Removed through the state directory's descriptor: never following a symlink anywhere,
    # iteratively (a tree of any depth). One entry that cannot be removed is reported and
    # left; it never stops a purge or retention.
    try:
        directory.rmtree(name)
    except OSError as exc:
        why = exc.strerror or str(exc)
        log.warning("could not remove %s/%s: %s", state, name, why)
        return why
    m = FINAL_NAME.fullmatch(name)
    if state == JobState.DONE and m is not None:
        release_id(layout, m.group("id"), m.group("uid"))
    return None
