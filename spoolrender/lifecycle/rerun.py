"""``rerun: true`` replaces only an output that the same job id published last.

A re-run renders a job id again and replaces its output. Without a check it would replace
*any* file of that name: a job with a new id, ``rerun: true`` and another job's ``output:``
would overwrite that job's published video. So an existing output may be replaced only if
the spool's outputs index (spoolrender.spool.output_index) names this id as the name's last
publisher, and the file there is still the one that publish put there (a regular file of
its size and modification time: publish.RenderedFile). Everything else fails the job with
:data:`RERUN_REFUSED`: an output of another id (also one sharing this id's inode through
a render-cache hit), a file a user put there (also one that got a freed inode number),
or an output published before the index existed.

Checked twice: when the run starts (a clear failure before any rendering) and again at the
publish itself (publish.publish_output), where it decides.
"""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath

from spoolrender import defaults
from spoolrender.errors import PublishError
from spoolrender.spool.layout import SpoolLayout
from spoolrender.spool.output_index import last_publish
from spoolrender.spool.publish import RenderedFile, existing_output

# The failure kind of a re-run whose output is not the one its id published last.
RERUN_REFUSED = defaults.RERUN_REFUSED


def last_published(layout: SpoolLayout, job_id: str, rel: PurePosixPath) -> RenderedFile | None:
    """The file ``rel`` as ``job_id`` published it, if ``job_id`` published ``rel`` last."""
    last = last_publish(layout, rel)
    return last.file if last is not None and last.job_id == job_id else None


def rerun_refusal(layout: SpoolLayout, output_root: Path, rel: PurePosixPath, job_id: str) -> PublishError | None:
    """Why job ``job_id`` with ``rerun: true`` may not replace what is at ``rel`` now, or
    None (nothing there, or the file this id published last)."""
    st = existing_output(output_root, rel)
    if st is None:
        return None
    return refusal_for(st, last_published(layout, job_id, rel), rel, job_id)


def refusal_for(
    st: os.stat_result, previous: RenderedFile | None, rel: PurePosixPath, job_id: str
) -> PublishError | None:
    """The refusal of replacing the file with status ``st`` at ``rel`` (None: allowed)."""
    if previous is not None and previous.matches(st):
        return None
    if previous is None:
        why = f"job {job_id!r} did not publish it last (or before the spool recorded publishers)"
    else:
        why = f"it is no longer the file job {job_id!r} published (inode {previous.inode}, {previous.bytes} bytes)"
    return PublishError(
        f"field 'rerun': output {str(rel)!r} exists and {why}; rerun: true replaces only an output "
        "its own id published last: choose another output, or remove the file",
        transient=False,
        kind=RERUN_REFUSED,
    )
