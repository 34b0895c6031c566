"""The render cache's steps in a run (spoolrender.run.cache_step.CacheStep), called as
the executor calls them, with real claims on a real spool: a verified render becomes an
entry only when its run is decided as publishing, it keeps the key's in-flight claim until
then, an identical job waits for a live holder (and obeys its cancel), a hit is a verified
link to the entry, and a cache another user could write is refused, never an error."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from support.frame_fake import FrameFake
from support.unit_spool import Slot

from spoolrender.errors import RenderCancelled
from spoolrender.intake.claim import Claim
from spoolrender.render_cache.in_flight import InFlight
from spoolrender.renderers.base import RenderRequest, RenderResult
from spoolrender.run.cache_step import HIT, MISS, REFUSED, STORED, CacheStep, CacheTurn
from spoolrender.spool.heartbeat import LivenessTracker
from spoolrender.testing import make_request

JOB = {"composition": "Intro", "props": {"title": "Week 48"}, "output": "x.mp4"}


@pytest.fixture
def slot(tmp_path: Path) -> Slot:
    return Slot(tmp_path / "spool", {"render_cache": True}, fake=FrameFake(cached=True))


def claimed(slot: Slot, name: str) -> Claim:
    slot.drop(f"{name}.yaml", {**JOB, "id": name})
    [candidate] = [c for c in slot.scan().candidates if c.name == f"{name}.yaml"]
    claim = slot.claim(candidate)
    assert claim is not None
    return claim


def request_for(slot: Slot, name: str, **job: Any) -> RenderRequest:
    return make_request(slot.config, {**JOB, "id": name, **job}, slot.layout.root.parent / f"req-{name}")


def step(slot: Slot) -> CacheStep:
    return CacheStep(slot.layout, slot.config, slot.clock, slot.heartbeat)


def flight(slot: Slot) -> InFlight:
    return InFlight(slot.config.output_root / ".spoolrender-cache", slot.layout, 60.0, LivenessTracker(slot.clock))


def rendered(request: RenderRequest, data: bytes = b"frames of week 48") -> RenderResult:
    request.output.write_bytes(data)
    return RenderResult(details={"frames": 90})


def published(slot: Slot, cache: CacheStep, name: str) -> CacheTurn:
    """Job ``name`` claimed, missed, rendered and decided as publishing: its render is the
    key's entry."""
    claim, request = claimed(slot, name), request_for(slot, name)
    turn = cache.lookup(slot.fake, request, claim)
    assert turn is not None
    cache.store(turn, request, claim, rendered(request))
    cache.decided(True)
    return turn


def test_a_render_becomes_an_entry_only_when_its_run_is_decided_as_publishing(slot: Slot) -> None:
    cache = step(slot)
    claim, request = claimed(slot, "first"), request_for(slot, "first")
    turn = cache.lookup(slot.fake, request, claim)
    assert turn is not None and turn.outcome == MISS and turn.holding == 1
    cache.store(turn, request, claim, rendered(request))
    assert turn.outcome == STORED
    assert cache.cache.read_entry(turn.key) is None  # staged: nobody can hit it yet
    cache.release(turn)  # the render is over, the decision not yet made
    holder = flight(slot).current(turn.key)
    assert holder is not None and holder.job_id == "first"  # identical jobs still wait for it
    cache.decided(True)
    entry = cache.cache.read_entry(turn.key)
    assert entry is not None and entry.source["id"] == "first" and entry.details == {"frames": 90}
    assert flight(slot).current(turn.key) is None  # released at the decision
    assert cache.holds(slot.fake, request_for(slot, "again"))


def test_a_render_its_run_did_not_publish_is_dropped(slot: Slot) -> None:
    cache = step(slot)
    claim, request = claimed(slot, "first"), request_for(slot, "first")
    turn = cache.lookup(slot.fake, request, claim)
    assert turn is not None
    cache.store(turn, request, claim, rendered(request))
    cache.decided(False)  # its output changed, its claim was lost...
    assert cache.cache.read_entry(turn.key) is None
    assert cache.cache.list_entries() == []
    assert flight(slot).current(turn.key) is None
    assert not cache.holds(slot.fake, request_for(slot, "again"))


def test_an_identical_job_is_a_verified_link_to_the_entry(slot: Slot) -> None:
    cache = step(slot)
    turn = published(slot, cache, "first")
    again_claim, again = claimed(slot, "again"), request_for(slot, "again")
    hit = cache.lookup(slot.fake, again, again_claim)
    assert hit is not None and hit.outcome == HIT and hit.key == turn.key
    assert again.output.read_bytes() == b"frames of week 48"
    assert os.stat(again.output).st_ino == os.stat(hit.hit.output).st_ino  # type: ignore[union-attr]
    assert cache.hit_result(hit).details == {"frames": 90}
    assert hit.record()["cache_source"]["id"] == "first"
    cache.store(hit, again, again_claim, RenderResult())  # a hit stores nothing...
    cache.decided(True)  # ...also once its run publishes
    assert cache.cache.list_entries()[0].source["id"] == "first"
    other = cache.lookup(slot.fake, request_for(slot, "other", props={"title": "Week 49"}), claimed(slot, "other"))
    assert other is not None and other.outcome == MISS and other.key != turn.key


def test_an_identical_job_waits_for_a_live_holder_and_obeys_its_cancel(slot: Slot) -> None:
    cache = step(slot)
    first = cache.lookup(slot.fake, request_for(slot, "first"), claimed(slot, "first"))
    assert first is not None and first.holding == 1  # rendering, its run alive in running/
    waiter_claim, waiter = claimed(slot, "again"), request_for(slot, "again")
    waiter_claim.cancel.cancel("user")  # as `spoolrender cancel` during the wait
    with pytest.raises(RenderCancelled) as cancelled:
        step(slot).lookup(slot.fake, waiter, waiter_claim)
    assert cancelled.value.reason == "user"
    assert "waiting for job first" in waiter.log.read_text()
    assert flight(slot).current(first.key).job_id == "first"  # type: ignore[union-attr]


def test_a_job_that_does_not_use_the_cache_or_has_no_key_never_touches_it(slot: Slot) -> None:
    cache = step(slot)
    claim = claimed(slot, "first")
    assert cache.lookup(slot.fake, request_for(slot, "first", cache=False), claim) is None
    assert cache.lookup(FrameFake(cached=False), request_for(slot, "first"), claim) is None
    assert not (slot.config.output_root / ".spoolrender-cache").exists()


def test_a_cache_its_group_may_write_is_refused_with_the_reason_and_the_job_renders(slot: Slot) -> None:
    cache = step(slot)
    published(slot, cache, "first")
    os.chmod(slot.config.output_root / ".spoolrender-cache", 0o775)
    again = cache.lookup(slot.fake, request_for(slot, "again"), claimed(slot, "again"))
    assert again is not None and again.outcome == REFUSED and again.hit is None
    assert "writ" in (again.refused or "")
    assert again.record()["cache"] == REFUSED and again.record()["cache_refused"] == again.refused


def test_a_turn_records_only_the_fields_that_happened() -> None:
    assert CacheTurn("k").record() == {"cache": MISS, "cache_key": "k"}
    waited = CacheTurn("k", waited=1.23456, outcome=STORED).record()
    assert waited == {"cache": STORED, "cache_key": "k", "cache_waited_seconds": 1.235}
