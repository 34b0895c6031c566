"""The Python API for integrators: a spool, the jobs in it, and waiting for their outcome.

The ``spoolrender`` command is a thin layer over this module, so a script and an operator
see the same validation, the same errors and the same states::

    from spoolrender import JobFailed, Spool

    spool = Spool("/srv/render/spool")
    job = spool.submit({"composition": "Intro", "props": {"title": "Hi"}, "output": "intro-42.mp4"},
                       name="intro-42")
    try:
        result = job.wait(timeout=600)   # JobResult: output path, bytes, attempts, duration
    except JobFailed as exc:
        print(exc.kind, exc.reason)      # the reason written into the job's failure.json

Nothing here needs a runner in the same process (or on the same host): a job is a file
in the spool, and its state is wherever its entry is. Every error is a
:class:`~spoolrender.errors.SpoolrenderError`.
"""

from __future__ import annotations

import getpass
import os
import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from spoolrender import defaults
from spoolrender.compositions import Composition, list_compositions
from spoolrender.config.spool_config import SpoolConfig, load_config
from spoolrender.errors import JobFailed, JobInvalid, JobNotFound, SpoolrenderError, WaitTimeout
from spoolrender.jobfile import ID_PATTERN, load_yaml_mapping
from spoolrender.ops import control, submission
from spoolrender.ops.lookup import Located, by_relevance, describe, find_job, job_id_of, read_entry, show_document
from spoolrender.ops.purge import purge as purge_finished
from spoolrender.spool.durable import set_fsync
from spoolrender.spool.layout import RETRY_NAME, SpoolLayout, new_token

FINISHED_STATES = ("done", "failed")
_WAIT_POLL_MAX_S = 1.0


@dataclass(frozen=True)
class JobStatus:
    """Where a job is now, and the little a caller needs to act on it.

    Attributes:
        id: The job's id.
        state: ``incoming``, ``running``, ``retry``, ``split`` (waiting for its chunks),
            ``done`` or ``failed``.
        entry: ``"<state>/<name>"`` in the spool.
        attempts: Attempts used so far (None while waiting in incoming/).
        progress: 0..1 while running (its heartbeat) or split (its chunks); 1.0 once done.
        due: In retry/: epoch seconds of the next attempt.
        kind: Failed: the failure kind; otherwise the last run's error kind.
        reason: Failed: the failure reason; otherwise the last run's error.
    """

    id: str
    state: str
    entry: str
    attempts: int | None
    progress: float | None = None
    due: float | None = None
    kind: str | None = None
    reason: str | None = None

    @property
    def finished(self) -> bool:
        """True once the job is done or failed."""
        return self.state in FINISHED_STATES


@dataclass(frozen=True)
class JobResult:
    """A done job's ``result.json``, with its most used fields typed.

    Attributes:
        id: The job's id.
        output: The published output file.
        bytes: Its size.
        attempts: Attempts the job used.
        duration_seconds: Claim to done of the successful run.
        record: ``result.json`` as written by the runner.
    """

    id: str
    output: Path
    bytes: int
    attempts: int
    duration_seconds: float | None
    record: dict[str, Any] = field(repr=False)


@dataclass(frozen=True)
class SpoolStatus:
    """The spool at a glance: ``document`` is the ``status --json`` object (status.schema.json)."""

    document: dict[str, Any] = field(repr=False)

    @property
    def counts(self) -> dict[str, int]:
        """Jobs per state, from directory listings."""
        return dict(self.document["counts"])

    @property
    def paused(self) -> str | None:
        """The pause reason, or None when runners may claim."""
        reason = self.document["paused"]
        return None if reason is None else str(reason)

    @property
    def running(self) -> list[dict[str, Any]]:
        """The running jobs: the ``running`` objects of ``status --json``."""
        return list(self.document["running"])


class Spool:
    """One spool directory, configured as its ``spoolrender.yaml`` (and ``overrides``) say.

    ``config`` may be given instead of a path (the CLI does, after ``--set``). The spool's
    ``fsync`` setting is applied to this process (it is process-wide).
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        overrides: Mapping[str, Any] | None = None,
        config: SpoolConfig | None = None,
    ) -> None:
        if config is None:
            if path is None:
                raise TypeError("Spool() needs a path or a config")
            config = load_config(Path(path), overrides=overrides)
        elif path is not None or overrides:
            raise TypeError("give Spool() either a path (and overrides) or a config, not both")
        self.config = config
        set_fsync(config.fsync)

    @property
    def path(self) -> Path:
        return self.config.spool

    def __repr__(self) -> str:
        return f"Spool({str(self.path)!r})"

    # --- jobs ---------------------------------------------------------------------------

    def submit(
        self,
        job: Mapping[str, Any] | bytes | str | os.PathLike[str],
        *,
        name: str | None = None,
        check: bool = True,
        props_check: bool = True,
    ) -> Job:
        """Validate ``job`` and drop it into incoming/ atomically; the returned handle follows it.

        ``job`` is a mapping (written as YAML), the bytes or text of a job file, or the
        path of one (``pathlib.Path``; read up to ``max_job_bytes``, regular files only).
        ``name`` is its file name in incoming/ (default: the path's name, else the job's
        id, else a unique one). With ``check`` (the default) an invalid job, or an id that
        is already queued, running or done (without ``rerun``), raises
        :class:`~spoolrender.errors.JobInvalid` listing every problem. With ``props_check``
        too, a Remotion job's composition and still frame are checked against the cached
        listing of :meth:`compositions` when the project is unchanged since it was made,
        and its props with the composition's own zod schema in that bundle's page
        (seconds: Node and Chromium start; ``spoolrender.renderers.remotion.props_check``). A
        Remotion job on a spool without a usable Remotion project is queued, and the
        reason it will fail is logged as a warning (logger ``spoolrender.ops.submission``).
        """
        data, default_name = self._job_bytes(job)
        name = name or default_name or _declared_id(data) or f"api-{time.strftime('%Y%m%dT%H%M%S')}-{new_token()[:6]}"
        # The id the runner will give it (an invalid job, with check=False, is known by
        # its file name's). Entries of that id that exist now belong to earlier jobs (a
        # re-run's done/ entry, a failed predecessor): the handle must not report them.
        job_id = job_id_of(self.config, data, name)
        earlier = frozenset(w.uid for w in find_job(self.config, job_id, incoming=False) if w.uid is not None)
        path = submission.submit(self.config, data, name, check=check, props_check=props_check)
        return Job(self, job_id, incoming=path, earlier=earlier)

    def _job_bytes(self, job: Mapping[str, Any] | bytes | str | os.PathLike[str]) -> tuple[bytes, str | None]:
        if isinstance(job, Mapping):
            return yaml.safe_dump(dict(job), sort_keys=False).encode(), None
        if isinstance(job, bytes):
            return job, None
        if isinstance(job, str):
            return job.encode(), None
        path = os.fspath(job)
        return submission.read_submission(path, None, self.config.max_job_bytes)

    def compositions(self, project: str | None = None) -> list[Composition]:
        """The compositions (size, fps, duration, default props, props schema) of the
        Remotion project ``project`` (a name in the config's ``projects``; None: the default
        ``remotion_project``), bundling the project and listing them when its current
        content has no cached listing yet."""
        config = self.config
        return list_compositions(config.project_dir(project), config.cache_dir, config.browser_executable)

    def job(self, job_id: str) -> Job:
        """A handle on the job ``job_id`` already in the spool (its newest entry for re-runs)."""
        # Looked for more than once: a job moving retry/ -> running/ between two listings
        # of one lookup is seen nowhere by it (lookup.read_entry).
        for _ in range(defaults.JOB_READ_ATTEMPTS):
            if find_job(self.config, job_id):
                return Job(self, job_id)
        raise JobNotFound(job_id, f"no job with id {job_id!r} in {self.path}")

    def show(self, job_id: str) -> dict[str, Any]:
        """The ``show --json`` object of ``job_id`` (job.schema.json): state, attempts, runs,
        result or failure, logs."""
        return show_document(self.config, job_id)

    def cancel(self, job_id: str, *, by: str | None = None) -> list[str]:
        """Cancel ``job_id``: waiting, it fails as cancelled now; running, its runner stops it.

        ``by`` is recorded in the reason (default ``user@host``). Returns one line per entry.
        """
        return control.cancel(self.config, job_id, by or f"{getpass.getuser()}@{socket.gethostname()}")

    def retry(self, job_id: str) -> list[str]:
        """Failed (cancelled too): back to retry/ with fresh attempts; waiting in retry/: due
        now. Never before the job's ``not_before``. One line per entry changed."""
        return [change.text for change in control.retry(self.config, job_id)]

    def rerun(self, job_id: str) -> Path:
        """Render the done job ``job_id`` again, as a new run of the same id (its output and
        done entry stay until the new run is published); returns the queued file."""
        from spoolrender.ops.rerun_done import rerun

        return rerun(self.config, job_id)

    def retry_all_failed(self) -> list[str]:
        """Every failed job back to retry/ with fresh attempts; returns their ids."""
        return control.retry_all_failed(self.config)

    # --- the spool ----------------------------------------------------------------------

    def status(self) -> SpoolStatus:
        """Counts per state, running jobs, the retry queue, recent failures, runners."""
        from spoolrender.ops.status import collect_status

        return SpoolStatus(collect_status(self.config))

    def pause(self, reason: str = "paused by operator") -> Path:
        """Stop every runner on every host from claiming; running jobs go on."""
        return control.pause(self.config, reason)

    def resume(self) -> bool:
        """Let runners claim again; False if the spool was not paused."""
        return control.resume(self.config)

    def purge(
        self, older_than: float, states: tuple[str, ...] = FINISHED_STATES, *, dry_run: bool = False
    ) -> list[str]:
        """Forget finished jobs older than ``older_than`` seconds (outputs are kept)."""
        return purge_finished(self.config, older_than, states, dry_run=dry_run)


class Job:
    """A handle on one job: its state now, and waiting for its outcome.

    From :meth:`Spool.submit` the handle follows that submission only: entries of the same
    id that existed before it (an earlier run of a ``rerun`` id) are not its outcome.
    """

    def __init__(
        self, spool: Spool, job_id: str, *, incoming: Path | None = None, earlier: frozenset[str] = frozenset()
    ) -> None:
        self.spool = spool
        self.id = job_id
        self.submitted_as = incoming  # its file in incoming/, for a handle from submit()
        self._incoming = incoming
        self._earlier = earlier

    def __repr__(self) -> str:
        return f"Job({self.id!r}, spool={str(self.spool.path)!r})"

    def _entries(self) -> list[Located]:
        config = self.spool.config
        if self._incoming is None:
            return by_relevance(find_job(config, self.id))
        # Our own file only, while it waits (another file may declare the same id, and
        # reading every waiting file would make each look cost seconds on a backlog).
        # It is looked at before the other states: a job only moves on from incoming/,
        # so a claim between the two looks is seen in running/.
        waiting = [Located(self.id, "incoming", self._incoming)] if os.path.lexists(self._incoming) else []
        found = [w for w in find_job(config, self.id, incoming=False) if w.uid not in self._earlier]
        return by_relevance(waiting + found)

    def _look(self) -> tuple[Located, dict[str, Any]]:
        """The job's current entry and its description, read once (JobNotFound if none).

        A job that moves retry/ -> running/ between two directory listings is briefly seen
        nowhere, and one that moves while it is described is read again: read_entry.
        """
        snapshot = read_entry(
            self.id,
            self._entries,
            lambda found, through: describe(self.spool.config, found[0], through),
            layout=SpoolLayout(self.spool.config.spool),
        )
        if snapshot is None:
            raise JobNotFound(self.id, f"job {self.id!r} is not in {self.spool.path} (purged?)")
        found, info = snapshot
        return found[0], info

    def status(self) -> JobStatus:
        """The job's state now; JobNotFound if it is nowhere (purged, or never there)."""
        return _job_status(*self._look())

    def show(self) -> dict[str, Any]:
        """Everything ``show --json`` says about the job's current entry (job.schema.json's ``$defs/entry``)."""
        return self._look()[1]

    def wait(self, timeout: float | None = None, *, poll: float = 0.2) -> JobResult:
        """Block until the job is done and return its result.

        Raises :class:`~spoolrender.errors.JobFailed` (``kind``, ``reason``, the failure
        record) when it fails for good or is cancelled, :class:`~spoolrender.errors.WaitTimeout`
        (also a ``TimeoutError``) after ``timeout`` seconds (the job goes on), and
        :class:`~spoolrender.errors.JobNotFound` if it disappears (purged). The spool is
        looked at every ``poll`` seconds, backing off to one second; directory listings are
        the truth, so this works on any host that mounts the spool; on a local spool
        inotify on done/ and failed/ wakes it as soon as the job gets there.
        """
        from spoolrender.ops.outcome_events import OutcomeEvents  # watchdog: only for wait()

        deadline = None if timeout is None else time.monotonic() + timeout
        interval = poll
        with OutcomeEvents(self.spool.config) as arrived:
            while True:
                arrived.clear()  # before looking: a move during the look wakes the next wait
                where, info = self._look()
                if where.state in FINISHED_STATES:
                    return self._outcome(where, info)
                if deadline is not None:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise WaitTimeout(self.id, float(timeout or 0), where.state)
                    interval = min(interval, left)
                arrived.wait(interval)
                interval = min(interval * 1.5, _WAIT_POLL_MAX_S)

    def result(self) -> JobResult:
        """The result of a done job (JobFailed if it failed; SpoolrenderError if not finished)."""
        where, info = self._look()
        if where.state not in FINISHED_STATES:
            raise SpoolrenderError(f"job {self.id!r} is {where.state}, not done yet")
        return self._outcome(where, info)

    def _outcome(self, where: Located, info: dict[str, Any]) -> JobResult:
        """A finished entry's result, or its failure raised."""
        if where.state == "failed":
            st = _job_status(where, info)
            failure = info.get("failure")
            raise JobFailed(
                self.id, st.kind or "error", st.reason or "failed", failure if isinstance(failure, dict) else {}
            )
        record = info.get("result")
        if not isinstance(record, dict):
            raise SpoolrenderError(f"job {self.id!r} is done but its result.json is unreadable")
        output, size = record.get("output"), record.get("bytes")
        if not isinstance(output, str) or not isinstance(size, int):
            # An object without them (edited by hand): this error, as an unreadable one, not a KeyError.
            raise SpoolrenderError(f"job {self.id!r} is done but its result.json has no output and bytes")
        return JobResult(
            id=self.id,
            output=Path(output),
            bytes=size,
            attempts=int(record.get("attempts") or 0),
            duration_seconds=record.get("duration_seconds"),
            record=record,
        )

    def cancel(self, *, by: str | None = None) -> list[str]:
        """As :meth:`Spool.cancel` for this job."""
        return self.spool.cancel(self.id, by=by)

    def retry(self) -> list[str]:
        """As :meth:`Spool.retry` for this job."""
        return self.spool.retry(self.id)


def _declared_id(data: bytes) -> str | None:
    """The job's own ``id:`` if it has a valid one (the default file name for it)."""
    try:
        declared = load_yaml_mapping(data).get("id")
    except JobInvalid:
        return None
    return declared if isinstance(declared, str) and ID_PATTERN.fullmatch(declared) else None


def _job_status(where: Located, info: dict[str, Any]) -> JobStatus:
    """The status of entry ``where``, from its description (lookup.describe)."""
    runs = info.get("runs") or []
    last_error = next((r["error"] for r in reversed(runs) if r.get("error")), None) or {}
    kind, reason = last_error.get("kind"), last_error.get("message")
    failure = info.get("failure")
    if isinstance(failure, dict):
        kind, reason = failure.get("kind", kind), failure.get("reason", reason)
    progress = None
    heartbeat = info.get("heartbeat")
    if where.state == "running" and isinstance(heartbeat, dict):
        progress = heartbeat.get("progress")
    elif where.state == "split" and isinstance(info.get("split"), dict):
        progress = info["split"].get("progress")  # rendered in chunks: their share of the frames
    elif where.state == "done":
        progress = 1.0
    m = RETRY_NAME.fullmatch(where.path.name) if where.state == "retry" else None
    due = int(m.group("due")) / 1000 if m else None
    return JobStatus(
        id=where.job_id,
        state=where.state,
        entry=where.entry,
        attempts=info.get("attempts"),
        progress=progress,
        due=due,
        kind=kind,
        reason=reason,
    )
