"""The one exception hierarchy of spoolrender.

Every error the package raises on purpose is a :class:`SpoolrenderError`; library
errors (OSError, yaml.YAMLError, ...) are wrapped with ``raise ... from exc`` at the
boundary where they stop being the caller's business.
"""

from __future__ import annotations


class SpoolrenderError(Exception):
    """Base class of every error spoolrender raises on purpose."""


class ConfigError(SpoolrenderError):
    """The spool config file, an environment override or a CLI flag is invalid."""


class SpoolLayoutError(SpoolrenderError):
    """The spool directory is missing, incomplete or not writable."""


class JobInvalid(SpoolrenderError):
    """A job file cannot be run as written: a permanent error, one line per problem."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = list(problems)
        super().__init__("; ".join(self.problems))


class RenderError(SpoolrenderError):
    """A render attempt failed.

    ``transient`` says whether trying again may succeed (worker crash, timeout, disk
    full) or not (unknown composition, bad props, a component that always throws).
    ``kind`` is a short machine-readable class such as ``timeout`` or ``invalid-props``.
    """

    def __init__(self, message: str, *, transient: bool, kind: str = "error") -> None:
        super().__init__(message)
        self.message = message
        self.transient = transient
        self.kind = kind


class RenderCancelled(SpoolrenderError):
    """A render stopped because its cancel token was set (timeout, shutdown, lost job)."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"render cancelled: {reason}")
        self.reason = reason


class PublishError(SpoolrenderError):
    """The rendered output could not be put in place under the output root."""

    def __init__(self, message: str, *, transient: bool) -> None:
        super().__init__(message)
        self.transient = transient


class ClaimBlocked(SpoolrenderError):
    """An entry in incoming/ cannot be claimed for a reason other than a lost race (a
    directory without write permission cannot be moved: EACCES); the scanner backs off."""
