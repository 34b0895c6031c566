"""Browsing a state of the spool: its entries in order, filtered, without re-reading them all.

A page of ``GET /jobs`` starts from the directory listing (as ``status`` does), never from
an index that could disagree with the spool. What a listing cannot tell (when a job
finished, what kind of error failed it) is read once per entry and kept in a
:class:`JobIndex` for the server's lifetime: a done or failed entry never changes, a
retry entry gets a new name for each attempt, so a cached fact is never stale, and the
cache forgets names that left the listing. A server reads every finished job's time once
at start (:meth:`JobIndex.warm`, in a thread); later pages only stat what is new.

A job's queue and ``requires:`` tags (:meth:`JobIndex.route`): for a claimed job, what its
last routed run recorded; else as a runner reads them (intake/scan.py, intake/retry_scan.py): the drop directory
(incoming/<queue>/, kept as ``queue`` in a claimed job's directory), else the job file's
``queue:`` field, else ``default``. A job file that does not parse has no known tags, and
a queue only if it was dropped into a queue directory.

A job's composition and props (:meth:`JobIndex.content`, for the ``composition`` and
``props`` filters): read from its job file once per entry (per version of a waiting file),
as the validated job has them; a job file that does not parse matches neither filter.
The props are searched as their JSON text (keys sorted, ``"key": "value"``), in any case.

Order: incoming by name, running by name (id), retry by name (due time first), done and
failed newest first (by the time their result or failure was written). Times: incoming
queued (file mtime), running started (its heartbeat), retry due, done/failed finished.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePath

from spoolrender import defaults
from spoolrender.config.queues import QUEUE_FILENAME, list_incoming, name_problem, queue_dir_of, route
from spoolrender.config.spool_config import SpoolConfig
from spoolrender.errors import JobInvalid
from spoolrender.jobfile import JobSpec, is_candidate_name, parse_job, read_job_bytes
from spoolrender.ops.lookup import PATTERNS, Located, entry_holder
from spoolrender.serve.readmodel import ApiError, is_private
from spoolrender.spool.heartbeat import entry_token, read_heartbeat
from spoolrender.spool.layout import RETRY_NAME, SpoolLayout, list_names
from spoolrender.spool.records import read_runs
from spoolrender.spool.spooldir import DirHandle, SpoolPathRefused
from spoolrender.spool.state_listings import list_job_states

MAX_QUERY_LENGTH = 200
# The file whose mtime says when an entry got into its state (written just before the move).
STAMP_FILE = {"done": defaults.RESULT_FILENAME, "failed": defaults.FAILURE_FILENAME}
KIND_STATES = ("retry", "failed")  # the states whose entries carry an error kind


@dataclass(frozen=True)
class Filters:
    """What a client narrows a listing to; every field optional."""

    text: str | None = None  # a substring of the id (in incoming/: of the file name), any case
    kind: str | None = None  # the error kind (retry and failed entries)
    since: float | None = None  # the entry's time (see :meth:`JobIndex.time`), inclusive
    until: float | None = None
    queue: str | None = None  # the job's queue (see :meth:`JobIndex.route`)
    composition: str | None = None  # a substring of the composition id, any case
    props: str | None = None  # a substring of the props' JSON text, any case
    # Whether composition/props may match private jobs (readmodel.is_private): with the token only.
    see_private: bool = False

    def __post_init__(self) -> None:
        for name, value in (("q", self.text), ("composition", self.composition), ("props", self.props)):
            if value is not None and (len(value) > MAX_QUERY_LENGTH or not value.isprintable()):
                raise ApiError(400, f"{name}: at most {MAX_QUERY_LENGTH} printable characters")
        if self.kind is not None and (len(self.kind) > 100 or not self.kind.isprintable()):
            raise ApiError(400, "kind: at most 100 printable characters")
        if self.queue is not None and (why := name_problem("queue", self.queue)) is not None:
            raise ApiError(400, f"queue: {why}")
        if self.since is not None and self.until is not None and self.until < self.since:
            raise ApiError(400, "until is before since")

    @property
    def timed(self) -> bool:
        return self.since is not None or self.until is not None

    @property
    def by_content(self) -> bool:
        return self.composition is not None or self.props is not None


def state_listings(layout: SpoolLayout) -> dict[str, list[str]]:
    """Every state's entries as listed (as `status`, minus its per-file reads): what a page
    of ``GET /jobs`` and a bulk action's filter start from."""
    # Queue directories too, as `<queue>/<name>` (counted per job, as status counts them).
    # Listed first: a claim moves a job from here into running/ (spool/state_listings.py).
    listing = {"incoming": [n for n in list_incoming(layout.incoming) if is_candidate_name(PurePath(n).name)]}
    # Each job once, however it moves meanwhile; chunk entries and dot-names are never jobs.
    listing.update(list_job_states(layout))
    return {s: listing[s] for s in defaults.STATE_DIRS}


def name_id(state: str, name: str) -> str:
    """The job id an entry name carries (in incoming/: the file name)."""
    m = PATTERNS[state].fullmatch(name) if state in PATTERNS else None
    return m.group("id") if m else name


@dataclass(frozen=True)
class JobRoute:
    """An entry's queue and the runner tags it requires, as far as they are known."""

    queue: str | None  # None: an unparsable job file outside any queue directory
    requires: tuple[str, ...] | None  # None: the job file does not parse
    # Read with them from the same parse (it costs nothing more): when a scheduled job is due.
    not_before: float | None = None


@dataclass(frozen=True)
class JobContent:
    """What an entry's job file asks to render, in the lower case the filters compare."""

    composition: str | None  # None: no composition (a command job) or a job file that does not parse
    props: str | None  # the props' JSON text; None: the job file does not parse

    def matches(self, filters: Filters) -> bool:
        for needle, hay in ((filters.composition, self.composition), (filters.props, self.props)):
            if needle is not None and (hay is None or needle.lower() not in hay):
                return False
        return True


UNREADABLE = JobContent(None, None)


def _content_of(spec: JobSpec) -> JobContent:
    props = json.dumps(spec.props, sort_keys=True, ensure_ascii=False, default=str)
    return JobContent(spec.composition.lower() if spec.composition else None, props.lower())


def _version(holder: DirHandle, base: str) -> tuple[int, float]:
    """A waiting job file's version (it may still change: an upload), to key what was read."""
    st = holder.stat(base)
    return st.st_size, st.st_mtime


def _decided_route(job_dir: Path) -> JobRoute | None:
    """The route the job's last run recorded (what its runner decided; cheaper than parsing
    the job file, and right even if a later spoolrender.yaml would refuse the file)."""
    with contextlib.suppress(OSError):
        for run in reversed(read_runs(job_dir)):  # a run refused before routing has none
            if isinstance(run.details.get("queue"), str):
                return JobRoute(run.details["queue"], tuple(str(t) for t in run.details.get("requires") or ()))
    return None


def _entered(state: str, holder: DirHandle, base: str) -> float | None:
    """When the entry ``base`` in the open ``holder`` entered ``state`` (see JobIndex.time)."""
    if state == "running":
        # The directory's mtime moves with every heartbeat: the run's start is in the heartbeat.
        with holder.sub(base) as job_dir:
            # The token from the entry's name: ``through`` names the descriptor, not the entry.
            hb = read_heartbeat(job_dir.through, entry_token(Path(base)))
        return None if hb is None else hb.started
    if state in STAMP_FILE:
        with holder.sub(base) as job_dir:
            return job_dir.stat(STAMP_FILE[state]).st_mtime
    return holder.stat(base).st_mtime


class JobIndex:
    """What the listing does not say about an entry, read once: its time, error kind and route."""

    def __init__(self, config: SpoolConfig) -> None:
        self.layout = SpoolLayout(config.spool)
        self._config = config
        self._lock = threading.Lock()
        self._times: dict[str, dict[str, float | None]] = {s: {} for s in defaults.STATE_DIRS}
        self._kinds: dict[str, dict[str, str | None]] = {s: {} for s in KIND_STATES}
        # incoming/ files may still change (an upload): keyed by name, kept with (size, mtime).
        self._routes: dict[str, dict[str, tuple[tuple[int, float] | None, JobRoute]]] = {
            s: {} for s in defaults.STATE_DIRS
        }
        self._contents: dict[str, dict[str, tuple[tuple[int, float] | None, JobContent]]] = {
            s: {} for s in defaults.STATE_DIRS
        }
        self._last: dict[str, tuple[list[str], tuple[Filters, bool], list[str]]] = {}
        self._unknown_time = False

    def time(self, state: str, name: str) -> float | None:
        """When the entry entered its state (running: its run started; retry: it is due), epoch seconds."""
        if state == "retry":
            m = RETRY_NAME.fullmatch(name)
            return int(m.group("due")) / 1000 if m else None
        known = self._times[state]
        if name not in known:
            try:
                with entry_holder(self._where(state, name)) as (holder, base):
                    entered = _entered(state, holder, base)
            except (OSError, SpoolPathRefused):
                return None  # moved on meanwhile (or being written): ask again next time
            if entered is None:
                return None
            known[name] = entered
        return known[name]

    def kind(self, state: str, name: str) -> str | None:
        if state not in KIND_STATES:
            return None
        known = self._kinds[state]
        if name not in known:
            try:
                with entry_holder(self._where(state, name)) as (holder, base), holder.sub(base) as entry:
                    job_dir = entry.through  # the open job directory itself (spoolrender.spool.spooldir)
                    if state == "failed":
                        with open(job_dir / defaults.FAILURE_FILENAME, "rb") as fh:
                            failure = json.loads(fh.read())
                        known[name] = str(failure.get("kind")) if isinstance(failure, dict) else None
                    else:
                        runs = read_runs(job_dir)
                        errors = [r.error for r in runs if r.error]
                        known[name] = str(errors[-1].get("kind")) if errors else None
            except (OSError, ValueError, SpoolPathRefused):
                return None  # moved on meanwhile: ask again next time
        return known[name]

    def _where(self, state: str, name: str) -> Located:
        """The entry ``name`` as listed in ``state``, to be opened through lookup.entry_holder
        (its path names it in messages and is never re-resolved)."""
        return Located("", state, self.layout.state_dir(state) / name, name)  # spooldir: message only

    @contextlib.contextmanager
    def _job_file(self, state: str, name: str) -> Iterator[tuple[DirHandle, str]]:
        """The entry's job file, as its open directory and its name there."""
        # Through descriptors (lookup.entry_holder): a queue directory swapped since the
        # listing is refused, a job directory never followed through a symlink.
        with entry_holder(self._where(state, name)) as (holder, base):
            if state == "incoming":
                yield holder, base
            else:
                with holder.sub(base) as job_dir:
                    yield job_dir, defaults.JOB_FILENAME

    def route(self, state: str, name: str) -> JobRoute:
        """The entry's queue and required tags, read once per entry (per version of a waiting file)."""
        known = self._routes[state]
        try:
            with self._job_file(state, name) as (holder, base):
                if state == "incoming":
                    return self._route_of(known, name, holder, base, queue_dir_of(name), incoming=True)
                try:
                    # Written at the claim from the drop directory's name; it outranks the field.
                    queue_dir = holder.read_text(QUEUE_FILENAME, 4096).strip() or None
                except (OSError, SpoolPathRefused, UnicodeDecodeError):
                    queue_dir = None
                return self._route_of(known, name, holder, base, queue_dir, incoming=False)
        except (OSError, SpoolPathRefused):
            return JobRoute(None if state != "incoming" else queue_dir_of(name), None)  # moved on: not kept

    def content(self, state: str, name: str) -> JobContent:
        """The entry's composition and props, read once per entry (per version of a waiting file)."""
        known = self._contents[state]
        try:
            with self._job_file(state, name) as (holder, base):
                version = _version(holder, base) if state == "incoming" else None
                cached = known.get(name)
                if cached is not None and cached[0] == version:
                    return cached[1]
                try:
                    data = read_job_bytes(holder.anchored(base), self._config.max_job_bytes)
                    found = _content_of(parse_job(data, base, self._config))
                except JobInvalid:
                    found = UNREADABLE
                known[name] = (version, found)
                return found
        except (OSError, SpoolPathRefused):
            return UNREADABLE  # moved on meanwhile: ask again next time

    def _route_of(
        self,
        known: dict[str, tuple[tuple[int, float] | None, JobRoute]],
        name: str,
        holder: DirHandle,
        base: str,
        queue_dir: str | None,
        *,
        incoming: bool,
    ) -> JobRoute:
        """The route of the job file ``base`` in ``holder`` (cached per version of a waiting file)."""
        version = _version(holder, base) if incoming else None
        cached = known.get(name)
        if cached is not None and cached[0] == version:
            return cached[1]
        decided = None if incoming else _decided_route(holder.through)
        if decided is not None:
            known[name] = (version, decided)
            return decided
        try:
            spec = parse_job(read_job_bytes(holder.anchored(base), self._config.max_job_bytes), base, self._config)
        except (JobInvalid, OSError):
            found = JobRoute(queue_dir, None)
        else:
            r = route(queue_dir or spec.queue, spec.requires)
            found = JobRoute(r.queue, r.requires, spec.not_before)
        known[name] = (version, found)
        return found

    def scheduled(self, names: list[str], now: float) -> tuple[int, bool]:
        """How many of incoming/'s ``names`` are scheduled (``not_before`` after ``now``), and
        whether all were looked at: at most STATUS_QUEUE_READS files are read (as `status`),
        so a deep backlog costs a bounded read once, then only what is new."""
        looked = names[: defaults.STATUS_QUEUE_READS]
        count = sum(1 for n in looked if (t := self.route("incoming", n).not_before) is not None and t > now)
        return count, len(looked) == len(names)

    def warm(self) -> None:
        """Read every finished entry's time now (a server's start-up thread), so that the
        first page a client asks for on a big spool is as quick as the next."""
        for state in STAMP_FILE:
            for name in list_names(self.layout.state_dir(state)):
                with self._lock:  # one entry at a time: requests are never held up for long
                    self.time(state, name)

    def select(self, state: str, names: list[str], filters: Filters, *, newest_first: bool = False) -> list[str]:
        """``names`` (a fresh listing of ``state``) in order, narrowed by ``filters``.

        ``newest_first`` (`spoolrender list`): incoming, running and split entries too are
        ordered by their time, newest first (retry stays in due order: its queue order).
        The last answer per state is kept: paging through an unchanged directory (the same
        listing, compared in one pass) with the same filters does not sort it again.
        """
        with self._lock:
            last = self._last.get(state)
            if last is not None and last[1] == (filters, newest_first) and last[0] == names:
                return last[2]
            self._unknown_time = False
            chosen = self._select(state, names, filters)
            if newest_first and state not in STAMP_FILE and state != "retry":
                chosen = self._newest_first(state, chosen)
            # An entry without a time yet gets its place next time; a waiting file's queue may
            # change with its contents while its name stays.
            by_file = filters.queue is not None or filters.by_content
            if not self._unknown_time and not (state == "incoming" and by_file):
                self._last[state] = (names, (filters, newest_first), chosen)
            return chosen

    def _newest_first(self, state: str, names: list[str]) -> list[str]:
        stamped = [(self.time(state, n), n) for n in names]
        self._unknown_time = self._unknown_time or any(t is None for t, _ in stamped)
        stamped.sort(key=lambda item: (float("-inf") if item[0] is None else item[0], item[1]), reverse=True)
        return [n for _, n in stamped]

    def _select(self, state: str, names: list[str], filters: Filters) -> list[str]:
        self._forget_gone(state, names)
        chosen = names
        if filters.text:
            needle = filters.text.lower()
            chosen = [n for n in chosen if needle in name_id(state, n).lower()]
        if filters.kind is not None:
            chosen = [n for n in chosen if self.kind(state, n) == filters.kind]
        if filters.queue is not None:
            chosen = [n for n in chosen if self.route(state, n).queue == filters.queue]
        if filters.by_content:
            chosen = [
                n
                for n in chosen
                if (filters.see_private or not is_private(self._where(state, n)))
                and self.content(state, n).matches(filters)
            ]
        if filters.timed or state in STAMP_FILE:
            stamped = [(self.time(state, n), n) for n in chosen]
            if filters.timed:
                low = filters.since if filters.since is not None else float("-inf")
                high = filters.until if filters.until is not None else float("inf")
                stamped = [(t, n) for t, n in stamped if t is not None and low <= t <= high]
            if state in STAMP_FILE:  # newest first; an unreadable time sorts last
                unknown = float("-inf")
                self._unknown_time = any(t is None for t, _ in stamped)
                stamped = [(unknown if t is None else t, n) for t, n in stamped]
                stamped.sort(reverse=True)
                return [n for _, n in stamped]
            chosen = [n for _, n in stamped]
        return sorted(chosen)

    def _forget_gone(self, state: str, names: list[str]) -> None:
        present = set(names)
        for known in (self._times[state], self._kinds.get(state, {}), self._routes[state], self._contents[state]):
            # list(): one atomic copy; pages add facts to these without the lock meanwhile.
            for name in [n for n in list(known) if n not in present]:
                del known[name]
