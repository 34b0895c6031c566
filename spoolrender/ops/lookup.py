"""Finding a job by id in any state, and describing it as data (`spoolrender show --json`;
its text for people is :mod:`spoolrender.cli.show_text`'s)."""

from __future__ import annotations

import contextlib
import json
import os
import stat
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePath
from typing import Any, TypeVar

from spoolrender import defaults
from spoolrender.config.queues import incoming_view
from spoolrender.config.spool_config import SpoolConfig
from spoolrender.errors import JobInvalid, JobMoving, JobNotFound
from spoolrender.jobfile import id_from_filename, is_candidate_name, parse_job, read_job_bytes
from spoolrender.ops.id_hints import id_hint
from spoolrender.ops.split_progress import chunk_progress
from spoolrender.spool.heartbeat import entry_token, read_heartbeat
from spoolrender.spool.job_entries import list_job_entries
from spoolrender.spool.layout import SpoolLayout, final_name
from spoolrender.spool.queue_dirs import entry_dir
from spoolrender.spool.records import attempts_used, read_runs
from spoolrender.spool.spooldir import DirHandle, SpoolPathRefused
from spoolrender.spool.state_listings import JOB_NAMES

# A claimed job's entry name in each state directory (spool/state_listings.JOB_NAMES), by state name.
PATTERNS = {state.value: pattern for state, pattern in JOB_NAMES.items()}
# The entry of an id that a person means first: a live one (re-runs), then the newest finished.
LIVE_STATES = ("running", "split", "retry", "incoming")

# The version of the job-detail document (`show --json`, GET /jobs/ID: job.schema.json),
# raised when a field is added; fields are never renamed or removed.
JOB_SCHEMA_VERSION = 1

T = TypeVar("T")
DirStamp = tuple[int, int, int] | None  # a directory's (inode, mtime_ns, ctime_ns); None: missing


@dataclass(frozen=True)
class Located:
    job_id: str
    state: str
    path: Path  # the incoming file, or the job directory: for messages, never re-resolved
    listed: str = ""  # its name as listed in its state directory (``urgent/a.yaml``); "": path's name

    @property
    def entry(self) -> str:
        return f"{self.state}/{self.path.name}"

    @property
    def name(self) -> str:
        return self.listed or self.path.name

    @property
    def state_dir(self) -> Path:
        return Path(*self.path.parts[: -len(Path(self.name).parts)])

    @property
    def uid(self) -> str | None:
        """The job's uid (fixed at its first claim); None while it waits in incoming/."""
        pattern = PATTERNS.get(self.state)
        m = pattern.fullmatch(self.path.name) if pattern is not None else None
        return m.group("uid") if m else None


@contextlib.contextmanager
def entry_holder(where: Located) -> Iterator[tuple[DirHandle, str]]:
    """The open directory that holds ``where`` and its name in it (spoolrender.spool.spooldir):
    its queue directory or incoming/ for a waiting file, its state directory for a job
    directory. A queue directory swapped for a symlink since the listing is refused."""
    with DirHandle.open(where.state_dir) as state_dir:
        if where.state == "incoming":
            with entry_dir(state_dir, where.name) as found:
                yield found
        else:
            yield state_dir, where.name


@contextlib.contextmanager
def job_dir_of(where: Located) -> Iterator[DirHandle]:
    """The job directory of a claimed entry, open (never through a symlink)."""
    with entry_holder(where) as (holder, name), holder.sub(name) as job_dir:
        yield job_dir


def read_job_file(where: Located, max_bytes: int) -> bytes:
    """The job file of an entry (the waiting file, or its job directory's job.yaml),
    read through descriptors; JobInvalid if it is not a readable regular file."""
    try:
        if where.state == "incoming":
            with entry_holder(where) as (holder, name):
                return read_job_bytes(holder.anchored(name), max_bytes)
        with job_dir_of(where) as job_dir:
            return read_job_bytes(job_dir.anchored(defaults.JOB_FILENAME), max_bytes)
    except (OSError, SpoolPathRefused) as exc:
        raise JobInvalid([f"job file: cannot open: {exc}"]) from exc


# A job file is UTF-8 (jobfile.load_yaml_mapping), so the only way its `id:` can spell
# an id without the id's plain bytes is an escape in a double-quoted string.
_ESCAPE = b"\\"


def incoming_id(config: SpoolConfig, where: Located) -> str:
    """The id a waiting file will get: its ``id:`` field, else its file name's stem."""
    try:
        data = read_job_file(where, config.max_job_bytes)
    except JobInvalid:
        return id_from_filename(where.path.name)
    return job_id_of(config, data, where.path.name)


def entry_mtime(where: Located) -> float | None:
    """The mtime of an entry (fstatat through its holder, never followed); None if gone."""
    try:
        with entry_holder(where) as (holder, name):
            return holder.stat(name).st_mtime
    except (OSError, SpoolPathRefused):
        return None


def job_id_of(config: SpoolConfig, data: bytes, name: str) -> str:
    """The id a runner gives job file ``data`` named ``name`` (an invalid one: its name's)."""
    try:
        return parse_job(data, name, config).id
    except JobInvalid as exc:
        # An invalid job is filed under its readable `id:` (see intake/scan.py): find it so.
        return exc.job_id or id_from_filename(name)


def incoming_has_id(config: SpoolConfig, path: Path, job_id: str) -> bool:
    """True if the waiting file ``path`` will get ``job_id``.

    Parsing every file of a 10k-file incoming/ takes seconds, so a file is parsed only if
    it can get that id: its name gives it, or its bytes hold the id's text or an escape
    that could spell it (ids are plain ASCII, see jobfile.ID_PATTERN).
    """
    named = id_from_filename(path.name) == job_id
    try:
        data = read_job_bytes(path, config.max_job_bytes)
    except (JobInvalid, OSError):
        return named  # unreadable: its id is its file name's
    if not named and job_id.encode() not in data and _ESCAPE not in data:
        return False
    return job_id_of(config, data, path.name) == job_id


def find_job(config: SpoolConfig, job_id: str, *, incoming: bool = True) -> list[Located]:
    """Every place a job with ``job_id`` is (several for re-runs and duplicates), oldest state first.

    ``incoming=False`` leaves incoming/ out: finding an id there may read every waiting
    file (seconds for a backlog of 10k), the other states are listings only.
    """
    layout = SpoolLayout(config.spool)
    layout.check()
    found = []
    with incoming_view(layout.incoming) as view:
        for name in sorted(view.names) if incoming else ():  # queue directories too
            # Not by name alone: an explicit `id:` may differ from the file name. Read
            # through the listing's descriptors.
            if is_candidate_name(PurePath(name).name) and incoming_has_id(config, view.anchored(name), job_id):
                path = layout.incoming / name  # spooldir: message only
                found.append(Located(job_id, "incoming", path, name))
    # Which names are the id's is spool/job_entries.py's (also the hooks' lookup of one job).
    for state, name in list_job_entries(layout, job_id):
        path = layout.state_dir(state) / name  # spooldir: message only (Located.path)
        found.append(Located(job_id, state.value, path, name))
    return found


def by_relevance(found: list[Located]) -> list[Located]:
    """A job's entries, the one a person means first: live ones, then the newest finished."""

    live = sorted((w for w in found if w.state in LIVE_STATES), key=lambda w: LIVE_STATES.index(w.state))
    finished = sorted((w for w in found if w.state not in LIVE_STATES), key=lambda w: entry_mtime(w) or 0.0)
    return live + finished[::-1]


def state_dir_stamps(layout: SpoolLayout) -> list[DirStamp]:
    """(inode, mtime, ctime) of every directory a job can be listed in: incoming/, its
    queue directories, and the state directories (None for one that is missing). A job
    moves by a rename, which changes the mtime and ctime of both directories it is in."""
    with incoming_view(layout.incoming) as view:
        stats: list[os.stat_result | None] = list(view.dir_stats())
    for state in PATTERNS:
        try:
            stats.append(os.stat(layout.state_dir(state)))
        except OSError:
            stats.append(None)
    return [None if st is None else (st.st_ino, st.st_mtime_ns, st.st_ctime_ns) for st in stats]


def _stood_still(
    before: list[tuple[int, int, int] | None], after: list[tuple[int, int, int] | None], since: float
) -> bool:
    """Whether no job can have moved between the state directories while they were listed
    (``since``: wall time before the first stamps). Unchanged stamps alone are not proof:
    a directory's timestamps come from a coarse clock (a rename in the same tick as the
    change before it leaves them equal), so a directory modified within
    ``defaults.DIR_STAMP_MARGIN_SECONDS`` of the lookup counts as changed too."""
    recent = int((since - defaults.DIR_STAMP_MARGIN_SECONDS) * 1e9)
    return before == after and all(s is None or s[1] < recent for s in after)  # a rename sets both times


def read_entry(
    job_id: str,
    lookup: Callable[[], list[Located]],
    read: Callable[[list[Located], Path], T],
    *,
    layout: SpoolLayout | None = None,
) -> tuple[list[Located], T] | None:
    """``lookup()`` (a job's entries, current first), then ``read(entries, through)``, as one snapshot.

    A job moves between states by renaming its directory while anyone may be reading it
    (running/ -> done/, retry/ -> running/), so reading it by path can end in
    FileNotFoundError or mix two states (runs read in running/, logs looked for after it
    left). So the current entry's directory is opened once and read through that open
    descriptor (``through``, a path that names the directory itself wherever it moves):
    whatever ``read`` sees is one directory. A read counts as current if the entry is still
    at its path afterwards; otherwise the job is looked up again, at most
    ``defaults.JOB_READ_ATTEMPTS`` times, and if it moved during every read the last one is
    returned: whole, in the state where it was opened. A lookup can miss a job that moves
    against the listing order (retry/ is listed after running/), so an empty lookup is
    tried again too, unless (with ``layout``: the spool looked in) no directory a job can
    be in changed during it: then nothing moved, and an unknown id is answered after one
    lookup instead of ``JOB_READ_ATTEMPTS`` (seconds each at 100k done). None: never found
    (JobNotFound for the caller to word); :class:`JobMoving`: found, but gone before each
    read could begin.
    """
    seen = False
    last: tuple[list[Located], T] | None = None
    for _ in range(defaults.JOB_READ_ATTEMPTS):
        since = time.time()
        stamps = None if layout is None else state_dir_stamps(layout)
        found = lookup()
        if not found:
            if layout is not None and _stood_still(stamps or [], state_dir_stamps(layout), since):
                break  # a consistent picture: the job is in none of them
            continue
        seen = True
        try:
            with _opened(found[0]) as (through, before):
                result = read(found, through)
        except (FileNotFoundError, NotADirectoryError, SpoolPathRefused):
            continue  # gone before it was opened, swapped, or an earlier entry of the id moved
        last = found, result
        if _identity(found[0]) == before:
            return last
    if last is not None:
        return last
    if seen:
        raise JobMoving(job_id, defaults.JOB_READ_ATTEMPTS)
    return None


@contextlib.contextmanager
def _opened(where: Located) -> Iterator[tuple[Path, tuple[int, int]]]:
    """A path to read ``where`` through, and the identity of the file it names.

    Through descriptors (spoolrender.spool.spooldir): a job directory is opened (never through a
    symlink) and read through /proc/self/fd/N, which names the open directory even after
    a rename; a waiting file through the open directory that holds it (a queue directory
    swapped since the listing is refused, so nothing outside the spool is ever read).
    """
    with entry_holder(where) as (holder, name):
        st = holder.try_stat(name)
        if st is None:
            raise FileNotFoundError(where.path)
        if where.state == "incoming" or not stat.S_ISDIR(st.st_mode):
            yield holder.anchored(name), (st.st_dev, st.st_ino)  # a stray entry: as it is
            return
        with holder.sub(name) as job_dir:
            st = os.fstat(job_dir.fd)
            yield job_dir.through, (st.st_dev, st.st_ino)


def _identity(where: Located) -> tuple[int, int] | None:
    """Which file ``where`` names now (never followed), or None."""
    try:
        with entry_holder(where) as (holder, name):
            st = holder.try_stat(name)
    except (OSError, SpoolPathRefused):
        return None
    return None if st is None else (st.st_dev, st.st_ino)


def show_document(config: SpoolConfig, job_id: str) -> dict[str, Any]:
    """The ``show --json`` object (job.schema.json): the current entry described, plus every
    entry of the id.

    ``schema`` is :data:`JOB_SCHEMA_VERSION`. ``entries`` lists each entry of the id (state,
    entry), current first, as ``GET /jobs/{id}`` does; ``others`` describes the entries other
    than the current one (earlier runs of a re-rendered id), so nothing the former list form
    held is lost.
    """

    def read(found: list[Located], through: Path) -> dict[str, Any]:
        info = {"schema": JOB_SCHEMA_VERSION, **describe(config, found[0], through)}
        info.update(timing(config, found[0], through))
        info["entries"] = [{"state": w.state, "entry": w.entry} for w in found]
        info["others"] = [describe(config, w) for w in found[1:]]
        return info

    snapshot = read_entry(
        job_id, lambda: by_relevance(find_job(config, job_id)), read, layout=SpoolLayout(config.spool)
    )
    if snapshot is None:
        raise JobNotFound(job_id, f"no job with id {job_id!r} in {config.spool}{id_hint(config.spool, job_id)}")
    return snapshot[1]


def timing(config: SpoolConfig, where: Located, through: Path) -> dict[str, Any]:
    """When a waiting or running job goes on: a retry's ``due`` (and ``due_in_seconds``),
    a running job's ``progress``, ``eta_seconds`` and ``stale``, as ``GET /jobs/{id}`` has
    them (the same ops/status.py items); ``{}`` for other states."""
    # Imported here: status reads heartbeats and runners, which `show` of a done job never needs.
    from spoolrender.ops.running_items import running_info
    from spoolrender.ops.status import retry_info, spool_clock

    layout = SpoolLayout(config.spool)
    if where.state == "retry":
        item = retry_info(where.path.name, spool_clock(layout)[1])
        return {} if item is None else {"due": item["due"], "due_in_seconds": item["due_in_seconds"]}
    if where.state == "running":
        now, fs_now = spool_clock(layout)
        item = running_info(where.path.name, through, now=now, fs_now=fs_now, lease_seconds=config.lease_seconds)
        return {key: item[key] for key in ("progress", "stage", "eta_seconds", "stale", "heartbeat_age_seconds")}
    return {}


def describe(config: SpoolConfig, where: Located, through: Path | None = None) -> dict[str, Any]:
    """Everything `show` prints about one job: state, attempts, runs, errors, logs, result.

    Read from ``through`` (:func:`read_entry`'s open directory: one snapshot of a job that
    moves while it is read). Without it, the entry's directory is opened through its state
    directory's descriptor (:func:`job_dir_of`, never by its path); one gone meanwhile is
    described by its state and path alone.
    """
    info: dict[str, Any] = {"id": where.job_id, "state": where.state, "path": str(where.path)}
    if where.state == "incoming":
        return info
    if through is None:
        try:
            with job_dir_of(where) as held:
                return describe(config, where, held.through)
        except (OSError, SpoolPathRefused):
            return info  # purged or moved on meanwhile
    job_dir = through
    runs = read_runs(job_dir)
    # The attempt being rendered counts: a job on its second try is at attempt 2, not 1.
    info["attempts"] = attempts_used(runs) + (1 if where.state == "running" else 0)
    info["runs"] = [r.__dict__ for r in runs]
    info["logs"] = sorted(str(where.path / p.name) for p in job_dir.glob("run-*.log"))
    # failure.json stays in the directory of a failed job that was retried, as history (its
    # runs say the same); it is the job's outcome only while the job is in failed/.
    outcomes = [(defaults.RESULT_FILENAME, "result")]
    if where.state == "failed":
        outcomes.append((defaults.FAILURE_FILENAME, "failure"))
    for name, key in outcomes:
        try:
            found = json.loads((job_dir / name).read_text())
        except OSError:
            continue  # none yet (a running job), or moved on meanwhile
        except ValueError:
            found = None
        if isinstance(found, dict):
            info[key] = found
        else:  # damaged (by hand, a full disk of an old version): say so, never a traceback
            info.setdefault("damaged", []).append(f"{name} is not a JSON object; its fields are not shown")
    if where.state in ("running", "retry", "split") and where.uid is not None:
        # A split job: its chunks' progress (spoolrender.chunks); chunks are never jobs.
        chunks = chunk_progress(SpoolLayout(config.spool), config.output_root, final_name(where.job_id, where.uid),
                                now=time.time())  # fmt: skip
        if chunks is not None:
            info["split"] = chunks
    if where.state == "running":
        # The token from the entry's name: ``job_dir`` may name the open descriptor instead.
        hb = read_heartbeat(job_dir, entry_token(where.path))
        info["heartbeat"] = None if hb is None else hb.__dict__
        info["cancel_requested"] = (job_dir / defaults.CANCEL_FILENAME).exists()
    return info
