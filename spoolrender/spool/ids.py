"""Job id reservations: a job id is published at most once (unless the job asks to re-run).

``.spoolrender/ids/<id>`` is a symlink whose target is the uid of the job that holds the
id. ``symlink()`` creates the name atomically or fails with EEXIST, also on NFS, and the
target carries the holder without a second, non-atomic write. A job holds its id from its
first run on; the id is released when the job fails for good (so a corrected job file
with the same id can be submitted), or given back to the done job of that id a failed
``rerun`` took it over from, and kept once it is done.

Changing a reservation (a take-over, a release) first renames the link aside into
``ids/.aside/<id>.<token>``, which no other process can then change, and only then decides.
A process killed between that rename and the link's re-creation would lose the
reservation, so the next reservation of the id puts an aside link back first (link()
never overwrites, so a reservation made meanwhile always wins). Putting back is always
safe: a stale reservation (its holder failed or gone) never blocks anyone.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from pathlib import Path

from spoolrender.core.failpoints import crash_point
from spoolrender.errors import JobInvalid
from spoolrender.spool.layout import FINAL_NAME, TOKEN_HEX, SpoolLayout, list_names, new_token
from spoolrender.spool.state_listings import JOB_NAMES, LISTING_ORDER

log = logging.getLogger(__name__)


# One lookup lists the states in state_listings.LISTING_ORDER: a job that makes any one move
# during a lookup is still seen in one listing or another; it can hide only by moving twice
# within one lookup, which is why two lookups must also agree.
_MAX_LOOKUPS = 20
_ASIDE_DIR = ".aside"
# An aside link whose id was reserved again meanwhile is a leftover of a killed process
# once this old: removed (a live process holds its aside for microseconds; one that finds
# its aside gone treats the reservation as changed and looks again).
_ASIDE_STALE_S = 3600.0


def _look_once(layout: SpoolLayout, uid: str) -> str | None:
    for state in LISTING_ORDER:
        listed = list_names(layout.state_dir(state))
        crash_point("id-holder-lookup")  # tests freeze here to move the holder mid-lookup
        for name in listed:
            m = JOB_NAMES[state].fullmatch(name)
            if m and m.group("uid") == uid:
                return f"{state}/{name}"
    return None


def _where_is(layout: SpoolLayout, uid: str) -> str | None:
    """The state (and entry) holding job ``uid``, e.g. ``done/x.abc``; None if nowhere.

    Listings are not a snapshot: the holder may move between two of them. Lookups are
    repeated until two in a row agree; a holder that keeps moving is alive, and the last
    place it was seen is returned, never "nowhere".
    """
    previous = _look_once(layout, uid)
    seen = previous
    for _ in range(_MAX_LOOKUPS):
        current = _look_once(layout, uid)
        if current == previous:
            return current
        seen = current or seen
        previous = current
    return seen


def _blocks(where: str | None, rerun: bool) -> bool:
    """True if a holder found at ``where`` keeps its id from a job with ``rerun``."""
    if where is None or where.startswith("failed/"):
        return False
    return not (where.startswith("done/") and rerun)


def reserve_id(layout: SpoolLayout, job_id: str, uid: str, *, rerun: bool, origin: str = "field 'id'") -> None:
    """Make ``uid`` the holder of ``job_id`` or raise JobInvalid saying who holds it.

    ``origin`` says where the id came from (``JobSpec.id_origin``): reasons name it, so
    a job whose id was derived from its file name is not told to fix an `id:` field.
    """
    link = layout.ids / job_id
    for _ in range(10):
        _put_back(layout, job_id)
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
        if _blocks(where, rerun):
            raise _held(job_id, where, origin)
        # The holder is gone (failed, purged) or being re-run: take the reservation over,
        # compare-and-swap style, since another job may be doing the same right now.
        if not _take_over(layout, job_id, holder, uid):
            continue
        # Look once more, now that the id is ours: a holder that was sent round again
        # (`spoolrender retry`, a claim from retry/) between our lookup and the swap has
        # already passed its own reserve_id and must keep its id: give it back.
        again = _where_is(layout, holder)
        if _blocks(again, rerun):
            _take_over(layout, job_id, uid, holder)
            raise _held(job_id, again, origin)
        log.debug("id %s taken over from %s (%s)", job_id, holder, where or "gone")
        return
    raise JobInvalid([f"{origin}: could not reserve {job_id!r} (contended)"])


def _held(job_id: str, where: str | None, origin: str) -> JobInvalid:
    if where is not None and where.startswith("done/"):
        return JobInvalid(
            [
                f"{origin}: {job_id!r} was already rendered ({where}); "
                "use another id, or set rerun: true to render it again"
            ]
        )
    return JobInvalid([f"{origin}: {job_id!r} is already queued or running ({where})"])


def release_id(layout: SpoolLayout, job_id: str, uid: str) -> None:
    """Give ``job_id`` up if ``uid`` holds it (a failed job), so it can be submitted again.

    A job that took the id over from a done job (``rerun: true``) gives it back to that
    done job instead: the id stays published, and only another ``rerun`` may take it.

    Never a reservation that is not ``uid``'s: a readlink() then unlink() would delete one
    that another job took over in between. The link is moved aside in one rename, and put
    back (link() refuses to overwrite) if it turns out to be someone else's.
    """
    link = layout.ids / job_id
    try:
        if os.readlink(link) != uid:
            return  # the common case of someone else's reservation: do not touch it at all
    except OSError:
        return
    # Looked up before the link is moved aside, to keep the moment without one short.
    done_holder = _done_holder(layout, job_id, uid)
    try:
        tomb = _move_aside(layout, job_id)
    except OSError:
        return
    try:
        holder = _read_aside(tomb)
        if holder is not None and holder != uid:
            try:
                os.link(tomb, link, follow_symlinks=False)
            except FileExistsError:
                log.warning("id %s: a reservation changed hands while being released", job_id)
        elif holder is not None and done_holder is not None:
            # symlink() never overwrites: a job that reserved the id meanwhile (it found no
            # link) keeps it, and is judged by what it finds: the failed holder.
            with contextlib.suppress(FileExistsError):
                os.symlink(done_holder, link)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tomb)


def _done_holder(layout: SpoolLayout, job_id: str, uid: str) -> str | None:
    """The uid of a done job of ``job_id`` other than ``uid`` (one listing of done/), or None."""
    for name in list_names(layout.done):
        m = FINAL_NAME.fullmatch(name)
        if m is not None and m.group("id") == job_id and m.group("uid") != uid:
            return m.group("uid")
    return None


def _take_over(layout: SpoolLayout, job_id: str, expected: str, uid: str) -> bool:
    """Replace the reservation held by ``expected`` with ``uid``; False if it changed meanwhile.

    rename() moves whatever link is there now out of the way in one step; only if that
    link still named ``expected`` is the new one created (exclusively, so a job that
    reserved the freed id in the meantime wins). Otherwise the moved link is put back
    with link(), which refuses to overwrite, and the caller looks again.
    """
    link = layout.ids / job_id
    try:
        tomb = _move_aside(layout, job_id)
    except FileNotFoundError:
        return False
    try:
        holder = _read_aside(tomb)
        if holder is None:
            return False  # put back by another reservation of the id: look again
        if holder != expected:
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


def _move_aside(layout: SpoolLayout, job_id: str) -> Path:
    """Rename ``job_id``'s link into ids/.aside/ (FileNotFoundError if there is none).

    The aside name is unique to this call, so what is there is ours alone to read; being
    in ids/.aside/ (almost always empty) lets the next reservation of the id find it if
    this process dies before the link is re-created (:func:`_put_back`).
    """
    aside_dir = layout.ids / _ASIDE_DIR
    aside = aside_dir / f"{job_id}.{new_token()}"
    try:
        os.rename(layout.ids / job_id, aside)
    except FileNotFoundError:
        if os.path.isdir(aside_dir):
            raise
        # A spool made before ids/.aside/ existed: make it (mode of ids/), then move.
        with contextlib.suppress(FileExistsError):
            os.mkdir(aside_dir, 0o2755)
        os.rename(layout.ids / job_id, aside)
    crash_point("id-moved-aside")  # tests kill here: the link exists only as the aside
    return aside


def _read_aside(aside: Path) -> str | None:
    """The holder named by our aside link; None if another process already put it back."""
    try:
        return os.readlink(aside)
    except FileNotFoundError:
        return None


def _put_back(layout: SpoolLayout, job_id: str) -> None:
    """Restore ``job_id``'s reservation from an aside link a killed process left.

    link() creates the name only if it is free, so a reservation that exists (a live
    process's new link, or one made after a crash) always wins. The process that moved
    the link aside, if alive, finds its aside gone and looks again.
    """
    aside_dir = layout.ids / _ASIDE_DIR
    try:
        names = os.listdir(aside_dir)
    except FileNotFoundError:
        return
    for name in names:
        stem, _, token = name.rpartition(".")
        if stem != job_id or len(token) != TOKEN_HEX:
            continue
        aside = aside_dir / name
        try:
            os.link(aside, layout.ids / job_id, follow_symlinks=False)
        except FileExistsError:
            with contextlib.suppress(OSError):
                if time.time() - os.lstat(aside).st_ctime > _ASIDE_STALE_S:
                    os.unlink(aside)
            continue
        except FileNotFoundError:
            continue  # its process finished with it meanwhile
        log.warning("id %s: reservation %s restored (moved aside by a process that died)", job_id, name)
        with contextlib.suppress(OSError):
            os.unlink(aside)
