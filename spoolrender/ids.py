"""Job id reservations: a job id is published at most once (unless the job asks to re-run).

``.spoolrender/ids/<id>`` is a symlink whose target is the uid of the job that holds the
id. ``symlink()`` creates the name atomically or fails with EEXIST, also on NFS, and the
target carries the holder without a second, non-atomic write. A job holds its id from its
first run on; the id is released when the job fails for good (so a corrected job file
with the same id can be submitted) and kept once it is done.
"""

from __future__ import annotations

import contextlib
import logging
import os

from spoolrender.errors import JobInvalid
from spoolrender.layout import FINAL_NAME, RETRY_NAME, RUNNING_NAME, SpoolLayout, list_names, new_token

log = logging.getLogger(__name__)


def _where_is(layout: SpoolLayout, uid: str) -> str | None:
    """The state (and entry) holding job ``uid``, e.g. ``done/x.abc``; None if nowhere."""
    patterns = {"running": RUNNING_NAME, "retry": RETRY_NAME, "done": FINAL_NAME, "failed": FINAL_NAME}
    for state, pattern in patterns.items():
        for name in list_names(layout.state_dir(state)):
            m = pattern.fullmatch(name)
            if m and m.group("uid") == uid:
                return f"{state}/{name}"
    return None


def reserve_id(layout: SpoolLayout, job_id: str, uid: str, *, rerun: bool, origin: str = "field 'id'") -> None:
    """Make ``uid`` the holder of ``job_id`` or raise JobInvalid saying who holds it.

    ``origin`` says where the id came from (``JobSpec.id_origin``): reasons name it, so
    a job whose id was derived from its file name is not told to fix an `id:` field.
    """
    link = layout.ids / job_id
    for _ in range(10):
        try:
            os.symlink(uid, link)
            return
        except FileExistsError:
            pass
        try:
            holder = os.readlink(link)
        except FileNotFoundError:
            continue  # released meanwhile; try again
        if holder == uid:
            return
        where = _where_is(layout, holder)
        if where is not None and not where.startswith("failed/"):
            state = where.split("/", 1)[0]
            if state == "done" and rerun:
                pass  # re-run asked for: take the id over below
            elif state == "done":
                raise JobInvalid(
                    [
                        f"{origin}: {job_id!r} was already rendered ({where}); "
                        "use another id, or set rerun: true to render it again"
                    ]
                )
            else:
                raise JobInvalid([f"{origin}: {job_id!r} is already queued or running ({where})"])
        # The holder is gone (failed, purged) or being re-run: take the reservation over,
        # compare-and-swap style, since another job may be doing the same right now.
        if _take_over(layout, job_id, holder, uid):
            log.debug("id %s taken over from %s (%s)", job_id, holder, where or "gone")
            return
    raise JobInvalid([f"{origin}: could not reserve {job_id!r} (contended)"])


def release_id(layout: SpoolLayout, job_id: str, uid: str) -> None:
    """Give ``job_id`` up if ``uid`` holds it (a failed job), so it can be submitted again."""
    link = layout.ids / job_id
    with contextlib.suppress(OSError):
        if os.readlink(link) == uid:
            os.unlink(link)


def _take_over(layout: SpoolLayout, job_id: str, expected: str, uid: str) -> bool:
    """Replace the reservation held by ``expected`` with ``uid``; False if it changed meanwhile.

    rename() moves whatever link is there now out of the way in one step; only if that
    link still named ``expected`` is the new one created (exclusively, so a job that
    reserved the freed id in the meantime wins). Otherwise the moved link is put back
    with link(), which refuses to overwrite, and the caller looks again.
    """
    link = layout.ids / job_id
    tomb = layout.ids / f".{job_id}.{new_token()}.old"
    try:
        os.rename(link, tomb)
    except FileNotFoundError:
        return False
    try:
        if os.readlink(tomb) != expected:
            try:
                os.link(tomb, link, follow_symlinks=False)
            except FileExistsError:
                log.warning("id %s: a reservation changed hands during a takeover", job_id)
            return False
        try:
            os.symlink(uid, link)
        except FileExistsError:
            return False
        return True
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tomb)
