"""Job id reservations in .spoolrender/ids/: who holds an id, and when it can be taken over."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from spoolrender.errors import JobInvalid
from spoolrender.spool import ids, layout
from spoolrender.spool.ids import release_id, reserve_id
from spoolrender.spool.layout import SpoolLayout, final_name, new_token, retry_name, running_name

UID_A = "aaaaaaaaaaaa"
UID_B = "bbbbbbbbbbbb"
UID_C = "cccccccccccc"
TOKEN = "0123456789ab"


def holder(layout: SpoolLayout, job_id: str) -> str | None:
    try:
        return os.readlink(layout.ids / job_id)
    except FileNotFoundError:
        return None


def id_entries(layout: SpoolLayout) -> list[str]:
    """The reservations in ids/, and anything left in ids/.aside/ (moved aside, never put back)."""
    aside = layout.ids / ".aside"
    left = [f".aside/{name}" for name in os.listdir(aside)] if aside.exists() else []
    return sorted(name for name in os.listdir(layout.ids) if name != ".aside") + left


def put_running(layout: SpoolLayout, job_id: str, uid: str) -> str:
    name = running_name(job_id, uid, TOKEN)
    (layout.running / name).mkdir()
    return name


def put_final(layout: SpoolLayout, state: str, job_id: str, uid: str) -> str:
    name = final_name(job_id, uid)
    (layout.state_dir(state) / name).mkdir()
    return name


def test_uids_and_tokens_are_12_hex() -> None:
    token = new_token()
    assert len(token) == 12
    int(token, 16)
    assert running_name("clip", UID_A, TOKEN) == f"clip.{UID_A}.{TOKEN}"


def test_first_reservation_wins(spool: SpoolLayout) -> None:
    reserve_id(spool, "clip", UID_A, rerun=False)
    assert holder(spool, "clip") == UID_A
    name = put_running(spool, "clip", UID_A)
    with pytest.raises(JobInvalid) as info:
        reserve_id(spool, "clip", UID_B, rerun=False)
    assert info.value.problems == [f"field 'id': 'clip' is already queued or running (running/{name})"]
    assert holder(spool, "clip") == UID_A


def test_same_uid_again_is_fine(spool: SpoolLayout) -> None:
    reserve_id(spool, "clip", UID_A, rerun=False)
    put_running(spool, "clip", UID_A)
    reserve_id(spool, "clip", UID_A, rerun=False)
    reserve_id(spool, "clip", UID_A, rerun=True)
    assert holder(spool, "clip") == UID_A
    assert id_entries(spool) == ["clip"]


def test_rerun_does_not_take_over_a_running_holder(spool: SpoolLayout) -> None:
    reserve_id(spool, "clip", UID_A, rerun=False)
    put_running(spool, "clip", UID_A)
    with pytest.raises(JobInvalid, match="already queued or running"):
        reserve_id(spool, "clip", UID_B, rerun=True)
    assert holder(spool, "clip") == UID_A


def test_holder_waiting_in_retry_blocks(spool: SpoolLayout) -> None:
    reserve_id(spool, "clip", UID_A, rerun=False)
    name = retry_name("clip", UID_A, 1_800_000_000.0, 0)
    (spool.retry / name).mkdir()
    with pytest.raises(JobInvalid) as info:
        reserve_id(spool, "clip", UID_B, rerun=True)
    assert info.value.problems == [f"field 'id': 'clip' is already queued or running (retry/{name})"]
    assert holder(spool, "clip") == UID_A


def test_holder_in_done_blocks_unless_rerun(spool: SpoolLayout) -> None:
    reserve_id(spool, "clip", UID_A, rerun=False)
    name = put_final(spool, "done", "clip", UID_A)
    with pytest.raises(JobInvalid) as info:
        reserve_id(spool, "clip", UID_B, rerun=False)
    assert len(info.value.problems) == 1
    line = info.value.problems[0]
    assert line.startswith(f"field 'id': 'clip' was already rendered (done/{name})")
    assert "rerun: true" in line
    assert holder(spool, "clip") == UID_A
    reserve_id(spool, "clip", UID_B, rerun=True)
    assert holder(spool, "clip") == UID_B
    assert id_entries(spool) == ["clip"]


def test_holder_in_failed_is_taken_over(spool: SpoolLayout) -> None:
    reserve_id(spool, "clip", UID_A, rerun=False)
    put_final(spool, "failed", "clip", UID_A)
    reserve_id(spool, "clip", UID_B, rerun=False)
    assert holder(spool, "clip") == UID_B
    assert id_entries(spool) == ["clip"]


def test_vanished_holder_is_taken_over(spool: SpoolLayout) -> None:
    reserve_id(spool, "clip", UID_A, rerun=False)
    reserve_id(spool, "clip", UID_B, rerun=False)
    assert holder(spool, "clip") == UID_B
    assert id_entries(spool) == ["clip"]


def test_holder_matched_by_uid_not_by_id(spool: SpoolLayout) -> None:
    # Another job (other uid) with the same id sits in running/; the holder itself is gone.
    reserve_id(spool, "clip", UID_A, rerun=False)
    put_running(spool, "clip", UID_C)
    reserve_id(spool, "clip", UID_B, rerun=False)
    assert holder(spool, "clip") == UID_B


def test_ids_are_independent(spool: SpoolLayout) -> None:
    reserve_id(spool, "one", UID_A, rerun=False)
    put_running(spool, "one", UID_A)
    reserve_id(spool, "two", UID_B, rerun=False)
    assert holder(spool, "one") == UID_A
    assert holder(spool, "two") == UID_B


def test_release_only_by_holder(spool: SpoolLayout) -> None:
    reserve_id(spool, "clip", UID_A, rerun=False)
    release_id(spool, "clip", UID_B)
    assert holder(spool, "clip") == UID_A
    release_id(spool, "clip", UID_A)
    assert holder(spool, "clip") is None
    assert id_entries(spool) == []


def test_release_of_unreserved_id_is_harmless(spool: SpoolLayout) -> None:
    release_id(spool, "never", UID_A)
    assert id_entries(spool) == []


def test_released_id_can_be_reserved_again(spool: SpoolLayout) -> None:
    reserve_id(spool, "clip", UID_A, rerun=False)
    put_final(spool, "failed", "clip", UID_A)
    release_id(spool, "clip", UID_A)
    reserve_id(spool, "clip", UID_B, rerun=False)
    put_running(spool, "clip", UID_B)
    assert holder(spool, "clip") == UID_B
    with pytest.raises(JobInvalid, match="already queued or running"):
        reserve_id(spool, "clip", UID_C, rerun=False)


def test_takeover_does_not_overwrite_a_reservation_made_meanwhile(
    spool: SpoolLayout, monkeypatch: pytest.MonkeyPatch
) -> None:
    reserve_id(spool, "clip", UID_A, rerun=False)
    put_final(spool, "failed", "clip", UID_A)  # A failed: its id may be taken over
    real_where_is = ids._where_is
    interleaved: list[str] = []

    def where_is(layout: SpoolLayout, uid: str) -> str | None:
        result = real_where_is(layout, uid)
        if not interleaved:
            # While C looks up A, B takes the id over too and starts running.
            interleaved.append(uid)
            reserve_id(spool, "clip", UID_B, rerun=False)
            put_running(spool, "clip", UID_B)
        return result

    monkeypatch.setattr(ids, "_where_is", where_is)
    assert holder(spool, "clip") == UID_A
    with pytest.raises(JobInvalid, match="already queued or running"):
        reserve_id(spool, "clip", UID_C, rerun=False)
    assert holder(spool, "clip") == UID_B


def _entry(layout: SpoolLayout, state: str, job_id: str, uid: str) -> Path:
    name = {
        "running": running_name(job_id, uid, TOKEN),
        "retry": retry_name(job_id, uid, 1_800_000_000.0, 0),
        "failed": final_name(job_id, uid),
    }[state]
    return layout.state_dir(state) / name


def _move(layout: SpoolLayout, src: str, dst: str, job_id: str, uid: str) -> None:
    """Move job ``uid`` between two states the way runners do (one rename of its entry)."""
    os.rename(_entry(layout, src, job_id, uid), _entry(layout, dst, job_id, uid))


# A claim, a run ending in retry/, and `spoolrender retry` of a holder that died in failed/
# before releasing its id: each leaves the holder live.
MOVES = [("retry", "running"), ("running", "retry"), ("failed", "retry")]


@pytest.mark.parametrize("move", MOVES, ids=[f"{a}->{b}" for a, b in MOVES])
@pytest.mark.parametrize("after_listing", range(8))
def test_holder_moving_during_the_lookup_is_never_missed(
    spool: SpoolLayout, monkeypatch: pytest.MonkeyPatch, move: tuple[str, str], after_listing: int
) -> None:
    """Issue 12 item 1: the holder moves between two directory listings of the duplicate's
    lookup (forced: right after its n-th listing). A retry claim (retry -> running) made
    after the first lookup's running/ listing made the old lookup see it nowhere: the
    duplicate took the id over while the holder, past its own reserve_id, rendered too."""
    src, dst = move
    reserve_id(spool, "clip", UID_A, rerun=False)
    _entry(spool, src, "clip", UID_A).mkdir()  # in failed/: died before releasing its id
    real = layout.list_names
    calls: list[Path] = []

    def list_names(directory: Path) -> list[str]:
        listed = real(directory)
        calls.append(directory)
        if len(calls) == after_listing + 1:
            _move(spool, src, dst, "clip", UID_A)
            if dst == "running":
                reserve_id(spool, "clip", UID_A, rerun=False)  # the holder passes its own check
        return listed

    monkeypatch.setattr(ids, "list_names", list_names)
    with pytest.raises(JobInvalid, match="already queued or running"):
        reserve_id(spool, "clip", UID_B, rerun=False)
    assert holder(spool, "clip") == UID_A


def test_holder_sent_round_again_during_the_takeover_keeps_its_id(
    spool: SpoolLayout, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The holder sat in failed/ (its release lost in a crash) when the duplicate looked; before
    the duplicate's swap, `spoolrender retry` sent it round and a runner claimed it, its
    reserve_id passing on the old link. The duplicate must give the id back."""
    reserve_id(spool, "clip", UID_A, rerun=False)
    put_final(spool, "failed", "clip", UID_A)
    real = ids._take_over
    swaps: list[str] = []

    def take_over(layout: SpoolLayout, job_id: str, expected: str, uid: str) -> bool:
        if not swaps:
            _move(spool, "failed", "retry", "clip", UID_A)
            _move(spool, "retry", "running", "clip", UID_A)
            reserve_id(spool, "clip", UID_A, rerun=False)
        swaps.append(uid)
        return real(layout, job_id, expected, uid)

    monkeypatch.setattr(ids, "_take_over", take_over)
    with pytest.raises(JobInvalid, match="already queued or running"):
        reserve_id(spool, "clip", UID_B, rerun=False)
    assert holder(spool, "clip") == UID_A
    assert swaps == [UID_B, UID_A]  # taken, then given back


def test_release_never_deletes_a_reservation_taken_over_meanwhile(
    spool: SpoolLayout, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A's release read the link (its own), then B took the id over before the unlink."""
    reserve_id(spool, "clip", UID_A, rerun=False)
    put_final(spool, "failed", "clip", UID_A)
    real = os.readlink
    seen: list[str] = []

    def readlink(path: os.PathLike[str] | str, *args: object, **kwargs: object) -> str:
        target = real(path)
        if not seen and Path(path).name == "clip":
            seen.append(target)
            reserve_id(spool, "clip", UID_B, rerun=False)  # B takes the failed holder's id over
        return target

    monkeypatch.setattr(os, "readlink", readlink)
    release_id(spool, "clip", UID_A)
    monkeypatch.undo()
    assert seen == [UID_A]
    assert holder(spool, "clip") == UID_B


# A process that changes a reservation, killed (a real SIGKILL, from the failpoint) right
# after it renamed the link into ids/.aside/, before re-creating or putting it back.
KILLED_AT_ASIDE = """
import sys
from pathlib import Path
from spoolrender.spool.ids import release_id, reserve_id
from spoolrender.spool.layout import SpoolLayout

layout, action, uid = SpoolLayout(Path(sys.argv[1])), sys.argv[2], sys.argv[3]
if action == "reserve":
    reserve_id(layout, "clip", uid, rerun=False)
else:
    release_id(layout, "clip", uid)
"""


def killed_at_aside(layout: SpoolLayout, action: str, uid: str) -> None:
    env = {**os.environ, "SPOOLRENDER_CRASH_AT": "id-moved-aside"}
    argv = [sys.executable, "-c", KILLED_AT_ASIDE, str(layout.root), action, uid]
    assert subprocess.run(argv, env=env, timeout=120, check=False).returncode == -signal.SIGKILL
    assert holder(layout, "clip") is None  # the reservation exists only as the aside link
    assert len(id_entries(layout)) == 1  # the aside link


def test_reservation_moved_aside_by_a_killed_takeover_is_put_back(spool: SpoolLayout) -> None:
    """B took the id over from A (failed) and was killed with A's link aside; then A was sent
    round again (`spoolrender retry`). A waits in retry/ holding its id: C must not get it."""
    reserve_id(spool, "clip", UID_A, rerun=False)
    put_final(spool, "failed", "clip", UID_A)
    killed_at_aside(spool, "reserve", UID_B)
    _move(spool, "failed", "retry", "clip", UID_A)
    with pytest.raises(JobInvalid, match="already queued or running"):
        reserve_id(spool, "clip", UID_C, rerun=False)
    assert holder(spool, "clip") == UID_A
    assert id_entries(spool) == ["clip"]


def test_reservation_moved_aside_by_a_killed_release_is_put_back_and_stays_free(spool: SpoolLayout) -> None:
    """A failed; its release was killed with the link aside. Put back, it names a failed
    job, which never blocks: the id is free for C as a finished release would leave it."""
    reserve_id(spool, "clip", UID_A, rerun=False)
    put_final(spool, "failed", "clip", UID_A)
    killed_at_aside(spool, "release", UID_A)
    reserve_id(spool, "clip", UID_C, rerun=False)
    assert holder(spool, "clip") == UID_C
    assert id_entries(spool) == ["clip"]


def test_an_aside_link_never_replaces_a_reservation_made_after_the_crash(spool: SpoolLayout) -> None:
    reserve_id(spool, "clip", UID_A, rerun=False)
    put_final(spool, "failed", "clip", UID_A)
    killed_at_aside(spool, "release", UID_A)
    os.symlink(UID_B, spool.ids / "clip")  # B reserved the free name (before any put-back)
    put_running(spool, "clip", UID_B)
    with pytest.raises(JobInvalid, match="already queued or running"):
        reserve_id(spool, "clip", UID_C, rerun=False)
    assert holder(spool, "clip") == UID_B
