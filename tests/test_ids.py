"""Job id reservations in .spoolrender/ids/: who holds an id, and when it can be taken over."""

from __future__ import annotations

import os

import pytest

from spoolrender import ids
from spoolrender.errors import JobInvalid
from spoolrender.ids import release_id, reserve_id
from spoolrender.layout import SpoolLayout, final_name, new_token, retry_name, running_name

UID_A = "aaaaaaaaaaaa"
UID_B = "bbbbbbbbbbbb"
UID_C = "cccccccccccc"
TOKEN = "0123456789ab"


def holder(layout: SpoolLayout, job_id: str) -> str | None:
    try:
        return os.readlink(layout.ids / job_id)
    except FileNotFoundError:
        return None


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
    assert os.listdir(spool.ids) == ["clip"]


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
    assert os.listdir(spool.ids) == ["clip"]


def test_holder_in_failed_is_taken_over(spool: SpoolLayout) -> None:
    reserve_id(spool, "clip", UID_A, rerun=False)
    put_final(spool, "failed", "clip", UID_A)
    reserve_id(spool, "clip", UID_B, rerun=False)
    assert holder(spool, "clip") == UID_B
    assert os.listdir(spool.ids) == ["clip"]


def test_vanished_holder_is_taken_over(spool: SpoolLayout) -> None:
    reserve_id(spool, "clip", UID_A, rerun=False)
    reserve_id(spool, "clip", UID_B, rerun=False)
    assert holder(spool, "clip") == UID_B
    assert os.listdir(spool.ids) == ["clip"]


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
    assert os.listdir(spool.ids) == []


def test_release_of_unreserved_id_is_harmless(spool: SpoolLayout) -> None:
    release_id(spool, "never", UID_A)
    assert os.listdir(spool.ids) == []


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
