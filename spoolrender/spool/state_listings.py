"""Every job of a spool in the state it is in, from listings taken while jobs move.

Listing the state directories one after another is no snapshot: a job moves (one rename)
while they are listed. In the order `status`, its metrics, the event stream and
``GET /jobs`` used before (incoming, running, retry, done, failed, split), a job claimed
from retry/ between the running/ and the retry/ listings is in neither (it vanishes: one
job short in the counts, and a ``removed`` event followed by its "new" appearance in the
event stream); so is a job woken from split/ into retry/, or sent back from failed/ by
`spoolrender retry`; and a run that ends after running/ was listed shows its job twice,
running and done (and the event stream then says ``removed`` for the running entry). So:

- the job states are listed in :data:`LISTING_ORDER`: retry/ first and last, each
  directory a job moves out of before every one it moves into (retry -> running; running
  -> retry, split, done, failed; split -> retry; failed -> retry), so a job that makes one
  move while they are listed is in one listing or the other, never in none;
- a job found in two listings (by its id and uid, fixed at its first claim) is counted
  once, in the later: that is where its moves took it (when moves can take it there: one,
  or several in a row, as `spoolrender cancel` of a waiting job claims and fails it in a
  few milliseconds, and a quick job is claimed and run to its end while done/ is listed).
  Only a job found in done/ and then again is listed twice: nothing moves out of done/,
  so that is a copy (made by hand), not a move.

incoming/ is the callers' (its queue directories and files need their own reads), and is
listed before these: a claim moves a job from there into running/. A job seen in both
during a claim is counted in each (no uid to tell it by); the event stream tells the claim
seen half-way as one move.
"""

from __future__ import annotations

import re

from spoolrender.core.vocabulary import JobState
from spoolrender.spool.chunk_names import CHUNK_MARK
from spoolrender.spool.layout import FINAL_NAME, RETRY_NAME, RUNNING_NAME, TOKEN_HEX, SpoolLayout, list_names
from spoolrender.spool.spooldir import DirHandle, SpoolPathRefused

# retry/ both first and last: see the module's docstring (spool/ids.py looks a job up so too).
LISTING_ORDER = (JobState.RETRY, JobState.RUNNING, JobState.SPLIT, JobState.DONE, JobState.FAILED, JobState.RETRY)
JOB_NAMES = {
    JobState.RUNNING: RUNNING_NAME, JobState.RETRY: RETRY_NAME, JobState.SPLIT: FINAL_NAME,
    JobState.DONE: FINAL_NAME, JobState.FAILED: FINAL_NAME,
}  # fmt: skip
# The moves (from, to) a job makes between them, one rename each: a claim, a run's end, a
# split job woken for its join, `spoolrender retry` of a failed job or of a waiting one
# (made due now: renamed within retry/).
MOVES = frozenset({
    (JobState.RETRY, JobState.RUNNING), (JobState.RUNNING, JobState.RETRY), (JobState.RUNNING, JobState.SPLIT),
    (JobState.RUNNING, JobState.DONE), (JobState.RUNNING, JobState.FAILED), (JobState.SPLIT, JobState.RETRY),
    (JobState.FAILED, JobState.RETRY), (JobState.RETRY, JobState.RETRY),
})  # fmt: skip


def _reachable(moves: frozenset[tuple[JobState, JobState]]) -> frozenset[tuple[JobState, JobState]]:
    """Every (from, to) that one or more of ``moves`` in a row lead along."""
    pairs = set(moves)
    while grown := {(a, d) for a, b in pairs for c, d in pairs if b == c} - pairs:
        pairs |= grown
    return frozenset(pairs)


# A job seen in one listing and then in a later one made these moves in between: two or
# more are no rarer than one while a long listing (done/ at a million entries) is taken.
EXPLAINED = _reachable(MOVES)
# The end of an <id>.<uid> name (FINAL_NAME), matched where it must start: no scan of the id.
_UID_TAIL = re.compile(rf"\.[0-9a-f]{{{TOKEN_HEX}}}\Z")
_UID_TAIL_LENGTH = 1 + TOKEN_HEX


def list_job_states(layout: SpoolLayout) -> dict[str, list[str]]:
    """The job entries of every state directory but incoming/, each job once (the module's
    docstring), unsorted. Two entries of one id and uid that no moves explain (done/ and
    failed/: copied there by hand) are both kept, as listed. Dot-names (temporary files,
    uploads) and chunk entries (parts of a job in split/: spoolrender.chunks) are never jobs;
    a name of no job's form is kept where it was listed.

    At a million done jobs this is `status`'s and ``GET /jobs``' biggest cost, so no name of
    done/ is parsed or remembered: an entry of split/, done/ or failed/ is named by its key
    (``<id>.<uid>``), and nothing moves out of done/, so only the few jobs found before it
    (in retry/, running/, split/) are looked for in its listing."""
    listed: dict[JobState, list[str]] = {}  # as listed (retry/: both listings)
    where: dict[str, tuple[JobState, str]] = {}  # "<id>.<uid>" -> its entry where last found, if it can move on
    dropped: dict[JobState, set[str]] = {}  # entries of jobs found again later, where their moves took them
    for state in LISTING_ORDER:
        # CHUNK_MARK tested inline, not by is_chunk_name: a call per name is 0.03 s of CPU at 1M done.
        names = [n for n in list_names(layout.state_dir(state)) if n[:1] != "." and CHUNK_MARK not in n]
        listed.setdefault(state, []).extend(names)
        for key, name in _job_keys(state, names, where):
            before = where.pop(key, None)
            if before is not None and before != (state, name) and (before[0], state) in EXPLAINED:
                dropped.setdefault(before[0], set()).add(before[1])
            if (again := dropped.get(state)) is not None:
                again.discard(name)  # found here again (retry/ is listed twice)
            if state is not JobState.DONE:
                where[key] = (state, name)
    result = {}
    for state, names in listed.items():
        if state is JobState.RETRY:
            names = list(dict.fromkeys(names))  # listed twice
        gone = dropped.get(state)
        result[state.value] = [n for n in names if n not in gone] if gone else names
    return result


def _job_keys(state: JobState, names: list[str], where: dict[str, tuple[JobState, str]]) -> list[tuple[str, str]]:
    """(key, name) of each of ``names`` (listed in ``state``) that is a job's entry: all of
    them, but of done/ only those of jobs found before (the rest need no key)."""
    if state is JobState.DONE:
        # None found before (a spool at rest): no pass over done/'s names at all.
        return [(key, key) for key in where.keys() & names] if where else []
    if JOB_NAMES[state] is FINAL_NAME:
        return [(n, n) for n in names if len(n) > _UID_TAIL_LENGTH and _UID_TAIL.match(n, len(n) - _UID_TAIL_LENGTH)]
    return [(f"{m.group('id')}.{m.group('uid')}", n) for n in names if (m := JOB_NAMES[state].fullmatch(n))]


def find_moved(layout: SpoolLayout, key: str) -> tuple[str, str] | None:
    """Where job ``key`` (``<id>.<uid>``), seen moving on from a listing, is now, without
    listing done/ again: its entry in done/, failed/ or split/ (named by its key: one
    fstatat each, through the directory's descriptor) or else in retry/ or running/ (a few
    entries, listed); ``(state, name)``, or None in none of them (purged, or moving on
    again: the next look finds it)."""
    for state in (JobState.DONE, JobState.FAILED, JobState.SPLIT):
        try:
            with DirHandle.open(layout.state_dir(state)) as held:
                if held.exists(key):
                    return state.value, key
        except (OSError, SpoolPathRefused):
            continue
    for state in (JobState.RETRY, JobState.RUNNING):
        for name in list_names(layout.state_dir(state)):
            if (m := JOB_NAMES[state].fullmatch(name)) and f"{m.group('id')}.{m.group('uid')}" == key:
                return state.value, name
    return None
