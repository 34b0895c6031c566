"""Retry, cancel or delete many chosen jobs at once, or say first what that would do.

The dashboard's bulk actions (``POST /bulk``, ``DELETE /jobs/ID`` of :mod:`spoolrender.serve`)
and ``spoolrender purge ID...`` come here; every change is made by the one function the
single-job commands use (:mod:`spoolrender.ops.control`: ``retry_entries`` and
``make_entries_due_now`` as ``retry``, ``cancel_entry`` as ``cancel`` (through
``cancel_listed``: the entries listed only); :mod:`spoolrender.ops.purge`:
``forget_finished`` as ``purge`` and retention), so a bulk action never does anything a single one would not.

A selection is a list of :class:`Target` entries (a job id and the entry it was found
at), from ids (:func:`locate`: one listing of every state, not one search per id) or from
a filtered listing (the server's :mod:`.serve.browse`). :func:`plan` sorts them into what
the action would change and what it leaves (with why): a dry run answers that plan; a
real run carries it out and answers what happened, entries that moved meanwhile included.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import PurePath
from typing import Any

from spoolrender import defaults
from spoolrender.config.queues import incoming_view
from spoolrender.config.spool_config import SpoolConfig
from spoolrender.jobfile import is_candidate_name
from spoolrender.ops.control import cancel_listed, make_entries_due_now, retry_entries
from spoolrender.ops.lookup import LIVE_STATES, PATTERNS, Located, incoming_id
from spoolrender.ops.purge import forget_finished
from spoolrender.spool.chunk_names import is_chunk_name
from spoolrender.spool.layout import SpoolLayout, list_names
from spoolrender.spool.spooldir import DirHandle, SpoolPathRefused


class BulkAction(StrEnum):
    RETRY = "retry"
    CANCEL = "cancel"
    DELETE = "delete"


FINISHED_STATES = ("done", "failed")
# What an action does to an entry of each state it applies to (a state not named: nothing).
EFFECTS: dict[BulkAction, dict[str, str]] = {
    BulkAction.RETRY: {
        "failed": "back to retry/ with fresh attempts",
        "retry": "made due now (attempts kept)",
    },
    BulkAction.CANCEL: {
        "incoming": "failed as cancelled",
        "retry": "failed as cancelled",
        "running": "its runner is asked to stop it, then it is failed as cancelled",
        "split": "its chunks stop, then it is failed as cancelled",
    },
    BulkAction.DELETE: {
        "done": "its record is deleted (outputs are kept; the id may be used again)",
        "failed": "its record is deleted (the id may be used again)",
    },
}
MOVED_ON = "moved on meanwhile: left as it is"
NOTHING_TO_DO = {
    BulkAction.RETRY: "nothing to retry (only failed or retry-waiting jobs)",
    BulkAction.CANCEL: "nothing to cancel (it is finished)",
    BulkAction.DELETE: "still queued or running: cancel it first (only finished jobs are deleted)",
}


@dataclass(frozen=True)
class Target:
    """One entry of a chosen job: ``name`` as listed in ``state``'s directory."""

    job_id: str
    state: str
    name: str

    def __post_init__(self) -> None:
        if self.state not in defaults.STATE_DIRS:
            raise ValueError(f"not a state: {self.state!r}")

    @property
    def entry(self) -> str:
        return f"{self.state}/{self.name}"


@dataclass(frozen=True)
class BulkItem:
    """What happened (or would happen) to one entry, or why a job was left alone."""

    job_id: str
    state: str
    entry: str | None
    text: str

    def to_json(self) -> dict[str, Any]:
        return {"id": self.job_id, "state": self.state, "entry": self.entry, "text": self.text}


@dataclass(frozen=True)
class BulkResult:
    action: BulkAction
    dry_run: bool
    acted: tuple[BulkItem, ...]  # entries changed (or, in a dry run, to be changed)
    skipped: tuple[BulkItem, ...]  # jobs left alone, with why
    missing: tuple[str, ...]  # ids chosen that no entry has

    @property
    def jobs(self) -> int:
        """How many jobs the action changes (one job may have several entries)."""
        return len({item.job_id for item in self.acted})

    def summary(self) -> str:
        """``would retry 3 job(s) (2 failed, 1 retry); 1 left alone, 1 not found`` for people."""
        by_state: dict[str, int] = {}
        for item in self.acted:
            by_state[item.state] = by_state.get(item.state, 0) + 1
        states = ", ".join(f"{n} {s}" for s, n in sorted(by_state.items()))
        text = f"{'would ' if self.dry_run else ''}{self.action.value} {self.jobs} job(s)"
        text += f" ({states})" if states else ""
        if self.skipped:
            text += f"; {len(self.skipped)} left alone"
        if self.missing:
            text += f", {len(self.missing)} not found"
        return text

    def to_json(self) -> dict[str, Any]:
        return {
            "action": self.action.value,
            "dry_run": self.dry_run,
            "jobs": self.jobs,
            "summary": self.summary(),
            "acted": [i.to_json() for i in self.acted],
            "skipped": [i.to_json() for i in self.skipped],
            "missing": list(self.missing),
        }


def locate(config: SpoolConfig, ids: Iterable[str], *, every_incoming: bool = False) -> tuple[list[Target], list[str]]:
    """Every entry of the jobs ``ids``, and the ids not found, from one listing per state.

    incoming/ files are read (an explicit ``id:`` may differ from the file name) only when
    an id is not found in any other state, unless ``every_incoming`` (a delete: a finished
    job queued again there keeps its records): a bulk retry or cancel of failed jobs never
    reads a backlog of waiting files.
    """
    wanted = dict.fromkeys(ids)  # ordered, without repeats
    layout = SpoolLayout(config.spool)
    layout.check()
    targets = []
    for state, pattern in PATTERNS.items():
        for name in sorted(list_names(layout.state_dir(state))):
            if name.startswith(".") or is_chunk_name(name):
                continue  # a chunk entry is a part of a split job, never a job
            m = pattern.fullmatch(name)
            if m is not None and m.group("id") in wanted:
                targets.append(Target(m.group("id"), state, name))
    unfound = set(wanted) if every_incoming else set(wanted) - {t.job_id for t in targets}
    if unfound:
        with incoming_view(layout.incoming) as view:  # queue directories too
            names = sorted(view.names)
        for name in names:
            if is_candidate_name(PurePath(name).name):
                where = Located("", "incoming", layout.incoming / name, name)  # spooldir: message only
                job_id = incoming_id(config, where)
                if job_id in unfound:
                    targets.append(Target(job_id, "incoming", name))
    found = {t.job_id for t in targets}
    return targets, [i for i in wanted if i not in found]


def plan(action: BulkAction, targets: Sequence[Target], missing: Sequence[str] = ()) -> BulkResult:
    """What ``action`` would do to ``targets``: per entry it applies to, and per job it leaves alone."""
    effects = EFFECTS[action]
    by_job: dict[str, list[Target]] = {}
    for target in targets:
        by_job.setdefault(target.job_id, []).append(target)
    acted, skipped = [], []
    for job_id, entries in by_job.items():
        live = [t for t in entries if t.state in LIVE_STATES]
        # A job queued or running again (a re-run) keeps its finished records until it is done.
        chosen = [] if action is BulkAction.DELETE and live else [t for t in entries if t.state in effects]
        if chosen:
            acted += [BulkItem(job_id, t.state, t.entry, effects[t.state]) for t in chosen]
        else:
            states = ", ".join(sorted({t.state for t in entries}))
            skipped.append(BulkItem(job_id, states, None, f"is {states}: {NOTHING_TO_DO[action]}"))
    return BulkResult(action, True, tuple(acted), tuple(skipped), tuple(missing))


def carry_out(config: SpoolConfig, planned: BulkResult, who: str) -> BulkResult:
    """Do what ``planned`` (a dry run's :func:`plan`) says; the answer says what was done.

    An entry that moved on since it was listed (claimed, finished, retried by someone
    else) is left as it now is and reported among the skipped.
    """
    action = planned.action
    acted: list[BulkItem] = []
    gone: list[BulkItem] = []
    if action is BulkAction.RETRY:
        failed = [i.entry.removeprefix("failed/") for i in planned.acted if i.entry and i.state == "failed"]
        waiting = [i.entry.removeprefix("retry/") for i in planned.acted if i.entry and i.state == "retry"]
        changes = {c.entry: c.text for c in (retry_entries(config, failed) if failed else [])}
        changes.update({c.entry: c.text for c in (make_entries_due_now(config, waiting) if waiting else [])})
        for item in planned.acted:
            text = changes.get(item.entry or "")
            if text is None:
                gone.append(BulkItem(item.job_id, item.state, item.entry, MOVED_ON))
            else:
                acted.append(BulkItem(item.job_id, item.state, item.entry, text))
    elif action is BulkAction.CANCEL:
        # Only the entries listed, never every entry of their ids: a file dropped with a
        # running job's `id:` must not make "cancel all incoming" stop that render.
        layout = SpoolLayout(config.spool)
        for item in planned.acted:
            name = (item.entry or "").removeprefix(f"{item.state}/")
            # The entry is reached by its state's directory and name (cancel_entry), the path is for messages.
            state_dir = layout.state_dir(item.state)
            where = Located(item.job_id, item.state, state_dir / name, name)  # spooldir: message only
            lines = cancel_listed(config, where, who)
            if not lines:  # claimed by a runner, finished or gone: not chased
                gone.append(BulkItem(item.job_id, item.state, item.entry, MOVED_ON))
            acted += [BulkItem(item.job_id, item.state, item.entry, line) for line in lines]
    else:
        acted, gone = _delete(config, planned.acted)
    return BulkResult(action, False, tuple(acted), planned.skipped + tuple(gone), planned.missing)


def _delete(config: SpoolConfig, items: Sequence[BulkItem]) -> tuple[list[BulkItem], list[BulkItem]]:
    layout = SpoolLayout(config.spool)
    deleted, gone = [], []
    for state in FINISHED_STATES:
        chosen = [i for i in items if i.state == state and i.entry]
        if not chosen:
            continue
        # Through the state directory's descriptor, as purge: never following a symlink.
        with DirHandle.open(layout.state_dir(state)) as directory:
            for item in chosen:
                name = (item.entry or "").removeprefix(f"{state}/")
                try:
                    present = directory.try_stat(name) is not None
                except SpoolPathRefused:
                    present = False
                if not present:
                    gone.append(BulkItem(item.job_id, state, item.entry, "gone meanwhile"))
                    continue
                why = forget_finished(layout, directory, state, name)
                if why is not None:
                    gone.append(BulkItem(item.job_id, state, item.entry, f"could not delete its record: {why}"))
                    continue
                deleted.append(BulkItem(item.job_id, state, item.entry, "record deleted"))
    return deleted, gone


def bulk_action(
    config: SpoolConfig, action: BulkAction, targets: Sequence[Target], missing: Sequence[str] = (), *,
    dry_run: bool, who: str,
) -> BulkResult:  # fmt: skip
    """:func:`plan`, then (unless ``dry_run``) :func:`carry_out`.

    A delete first looks for the chosen jobs' live entries too: ``targets`` from a filter
    (``state: done``) or from :func:`locate` name only what was chosen, and a job queued or
    running again must keep its finished records (see :func:`plan`)."""
    if action is BulkAction.DELETE and targets:
        found, _ = locate(config, dict.fromkeys(t.job_id for t in targets), every_incoming=True)
        chosen = set(targets)
        targets = [*targets, *(t for t in found if t.state in LIVE_STATES and t not in chosen)]
    planned = plan(action, targets, missing)
    return planned if dry_run else carry_out(config, planned, who)
