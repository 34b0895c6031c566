"""``rerun: true`` replaces only an output that the same job id published last.

A re-run renders a job id again and replaces its output. Without a check it would replace
*any* file of that name: a job with a new id, ``rerun: true`` and another job's ``output:``
would overwrite that job's published video. So an existing output may be replaced only if
it is still the file that the newest done record of this id which published that output
names (its inode, or size and mtime where inode numbers differ per host:
publish.RenderedFile). Everything else fails the job with :data:`RERUN_REFUSED`: an output
of another id, a file a user put there, or an output whose done record was purged.

Checked twice: when the run starts (a clear failure before any rendering) and again at the
publish itself (publish.publish_output), where it decides.
"""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath

from spoolrender.errors import PublishError
from spoolrender.layout import FINAL_NAME, SpoolLayout, list_names
from spoolrender.publish import RenderedFile, existing_output
from spoolrender.records import PUBLISHING, read_runs

# The failure kind of a re-run whose output is not the one its id published last.
RERUN_REFUSED = "rerun-refused"


def last_published(layout: SpoolLayout, job_id: str, rel: PurePosixPath) -> RenderedFile | None:
    """The file ``rel`` as recorded by the newest publish of ``job_id`` to ``rel`` in done/."""
    newest: tuple[float, RenderedFile] | None = None
    for name in list_names(layout.done):
        m = FINAL_NAME.fullmatch(name)
        if m is None or m.group("id") != job_id:
            continue
        try:
            runs = read_runs(layout.done / name)
        except OSError:
            continue  # purged meanwhile
        for record in reversed(runs):
            info = record.publish or {}
            found = RenderedFile.recorded(info)
            if record.outcome != PUBLISHING or info.get("output") != str(rel) or found is None:
                continue
            if newest is None or record.ended > newest[0]:
                newest = (record.ended, found)
            break
    return None if newest is None else newest[1]


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
        why = f"no done record of job {job_id!r} published it"
    else:
        why = f"it is no longer the file job {job_id!r} published (inode {previous.inode}, {previous.bytes} bytes)"
    return PublishError(
        f"field 'rerun': output {str(rel)!r} exists and {why}; rerun: true replaces only an output "
        "its own id published last: choose another output, or remove the file",
        transient=False,
        kind=RERUN_REFUSED,
    )
