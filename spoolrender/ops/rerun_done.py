"""`spoolrender rerun ID`: render a done job again, as a new run of the same id.

The done job's own job file is queued again (incoming/<id>.yaml) with ``rerun: true``,
through the same checks as `submit`. Nothing of the done job changes meanwhile: its
done/ entry stays (a later `show` lists both, newest first), and its published output
stays where consumers find it until the new run's output is verified and published over
it (one rename, spoolrender.spool.publish); a new run that fails leaves the old output alone.
It renders: ``cache: false`` keeps it from reusing the render cache.
The id reservation (spoolrender.spool.ids) lets a ``rerun`` job take an id held by a done job,
and the new run's hooks fire as any job's do. A job dropped into a queue directory keeps
its queue: its ``queue:`` is written into the queued file.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

from spoolrender import defaults
from spoolrender.config.queues import QUEUE_FILENAME
from spoolrender.config.spool_config import SpoolConfig
from spoolrender.errors import JobInvalid, JobNotFound, SpoolrenderError
from spoolrender.jobfile import load_yaml_mapping, read_job_bytes
from spoolrender.ops.id_hints import id_hint
from spoolrender.ops.lookup import by_relevance, find_job


@dataclass(frozen=True)
class RerunPlan:
    """The job file `rerun` queues for a done job (nothing written yet)."""

    job_id: str
    source: str  # the done entry it comes from, "done/<name>"
    data: bytes
    name: str  # incoming/<name>


def plan_rerun(config: SpoolConfig, job_id: str) -> RerunPlan:
    """The newest done entry of ``job_id`` as a job file to queue again."""
    found = find_job(config, job_id, incoming=False)
    done = [w for w in by_relevance(found) if w.state == "done"]
    if not done:
        if not found:
            raise JobNotFound(job_id, f"no job with id {job_id!r}{id_hint(config.spool, job_id)}")
        states = ", ".join(sorted({w.state for w in found}))
        raise SpoolrenderError(f"job {job_id!r} is {states}, not done: only a done job can be re-run "
                               "(a failed one: `spoolrender retry`)")  # fmt: skip
    where = done[0]
    try:
        data = read_job_bytes(where.path / defaults.JOB_FILENAME, config.max_job_bytes)
    except OSError as exc:
        raise SpoolrenderError(f"cannot read the job file of {where.entry}: {exc.strerror or exc}") from exc
    return RerunPlan(job_id, where.entry, _as_rerun(data, _queue_dir(where.path)), f"{job_id}.yaml")


def _queue_dir(job_dir: Path) -> str | None:
    """The queue directory the job was dropped into (it outranks the job file's ``queue:``)."""
    try:
        return (job_dir / QUEUE_FILENAME).read_text(encoding="utf-8").strip() or None
    except OSError:
        return None


def _as_rerun(data: bytes, queue_dir: str | None) -> bytes:
    """``data`` with ``rerun: true``, ``cache: false`` (and the queue it ran in): its bytes
    as they are when they say so already (comments kept), else the mapping written again.

    ``cache: false``: a rerun is asked for because something the render cache's key cannot
    see changed (a font, an asset, a fixed bug), so it renders, never reuses an entry.
    """
    try:
        doc = load_yaml_mapping(data)
    except JobInvalid as exc:
        raise SpoolrenderError(f"the done job's file no longer parses: {'; '.join(exc.problems)}") from exc
    wanted = {"rerun": True, "cache": False, **({} if queue_dir is None else {"queue": queue_dir})}
    if all(doc.get(key) == value and type(doc.get(key)) is type(value) for key, value in wanted.items()):
        return data
    doc.update(wanted)
    return yaml.safe_dump(doc, sort_keys=False, allow_unicode=True).encode()


def rerun(config: SpoolConfig, job_id: str) -> Path:
    """Queue the done job ``job_id`` again (see the module docstring); returns the new file.

    Checked as `submit` checks: refused with every problem listed (JobInvalid), e.g. while
    the id is queued or running.
    """
    from spoolrender.ops.submission import prepare, write

    plan = plan_rerun(config, job_id)
    return write(prepare(config, plan.data, plan.name))
