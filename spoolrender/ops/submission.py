"""Submitting jobs: reading a job file as a person names it, checking it the way the
runner will, and dropping it into incoming/ atomically.

A submission is checked in full before anything is written, and every problem is listed
at once: the file's own fields (the runner's validation, :func:`~spoolrender.jobfile.job_fields`),
its id against the spool (queued, running or done), and a Remotion job's composition and
still frame against the project's cached listing, its props with the composition's own
schema in the cached bundle's page (``spoolrender.renderers.remotion.props_check``). A job whose renderer cannot work on
this
spool (a Remotion job without a usable Remotion project) is queued with a warning: the
project may be set up before a runner claims it.
"""

from __future__ import annotations

import logging
import os
import stat
import sys
import time
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import BinaryIO

from spoolrender import defaults
from spoolrender.compositions import cached_compositions, listing_failure, submit_problems
from spoolrender.config.spool_config import SpoolConfig
from spoolrender.core.safe_text import has_control_characters
from spoolrender.errors import JobInvalid, PublishError, SpoolrenderError
from spoolrender.jobfile import is_candidate_name, job_fields
from spoolrender.ops.lookup import LIVE_STATES, find_job
from spoolrender.renderers.remotion.bundle_cache import cached_bundle
from spoolrender.renderers.remotion.props_check import PropsNotChecked, schema_problems
from spoolrender.spool.durable import write_atomic
from spoolrender.spool.io_trouble import condition, is_spool_io, spool_io_error, strerror
from spoolrender.spool.layout import SpoolLayout, new_token
from spoolrender.spool.publish import output_taken_problem

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Submission:
    """A job checked and ready to be written to ``target`` (nothing written yet)."""

    data: bytes
    target: Path  # incoming/<name>
    job_id: str | None  # None when not checked (--no-check)
    warnings: tuple[str, ...] = ()  # queued anyway, but it will fail as things stand


def submit(config: SpoolConfig, data: bytes, name: str, *, check: bool = True, props_check: bool = True) -> Path:
    """Drop job ``data`` into incoming/ as ``name``, atomically; returns the new path.

    With ``check`` the job is validated first and refused with every problem listed,
    so a mistake is reported to the person submitting, not discovered in failed/ later:
    that includes an id that is already queued, running, or done (unless ``rerun``),
    which the runner would refuse anyway (the runner's id reservation stays the guard).
    Warnings (a Remotion job on a spool without a usable project) are logged.
    """
    submission = prepare(config, data, name, check=check, props_check=props_check)
    for warning in submission.warnings:
        log.warning("%s", warning)
    return write(submission)


def prepare(config: SpoolConfig, data: bytes, name: str, *, check: bool = True, props_check: bool = True) -> Submission:
    """Check a submission without writing it; JobInvalid lists every problem of the job."""
    layout = SpoolLayout(config.spool)
    layout.check()
    if not name or "/" in name or not is_candidate_name(name) or has_control_characters(name):
        raise SpoolrenderError(
            f"invalid job file name {name!r} (no '/', no control characters, no leading '.', no .part/.tmp/~)"
        )
    if len(os.fsencode(name)) > 250:  # NAME_MAX is 255, and ".yaml" may be appended
        raise SpoolrenderError(f"invalid job file name {name[:40]!r}...: longer than 250 bytes")
    if not name.endswith(defaults.JOB_SUFFIXES):
        name += ".yaml"
    if len(data) > config.max_job_bytes:
        raise JobInvalid([f"job file: over the limit of {config.max_job_bytes} bytes (max_job_bytes)"])
    target = layout.incoming / name
    if os.path.lexists(target):
        raise SpoolrenderError(f"{target} already exists; choose another name (--name)")
    if not check:
        return Submission(data, target, None)
    fields = job_fields(data, name, config)
    values = fields.values
    problems = list(fields.problems)
    wrong = {p.partition(":")[0] for p in problems}  # "field 'props'", ...
    if "field 'id'" not in wrong:  # else the id is the file name's, which nobody chose
        problems += id_problems(config, values["id"], rerun=values["rerun"])
    if "field 'output'" not in wrong:  # as the runner checks it before rendering
        try:
            taken = output_taken_problem(config.output_root, PurePosixPath(values["output"]), rerun=values["rerun"])
        except PublishError:
            taken = None  # no output root yet (a runner makes it), or unreadable: the runner decides
        problems += [] if taken is None else [taken]
    warnings: list[str] = []
    if props_check and values["renderer"] == "remotion" and values["composition"] is not None:
        still = values["still"]["frame"] if isinstance(values.get("still"), dict) else None
        # Props that are not a mapping were reported as such; a schema check of the
        # empty props used in their place would only add noise.
        schema = "field 'props'" not in wrong
        found, unchecked = props_problems(
            config, values["project"], values["composition"], values["props"], still, schema=schema
        )
        problems += found
        warnings += unchecked
    if problems:
        raise JobInvalid(problems, job_id=values["id"])
    if values["renderer"] == "remotion":
        warnings = project_warnings(config, values["id"], values["project"]) + warnings
    if props_check and values["renderer"] == "remotion":
        failed = listing_failure(config.project_dir(values["project"]), config.cache_dir)
        if failed is not None:
            warnings.append(f"composition and props not checked: listing the project's compositions failed: {failed}")
    return Submission(data, target, values["id"], tuple(warnings))


def write(submission: Submission) -> Path:
    """Write a prepared submission into incoming/; returns its path."""
    # Maildir's rule: written under a name the runner ignores (leading dot), fsynced,
    # then renamed into place, so the runner never sees a partial file and the rename
    # (IN_MOVED_TO) tells it at once that the job is complete; the directory is fsynced
    # before we return, so the job is acknowledged only once its name is durable. Mode
    # 0644 whatever the submitter's umask: the runner is often another user.
    name, incoming = submission.target.name, submission.target.parent
    try:
        write_atomic(submission.target, submission.data, mode=0o644)
    except OSError as exc:
        # A full or failing spool is the spool's condition, said in one sentence (never a
        # traceback); files of the same `submit` printed before this one were queued.
        if is_spool_io(exc):
            raise spool_io_error(
                exc, f"cannot queue {name}: the spool's filesystem {condition(exc)} ({strerror(exc)}) at "
                f"{incoming}; {name} was not queued, submit it again once that is fixed",
            ) from exc  # fmt: skip
        raise SpoolrenderError(f"cannot queue {name}: {submission.target}: {exc.strerror or exc}") from exc
    return submission.target


def props_problems(
    config: SpoolConfig,
    project: str | None,
    composition: str,
    props: dict[str, object],
    still_frame: int | None,
    *,
    schema: bool = True,
) -> tuple[list[str], list[str]]:
    """A Remotion job's composition and still frame against the project's cached listing
    (``spoolrender compositions``), and (with ``schema``) its props with the composition's
    own schema in the cached bundle's page: (problems, warnings). Without a listing of the
    project's current content nothing is checked here: submit never bundles."""
    directory = config.project_dir(project)
    listing = cached_compositions(directory, config.cache_dir)
    if listing is None:
        return [], []
    problems = submit_problems(listing, composition, dict(props), still_frame)
    found = next((c for c in listing if c.id == composition), None)
    bundle = cached_bundle(directory, config.cache_dir)
    if not schema or found is None or not found.has_schema or bundle is None:
        return problems, []
    try:
        bad = schema_problems(directory, bundle, config.browser_executable, composition, dict(props))
    except PropsNotChecked as exc:
        why = f"props not checked with {composition}'s schema: {exc} (the runner checks them before the first frame)"
        return problems, [why]
    return [f"field 'props': {problem}" for problem in bad] + problems, []


def project_warnings(config: SpoolConfig, job_id: str, project: str | None) -> list[str]:
    """Why a Remotion job cannot render on this spool as it is set up (empty: it can)."""
    from spoolrender.renderers.remotion.project_setup import project_problem

    directory = config.project_dir(project)
    problem = project_problem(directory)
    if problem is None:
        return []
    setting = "remotion_project" if project is None else f"projects: {project}"
    return [
        f"job {job_id} is queued, but it needs a Remotion project and {problem} ({setting}); it fails "
        f"until you run `spoolrender init {config.spool} --remotion-project DIR` or set {setting} "
        f"in {config.spool / defaults.CONFIG_FILENAME}"
    ]


def id_problems(config: SpoolConfig, job_id: str, *, rerun: bool) -> list[str]:
    """Why ``job_id`` cannot be submitted now: it is in retry/, running, or done (without ``rerun``).

    From listings only (the cost of a submit must not grow with the backlog): a waiting
    file in incoming/ that declares the same id under another name is refused by the
    runner's id reservation when it is claimed, with the reason in its failure record.
    """
    for where in find_job(config, job_id, incoming=False):
        if where.state in LIVE_STATES:
            return [f"field 'id': {job_id!r} is already queued or running ({where.entry})"]
        if where.state == "done" and not rerun:
            return [
                f"field 'id': {job_id!r} was already rendered ({where.entry}); "
                "use another id, or set rerun: true to render it again"
            ]
    return []


def read_submission(source: str, name: str | None, max_bytes: int) -> tuple[bytes, str]:
    """Bytes and incoming/ name for ``spoolrender submit FILE|-``, reading at most ``max_bytes + 1``.

    A named file must be a regular file: it is opened non-blocking, so a FIFO (or a
    device such as /dev/zero) is refused at once instead of blocking or reading forever,
    and a directory is refused in one sentence. Standard input is what the caller chose
    to pipe in; it is read until EOF or one byte past the limit, whichever comes first,
    so an endless producer is cut off there.
    """
    if source == "-":
        data = read_limited(sys.stdin.buffer, max_bytes, "standard input")
        return data, name or f"stdin-{time.strftime('%Y%m%dT%H%M%S')}-{new_token()[:6]}.yaml"
    try:
        fd = os.open(source, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise SpoolrenderError(f"cannot read {source}: {exc.strerror}") from exc
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise SpoolrenderError(
                f"cannot submit {source}: it is a directory; name its job files (spoolrender submit {source}/*.yaml)"
            )
        if not stat.S_ISREG(mode):
            raise SpoolrenderError(f"cannot submit {source}: not a regular file (to pipe a job in, use `submit -`)")
    except BaseException:
        os.close(fd)
        raise
    with os.fdopen(fd, "rb") as fh:
        data = read_limited(fh, max_bytes, source)
    return data, name or Path(source).name


def read_limited(stream: BinaryIO, max_bytes: int, what: str) -> bytes:
    """Up to ``max_bytes`` from ``stream``; JobInvalid as soon as there is one byte more."""
    chunks: list[bytes] = []
    size = 0
    while size <= max_bytes:
        chunk = stream.read(min(1 << 16, max_bytes + 1 - size))
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    if size > max_bytes:
        raise JobInvalid([f"job file: {what} is over the limit of {max_bytes} bytes (max_job_bytes)"])
    return b"".join(chunks)
