"""Which entries of the state directories are one job's: the rules of finding a job by id.

A job's entry is named after its id and uid (fixed at its first claim), and how depends on
its state (state_listings.JOB_NAMES): ``retry/<due>-<prio>-<id>.<uid>``,
``running/<id>.<uid>.<token>``, ``done/``, ``failed/``, ``split/<id>.<uid>``. Ids may hold
dots and anyone may choose one, and uids are shown to every user (`status --json`), so a
name is an entry of job X only if its id and uid, read as every listing reads them, are
X's: never a prefix or suffix test alone (``running/intro.<uid>.x.<uid2>.<token>``, the
running job ``intro.<uid>.x`` of another user, starts with ``intro.<uid>.``).

Written here once, for the lookups that differ on purpose, by their parameters:

- :func:`spoolrender.ops.lookup.find_job` (``show``, ``retry``, ``cancel``, the Python API;
  serve's ``readmodel.find_entries`` and ``GET /jobs/ID`` are built on it): every entry of
  an id, any uid (``uid=None``: a re-run id has several), each state directory listed
  (:func:`list_job_entries`). A waiting file in incoming/ has no uid and its id may be in
  its contents: that part is find_job's own.
- :func:`spoolrender.hooks.plan.open_job_dir`: the one entry of a known id and uid, opened
  through the state directory's descriptor it was listed through (:func:`entry_names` with
  that descriptor's listing); where the name is the id and uid alone (done/, failed/,
  split/) it is opened by that name without a listing (done/ may hold a million entries).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from spoolrender.core.vocabulary import JobState
from spoolrender.spool.layout import SpoolLayout, final_name, list_names
from spoolrender.spool.state_listings import JOB_NAMES

# The job states, in the order a job's entries are listed (the order `show --json` has
# always given them in: ops.lookup.find_job).
JOB_STATES = tuple(JOB_NAMES)
# Where a job's entry is named by its id and uid alone (no due time, no token).
NAMED_BY_KEY = frozenset({JobState.SPLIT, JobState.DONE, JobState.FAILED})
# Where a retry/ name's id begins: after ``<due>-<prio>-`` (layout.RETRY_NAME: 13 and 4 digits).
_RETRY_ID_AT = len("0000000000000-0000-")


def is_entry_of(state: JobState, name: str, job_id: str, uid: str | None = None) -> bool:
    """Whether ``name`` in ``state``'s directory is an entry of job ``job_id`` (of uid ``uid``
    too, if given), its id and uid read as every listing reads them (JOB_NAMES)."""
    # The string test first: it rules out all but the id's entries without a regex (done/
    # may hold 100k entries, retry/ a backlog); the parse decides (the module's docstring).
    if not name.startswith(f"{job_id}.", _RETRY_ID_AT if state is JobState.RETRY else 0):
        return False
    m = JOB_NAMES[state].fullmatch(name)
    return m is not None and m.group("id") == job_id and (uid is None or m.group("uid") == uid)


def entry_names(state: JobState, job_id: str, uid: str | None, listing: Callable[[], Iterable[str]]) -> list[str]:
    """The names of job ``job_id``'s entries (of uid ``uid``, if given) in ``state``'s
    directory, in ``listing()``'s order. With a uid, in done/, failed/ or split/ that is
    the one name the id and uid make (whether it exists is the caller's open or stat to
    find out): nothing is listed. ``listing`` is the caller's, so that the names come from
    the directory descriptor it then opens them through."""
    if uid is not None and state in NAMED_BY_KEY:
        return [final_name(job_id, uid)]
    return [name for name in listing() if is_entry_of(state, name, job_id, uid)]


def list_job_entries(layout: SpoolLayout, job_id: str) -> list[tuple[JobState, str]]:
    """(state, name) of every entry of ``job_id`` (any uid) outside incoming/: the states in
    :data:`JOB_STATES` order, each one's names sorted."""
    found: list[tuple[JobState, str]] = []
    for state in JOB_STATES:
        listed = list_names(layout.state_dir(state))  # each just before it is filtered, as ever
        found.extend((state, name) for name in sorted(n for n in listed if is_entry_of(state, n, job_id)))
    return found
