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

from spoolrender.chunks.naming import is_chunk_name
from spoolrender.layout import FINAL_NAME, RETRY_NAME, RUNNING_NAME, SpoolLayout, list_names
from spoolrender.vocabulary import JobState

# retry/ both first and last: see the module's docstring (ids.py looks a job up so too).
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


def list_job_states(layout: SpoolLayout) -> dict[str, list[str]]:
    """The job entries of every state directory but incoming/, each job once (the module's
    docstring), unsorted. Two entries of one id and uid that no moves explain (done/ and
    failed/: copied there by hand) are both kept, as listed. Dot-names (temporary files,
    uploads) and chunk entries (parts of a job in split/: spoolrender.chunks) are never jobs;
    a name of no job's form is kept where it was listed."""
    where: dict[tuple[str, str], tuple[JobState, str]] = {}  # (id, uid) -> (state, name) of its last listing
    listing: dict[str, dict[str, None]] = {state.value: {} for state in LISTING_ORDER}  # as an ordered set
    for state in LISTING_ORDER:
        for name in list_names(layout.state_dir(state)):
            if name.startswith(".") or is_chunk_name(name):
                continue
            m = JOB_NAMES[state].fullmatch(name)
            if m is None:
                listing[state][name] = None
                continue
            job = m.group("id"), m.group("uid")
            before = where.pop(job, None)  # re-inserted: the dict's order stays the listings'
            if before is not None and (before[0], state) not in EXPLAINED:
                listing[before[0]][before[1]] = None
            where[job] = (state, name)
    for found_in, name in where.values():
        listing[found_in][name] = None
    return {state: list(names) for state, names in listing.items()}
