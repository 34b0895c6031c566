"""The one exception hierarchy of spoolrender.

Every error the package raises on purpose is a :class:`SpoolrenderError`; library
errors (OSError, yaml.YAMLError, ...) are wrapped with ``raise ... from exc`` at the
boundary where they stop being the caller's business.
"""

from __future__ import annotations

from typing import Any

from spoolrender.core.vocabulary import FailureKind


class SpoolrenderError(Exception):
    """Base class of every error spoolrender raises on purpose."""


class ConfigError(SpoolrenderError):
    """The spool config file, an environment override or a CLI flag is invalid."""


class SpoolLayoutError(SpoolrenderError):
    """The spool directory is missing, incomplete or not writable."""


class SpoolIOError(SpoolrenderError):
    """The spool's filesystem refused a write for a reason of its own, not the job's nor
    the filesystem type's: full (ENOSPC), over quota (EDQUOT), read-only (EROFS), failing
    (EIO) or a stale network handle (ESTALE). It passes: runners wait and try again
    (spoolrender.spool.io_trouble). ``errno``/``strerror``: the error as the kernel reported it."""

    def __init__(self, message: str, *, errno: int | None, strerror: str) -> None:
        super().__init__(message)
        self.errno = errno
        self.strerror = strerror


class UnsupportedFilesystem(SpoolLayoutError):
    """The spool or output filesystem lacks an operation the protocol relies on
    (exclusive create, rename that replaces, link or symlink that refuse an existing name)."""


class JobInvalid(SpoolrenderError):
    """A job file cannot be run as written: a permanent error, one line per problem.

    ``job_id``: the id the job is known by when the file could be read that far (its
    declared ``id:`` even if other fields are wrong), so the failure is filed under it.
    """

    def __init__(self, problems: list[str], *, job_id: str | None = None) -> None:
        self.problems = list(problems)
        self.job_id = job_id
        super().__init__("; ".join(self.problems))


class RenderError(SpoolrenderError):
    """A render attempt failed.

    ``transient`` says whether trying again may succeed (worker crash, timeout, disk
    full) or not (unknown composition, bad props, a component that always throws).
    ``kind`` is a short machine-readable class such as ``timeout`` or ``invalid-props``:
    any string, since a command renderer or a future worker may report kinds of its own
    (passed through as they are); spoolrender.core.vocabulary.FailureKind names spoolrender's.
    """

    def __init__(self, message: str, *, transient: bool, kind: str = FailureKind.ERROR) -> None:
        super().__init__(message)
        self.message = message
        self.transient = transient
        self.kind = kind


class ChunkPartInvalid(RenderError):
    """A split job's chunk ``index`` (0-based) is missing or corrupt: joining it cannot
    succeed until that chunk is rendered again (the other chunks are fine)."""

    def __init__(self, index: int, message: str) -> None:
        super().__init__(message, transient=True, kind=FailureKind.CHUNK_INVALID)
        self.index = index


class RenderCancelled(SpoolrenderError):
    """A render stopped because its cancel token was set (timeout, shutdown, lost job)."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"render cancelled: {reason}")
        self.reason = reason


class PublishError(SpoolrenderError):
    """The rendered output could not be put in place under the output root."""

    def __init__(self, message: str, *, transient: bool, kind: str | None = None) -> None:
        super().__init__(message)
        self.transient = transient
        self.kind = kind  # a failure kind of its own (rerun.RERUN_REFUSED), else the caller's


class JobNotFound(SpoolrenderError):
    """No job with that id is in the spool (never submitted, purged, or a typo)."""

    def __init__(self, job_id: str, message: str | None = None) -> None:
        super().__init__(message or f"no job with id {job_id!r}")
        self.job_id = job_id


class JobMoving(SpoolrenderError):
    """A job moved on before each read of it could begin (lookup.read_entry); try again."""

    def __init__(self, job_id: str, attempts: int) -> None:
        super().__init__(f"job {job_id!r} moved between states before each of {attempts} reads could begin; try again")
        self.job_id = job_id


class JobFailed(SpoolrenderError):
    """A job ended in failed/: ``kind`` and ``reason`` come from its failure record."""

    def __init__(self, job_id: str, kind: str, reason: str, failure: dict[str, Any]) -> None:
        super().__init__(f"job {job_id!r} failed ({kind}): {reason}")
        self.job_id = job_id
        self.kind = kind
        self.reason = reason
        self.failure = failure


class WaitTimeout(SpoolrenderError, TimeoutError):
    """A job did not finish within the time a caller was willing to wait (it goes on)."""

    def __init__(self, job_id: str, timeout: float, state: str) -> None:
        super().__init__(f"job {job_id!r} is still {state} after {timeout:g} s")
        self.job_id = job_id
        self.timeout = timeout
        self.state = state


class ClaimLost(SpoolrenderError):
    """A job this runner claimed is not its own any more: another runner took it over.

    Raised where the claim's ``running/`` directory is found gone (ENOENT), which means
    the job was recovered elsewhere while this runner stalled; the caller drops the job
    without touching it, and never recreates the directory.
    """


class ClaimBlocked(SpoolrenderError):
    """An entry in incoming/ cannot be claimed for a reason other than a lost race (a
    directory without write permission cannot be moved: EACCES); the scanner backs off."""
