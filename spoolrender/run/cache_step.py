"""The render cache in a run: look up (or wait) before the render, store after its decision.

The executor calls :meth:`CacheStep.lookup` just before rendering, :meth:`CacheStep.store`
just after a verified render (which stages it: not yet an entry anyone can hit), and
:meth:`CacheStep.decided` once the run's decision is recorded: only a run decided as
PUBLISHING (its output verified, its job file still what it validated, its claim still
its own) makes the staged render an entry; any other end drops it. So the cache never
holds a render its own run refused. A hit leaves a verified hard link to the cached bytes
at ``request.output``, so the run goes on exactly as after a render: the normal fenced
PUBLISHING decision, and the job publishes once like any job.

Trouble with the cache itself (a full or read-only output filesystem, a cache on another
filesystem, a cache directory that is not the runner's alone) never fails a job: the run
renders as if the cache were off, says why in the log, and a refused cache also in the
run record (``"cache": "refused"`` and ``cache_refused``).
"""

from __future__ import annotations

import contextlib
import logging
import os
from dataclasses import dataclass
from typing import Any, Protocol

from spoolrender import defaults
from spoolrender.config.spool_config import SpoolConfig
from spoolrender.core.failpoints import crash_point
from spoolrender.errors import RenderCancelled, RenderError
from spoolrender.intake.claim import Claim
from spoolrender.render_cache.entries import WAITING_STAGE, Entry, RenderCache, Staged
from spoolrender.render_cache.in_flight import Holder, InFlight
from spoolrender.renderers.base import Renderer, RenderRequest, RenderResult
from spoolrender.spool.clock import Clock
from spoolrender.spool.heartbeat import HOSTNAME, HeartbeatWriter, LivenessTracker
from spoolrender.spool.layout import SpoolLayout
from spoolrender.spool.trusted_dirs import UntrustedDir

log = logging.getLogger(__name__)

# A run's use of the cache (the run record's "cache"): published from an entry; rendered
# and not stored; rendered and stored at its publish decision; not used because the
# cache's directories or the entry are not the runner's alone (cache_refused says why).
HIT, MISS, STORED, REFUSED = "hit", "miss", "stored", "refused"


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
    refused: str | None = None  # why the cache was not used (REFUSED)
    staged: Staged | None = None  # our verified render, waiting for the run's decision

    def record(self) -> dict[str, Any]:
        """The run record's (and result.json's) cache fields."""
        fields: dict[str, Any] = {"cache": self.outcome, "cache_key": self.key}
        if self.hit is not None:
            fields["cache_source"] = {k: self.hit.source.get(k) for k in ("id", "uid", "host", "run", "stored")}
        if self.waited:
            fields["cache_waited_seconds"] = round(self.waited, 3)
        if self.refused is not None:
            fields["cache_refused"] = self.refused
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
        self._pending: CacheTurn | None = None  # staged, holding its claim until the decision

    def lookup(self, renderer: Renderer, request: RenderRequest, claim: Claim) -> CacheTurn | None:
        """None when the job does not use the cache; else a hit (``request.output`` is then
        the cached file), or a miss whose render this run now holds the claim for.

        While an identical job renders elsewhere this waits, polling, with this run's
        heartbeat going on (its own thread) and its cancel token obeyed: a timeout, a
        shutdown, a lost claim or `spoolrender cancel` raise RenderCancelled as in a render.
        """
        self.decided(False)  # a run that ended without a decision (an exception) left one
        if not request.spec.uses_cache(self._config) or request.chunk is not None:
            return None
        key = renderer.cache_key(request)  # a RenderError here is the render's own error
        if key is None:
            return None
        turn = CacheTurn(key)
        refusal = self.cache.refusal()
        if refusal is not None:
            return self._refused(turn, claim, refusal)
        try:
            self._wait_turn(turn, request, claim)
        except UntrustedDir as exc:  # an entry's directory turned foreign meanwhile
            self.release(turn)
            return self._refused(turn, claim, str(exc))
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

    def _refused(self, turn: CacheTurn, claim: Claim, why: str) -> CacheTurn:
        """Render without the cache, and say why in the log and the run record: a cache
        another user can write to is sabotage of the cache, never a reason to fail the job."""
        log.warning("job %s: render cache not used: %s", claim.job_id, why)
        turn.outcome, turn.refused = REFUSED, why
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
        except (OSError, RenderError, UntrustedDir):  # the whole render's lookup meets the same trouble and says so
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
        """Stage a verified render (a miss): it becomes an entry only at :meth:`decided`,
        if the run is then decided as PUBLISHING. Until then this run keeps the key's
        in-flight claim, so that identical jobs wait for the entry instead of rendering."""
        if turn is None or turn.hit is not None or turn.refused is not None:
            return
        source = {"id": claim.job_id, "uid": claim.uid, "host": HOSTNAME, "run": claim.run,
                  "stored": self._clock.wall()}  # fmt: skip
        try:
            staged = self.cache.stage(turn.key, request.output, source, result.details)
        except (OSError, UntrustedDir) as exc:
            log.warning("job %s: could not store the render in the cache: %s", claim.job_id, exc)
            return
        if staged.name is None:
            log.info("job %s: render not stored in the cache: %s", claim.job_id, staged.why_not)
            return
        turn.staged, turn.outcome = staged, STORED
        self._pending = turn

    def decided(self, publishing: bool) -> None:
        """This slot's run is decided (``publishing``: as PUBLISHING, by this run): its
        staged render becomes the key's entry, or is dropped; waiters may go on."""
        turn, self._pending = self._pending, None
        if turn is None or turn.staged is None:
            return
        staged, turn.staged = turn.staged, None
        try:
            if not publishing:
                self.cache.discard(staged)
                return
            try:
                stored = self.cache.commit(staged)
            except (OSError, UntrustedDir) as exc:
                log.warning("render cache: could not store the render of %s: %s", staged.key[:16], exc)
                return
            if not stored.stored:
                log.info("render cache: render of %s not stored: %s", staged.key[:16], stored.why_not)
                return
            if self._metrics is not None:
                self._metrics.stored(len(stored.evicted), stored.total_bytes)
        finally:
            self.release(turn)
        crash_point("cache-after-store")

    def release(self, turn: CacheTurn | None) -> None:
        """The render is over (failed or cancelled, or decided: :meth:`decided`): waiters
        may go on. A staged render keeps its claim until its run's decision."""
        if turn is None or turn.holding is None or turn.staged is not None:
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
