"""The validated job (:class:`JobSpec`) and :func:`parse_job`, which builds it from bytes."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

from spoolrender import defaults
from spoolrender.config.spool_config import SpoolConfig
from spoolrender.errors import JobInvalid
from spoolrender.jobfile.fields import ID_FIELD_ORIGIN, RENDERERS, Fields, check_fields
from spoolrender.jobfile.loading import load_yaml_mapping
from spoolrender.jobfile.naming import ID_PATTERN, output_path_problem


@dataclass(frozen=True)
class JobSpec:
    """A validated job. Built only through :func:`parse_job` (or tests, with valid values)."""

    id: str
    renderer: str = defaults.DEFAULT_RENDERER
    composition: str | None = None
    project: str | None = None  # a name in the config's projects; None: remotion_project
    command: str | None = None
    props: dict[str, Any] = field(default_factory=dict)
    output: PurePosixPath = field(default_factory=lambda: PurePosixPath("out.mp4"))
    max_attempts: int = defaults.DEFAULT_MAX_ATTEMPTS
    timeout: float = defaults.DEFAULT_TIMEOUT_S
    priority: int = defaults.DEFAULT_PRIORITY
    not_before: float | None = None  # epoch seconds
    rerun: bool = False
    settings: dict[str, Any] = field(default_factory=dict)
    fallback: dict[str, Any] = field(default_factory=dict)
    queue: str | None = None  # None: from the drop directory, else "default" (config/queues.py)
    requires: tuple[str, ...] = ()  # runner tags a runner must have to take the job
    still: dict[str, Any] | None = None  # {frame, format (None: from the output's suffix)}
    cache: bool | None = None  # the render cache: True asks, False opts out, None: the spool decides
    # Chunked rendering (spoolrender.chunks): split into this many chunks (1: never split),
    # or into chunks of this many frames; neither: the spool's split_seconds decides.
    chunks: int | None = None
    chunk_frames: int | None = None
    # Where the id came from, as reasons about the id name it: "field 'id'", or the
    # file name it was derived from (a user who never wrote `id:` must not be told to fix it).
    id_origin: str = ID_FIELD_ORIGIN

    def __post_init__(self) -> None:
        # The invariants the rest of the code relies on; parse_job reports them nicely.
        if not ID_PATTERN.fullmatch(self.id):
            raise ValueError(f"invalid job id {self.id!r}")
        if self.renderer not in RENDERERS:
            raise ValueError(f"invalid renderer {self.renderer!r}")
        if output_path_problem(str(self.output)) is not None:
            raise ValueError(f"invalid output {self.output!r}")

    def uses_cache(self, config: SpoolConfig) -> bool:
        """Whether this job's render is looked up in and stored to the render cache."""
        return config.render_cache if self.cache is None else self.cache

    def settings_for_attempt(self, attempt: int) -> tuple[dict[str, Any], dict[str, Any], bool]:
        """(props, settings, fallback_used) for ``attempt``.

        ``fallback`` is merged in on the last attempt of several (a job with one attempt
        has nothing to fall back from).
        """
        if self.fallback and attempt >= self.max_attempts and self.max_attempts > 1:
            props = {**self.props, **self.fallback.get("props", {})}
            settings = {**self.settings, **self.fallback.get("settings", {})}
            return props, settings, True
        return dict(self.props), dict(self.settings), False


def parse_job(data: bytes, filename: str, config: SpoolConfig) -> JobSpec:
    """Validate job bytes into a :class:`JobSpec`, or raise JobInvalid listing every problem.

    The JobInvalid of a file that loads carries the id the job is filed under: its
    ``id:`` when that is readable (whatever else is wrong), else the file name's.
    """
    fields = job_fields(data, filename, config)
    values = fields.values
    if fields.problems:
        raise JobInvalid(fields.problems, job_id=values["id"])
    return JobSpec(**{**values, "output": PurePosixPath(values["output"])}, id_origin=fields.id_origin)


def job_fields(data: bytes, filename: str, config: SpoolConfig) -> Fields:
    """Every field of job bytes checked: ``problems`` lists what is wrong, and ``values``
    holds each field's value (its default where the file's is wrong), so that checks
    beyond the file's own (submit's props check, the id's) can still run and be listed
    with the rest. JobInvalid only for bytes that do not load as a mapping at all."""
    fields = Fields(load_yaml_mapping(data), filename, config)
    check_fields(fields)
    return fields
