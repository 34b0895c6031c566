"""spoolrender: a filesystem spool-directory batch runner for Remotion video renders.

The Python API (see :mod:`spoolrender.api` and docs/python-api.md)::

    from spoolrender import Spool
    job = Spool("/srv/render/spool").submit({"composition": "Intro", "output": "intro.mp4"})
    result = job.wait(timeout=600)

The packages are layers, each importing only from those below it (docs/architecture.md; the
import-linter contracts in pyproject.toml): core, errors/defaults, spool, render_cache, config,
jobfile, renderers (+ compositions), hosts, intake, chunks/hooks, lifecycle, run, ops, runner,
api/testing, serve, cli.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from spoolrender.core.version import __version__

__all__ = [
    "Job",
    "JobFailed",
    "JobInvalid",
    "JobNotFound",
    "JobResult",
    "JobStatus",
    "Spool",
    "SpoolStatus",
    "SpoolrenderError",
    "WaitTimeout",
    "__version__",
]

if TYPE_CHECKING:
    from spoolrender.api import Job, JobResult, JobStatus, Spool, SpoolStatus
    from spoolrender.errors import JobFailed, JobInvalid, JobNotFound, SpoolrenderError, WaitTimeout


def __getattr__(name: str) -> Any:
    # Imported on first use: `import spoolrender` (every CLI start, every runner child)
    # stays as light as the submodules it actually needs.
    if name in ("Job", "JobResult", "JobStatus", "Spool", "SpoolStatus"):
        from spoolrender import api

        return getattr(api, name)
    if name in ("JobFailed", "JobInvalid", "JobNotFound", "SpoolrenderError", "WaitTimeout"):
        from spoolrender import errors

        return getattr(errors, name)
    raise AttributeError(f"module 'spoolrender' has no attribute {name!r}")
