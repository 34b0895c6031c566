"""The render cache in a run: look up (or wait) before the render, store after it.

The executor calls :meth:`CacheStep.lookup` just before rendering and
:meth:`CacheStep.store` just after a verified render, and :meth:`CacheStep.release` when
the render is over either way. A hit leaves a verified hard link to the cached bytes at
``request.output``, so the run goes on exactly as after a render: the normal fenced
PUBLISHING decision, and the job publishes once like any job.

Trouble with the cache itself (a full or read-only output filesystem, a cache on another
filesystem) never fails a job: the run renders as if the cache were off, and says why in
the log.
"""

from __future__ import annotations

import contextlib
import logging
import os
from dataclasses import dataclass
from typing import Any, Protocol

from spoolrender import defaults
from spoolrender.claim import Claim
from spoolrender.clock import Clock
from spoolrender.config import SpoolConfig
from spoolrender.errors import RenderCancelled, RenderError
from spoolrender.failpoints import crash_point
from spoolrender.heartbeat import HOSTNAME, HeartbeatWriter, LivenessTracker
from spoolrender.layout import SpoolLayout
from spoolrender.render_cache import WAITING_STAGE, Entry, RenderCache
from spoolrender.render_cache_flight import Holder, InFlight
from spoolrender.renderers.base import Renderer, RenderRequest, RenderResult

log = logging.getLogger(__name__)

HIT, MISS, STORED = "hit", "miss", "stored"


class CacheMetrics(Protocol):
    """What the runner counts (metrics.RenderCacheMetrics)."""

    def looked_up(self, hit: bool) -> None: ...

    def stored(self, evicted: int, total_bytes: int | None) -> None: ...


@dataclass
class CacheTurn:
    """One run's use of the cache: its key, and a hit or the claim it holds to render."""

    key: str
    hit: Entry | None = None
    holding: int | None = None  # our in-flight claim number while we render the key
    waited: float = 0.0  # seconds spent waiting for an identical job
    outcome: str = MISS

    def record(self) -> dict[str, Any]:
        """The run record's (and result.json's) cache fields."""
        fields: dict[str, Any] = {"cache": self.outcome, "cache_key": self.key}
        if self.hit is not None:
            fields["cache_source"] = {k: self.hit.source.get(k) for k in ("id", "uid", "host", "run", "stored")}
        if self.waited:
            fields["cache_waited_seconds"] = round(self.waited, 3)
        return fields


class CacheStep:
    """The cache steps of one job slot."""

    def __init__(
        self,
        layout: SpoolLayout,
        config: SpoolConfig,
        clock: Clock,
        heartbeat: HeartbeatWriter,
        metrics: CacheMetrics | None = None,
    ) -> None:
        self._config = config
        self._clock = clock
        self._heartbeat = heartbeat
        self._metrics = metrics
        self.cache = RenderCache(config.output_root, config.render_cache_max_bytes)
        self._layout = layout

    def lookup(self, renderer: Renderer, request: RenderRequest, claim: Claim) -> CacheTurn | None:
        """None when the job does not use the cache; else a hit (``request.output`` is then
        the cached file), or a miss whose render this run now holds the claim for.

        While an identical job renders elsewhere this waits, polling, with this run's
        heartbeat going on (its own thread) and its cancel token obeyed: a timeout, a
        shutdown, a lost claim or `spoolrender cancel` raise RenderCancelled as in a render.
        """
        if not request.spec.uses_cache(self._config) or request.chunk is not None:
            return None
        key = renderer.cache_key(request)  # a RenderError here is the render's own error
        if key is None:
            return None
        refusal = self.cache.refusal()
        if refusal is not None:
            log.warning("job %s: render cache not used: %s", claim.job_id, refusal)
            return None
        turn = CacheTurn(key)
        try:
            self._wait_turn(turn, request, claim)
        except OSError as exc:
            log.warning("job %s: render cache not used: %s", claim.job_id, exc)
            self.release(turn)
            return None
        if self._metrics is not None:
            self._metrics.looked_up(turn.hit is not None)
        if turn.hit is not None:
            crash_point("cache-after-hit")
            turn.outcome = HIT
            self._heartbeat.set_progress(claim.token, 1.0, "published from the render cache")
            source = turn.hit.source
            _note(claim, request, f"render cache hit: {key[:16]}, rendered by job {source.get('id')} "
                                  f"(uid {source.get('uid')}); not rendered")  # fmt: skip
        elif turn.waited:
            self._heartbeat.set_progress(claim.token, None, None)  # rendering now, no longer waiting
        return turn

    def holds(self, renderer: Renderer, request: RenderRequest) -> bool:
        """Whether the cache has an entry for this job now (no claim taken, nothing waited
        for, the entry not yet verified): a split job that would be a hit is not split but
        published by :meth:`lookup` (which verifies it; a bad entry is then rendered whole)."""
        if not request.spec.uses_cache(self._config) or request.chunk is not None:
            return False
        try:
            key = renderer.cache_key(request)
            return key is not None and self.cache.refusal() is None and self.cache.read_entry(key) is not None
        except (OSError, RenderError):  # the whole render's lookup meets the same trouble and says so
            return False

    def _wait_turn(self, turn: CacheTurn, request: RenderRequest, claim: Claim) -> None:
        """Until a hit, or until this run holds the key's in-flight claim; OSError on trouble."""
        flight = self._flight()
        me = Holder(0, claim.key, claim.token, HOSTNAME, os.getpid(), claim.job_id, claim.uid, claim.run)
        started = self._clock.monotonic()
        waited_for: Holder | None = None
        while not self._take(turn, request):
            holder = flight.current(turn.key)
            if holder is None or not flight.alive(holder):
                number = 1 if holder is None else holder.number + 1
                if not flight.try_hold(turn.key, number, me):
                    continue  # another contender won that number: look again at once
                turn.holding = number
                crash_point("cache-after-hold")
                # Stored between our look and our claim (the holder finished and released):
                # a hit after all.
                if self._take(turn, request):
                    self.release(turn)
                elif waited_for is not None:
                    gone = "left no entry (its render failed or was not stored)" if holder is None else (
                        "is gone (its run ended or its runner died)")  # fmt: skip
                    _note(claim, request, f"job {waited_for.job_id}, which rendered the same inputs, {gone}; "
                                          "rendering here")  # fmt: skip
                break
            if waited_for is None:
                _note(claim, request, f"waiting for job {holder.job_id} (uid {holder.uid}), which renders the "
                                      "same inputs; its output will be published from the render cache")  # fmt: skip
                self._heartbeat.set_progress(claim.token, None, WAITING_STAGE)
            waited_for = holder
            if claim.cancel.wait(defaults.RENDER_CACHE_POLL_S):
                raise RenderCancelled(claim.cancel.reason or "cancelled")
        if waited_for is not None:
            turn.waited = self._clock.monotonic() - started
        if turn.hit is not None:
            flight.clear_ended(turn.key)  # a holder killed after storing left its claim behind

    def _flight(self) -> InFlight:
        # A tracker of its own per look: a holder's silence is timed from this waiter's first sight.
        return InFlight(self.cache.root, self._layout, self._config.lease_seconds, LivenessTracker(self._clock))

    def _take(self, turn: CacheTurn, request: RenderRequest) -> bool:
        turn.hit = self.cache.take(turn.key, request.output)
        return turn.hit is not None

    def hit_result(self, turn: CacheTurn) -> RenderResult:
        """The render result of a hit: the source render's details."""
        assert turn.hit is not None
        return RenderResult(details=dict(turn.hit.details))

    def store(self, turn: CacheTurn | None, request: RenderRequest, claim: Claim, result: RenderResult) -> None:
        """Store a verified render (a miss) before the run's publish decision."""
        if turn is None or turn.hit is not None:
            return
        source = {"id": claim.job_id, "uid": claim.uid, "host": HOSTNAME, "run": claim.run,
                  "stored": self._clock.wall()}  # fmt: skip
        try:
            stored = self.cache.store(turn.key, request.output, source, result.details)
        except OSError as exc:
            log.warning("job %s: could not store the render in the cache: %s", claim.job_id, exc)
            return
        if not stored.stored:
            log.info("job %s: render not stored in the cache: %s", claim.job_id, stored.why_not)
            return
        crash_point("cache-after-store")
        turn.outcome = STORED
        if self._metrics is not None:
            self._metrics.stored(len(stored.evicted), stored.total_bytes)

    def release(self, turn: CacheTurn | None) -> None:
        """The render is over (stored, failed or cancelled): waiters may go on."""
        if turn is None or turn.holding is None:
            return
        flight = self._flight()
        try:
            flight.release(turn.key, turn.holding)
        except OSError as exc:  # a waiter then takes over once our run has left running/
            log.warning("could not release the render cache claim of %s: %s", turn.key[:16], exc)
        turn.holding = None


def _note(claim: Claim, request: RenderRequest, text: str) -> None:
    """A line in the job's log and in the run log (which tells the whole story of a run)."""
    log.info("job %s: %s", claim.job_id, text)
    with contextlib.suppress(OSError), open(request.log, "ab") as fh:
        fh.write(f"--- {text}\n".encode())
