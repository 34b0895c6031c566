"""Who renders a cache key right now, so that identical jobs render once.

``<cache>/inflight/<key>/`` holds numbered claims (``000001``, ``000002``, ...), each
created exclusively with :func:`~spoolrender.spool.durable.create_exclusive` (link(), atomic
even on NFS) and naming the running job that holds it (its ``running/`` entry, token,
host). The highest number is the current holder. A job that misses the cache:

- finds no claim, or the current holder dead: creates the next number; exactly one of
  several contenders wins it, the others see the winner as the holder and wait;
- finds a live holder: waits for its entry to appear (then it is a hit), or for the
  holder to give up (its render failed: the claim is removed, and the waiter renders).

A holder is live while it is what a run is, fenced the same way (spool/heartbeat.py, recovery):
its ``running/`` entry still exists, and its heartbeat changes within the lease as this
observer times it on its own monotonic clock (on the holder's own host, a free flock
proves it dead at once). A holder's entry that left ``running/`` (decided, recovered) holds
nothing. Waiting longer or taking over wrongly only costs a render, never a wrong
output: every stored entry is a verified render of its key.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from dataclasses import asdict, dataclass
from pathlib import Path

from spoolrender.render_cache.entries import INFLIGHT
from spoolrender.spool.durable import create_exclusive
from spoolrender.spool.heartbeat import HOSTNAME, LivenessTracker, lock_is_free, read_heartbeat
from spoolrender.spool.layout import SpoolLayout, list_names
from spoolrender.spool.trusted_dirs import TRUSTED_DIR_MODE

CLAIM_NAME = re.compile(r"\d{6,}")


@dataclass(frozen=True)
class Holder:
    """A claim on rendering a key: the running job that holds it."""

    number: int
    job: str  # its running/ entry name
    token: str
    host: str
    pid: int
    job_id: str
    uid: str
    run: int


class InFlight:
    """The in-flight claims of one cache, judged against one spool's running/ jobs."""

    def __init__(self, cache_root: Path, layout: SpoolLayout, lease_seconds: float, tracker: LivenessTracker) -> None:
        self.root = cache_root / INFLIGHT
        self._layout = layout
        self._lease = lease_seconds
        self._tracker = tracker

    def current(self, key: str) -> Holder | None:
        """The highest-numbered claim of ``key`` (None if there is none)."""
        numbers = sorted(int(n) for n in list_names(self.root / key) if CLAIM_NAME.fullmatch(n))
        for number in reversed(numbers):
            try:
                raw = json.loads((self.root / key / f"{number:06d}").read_bytes())
                return Holder(**{**raw, "number": number})
            except FileNotFoundError:
                continue  # released meanwhile: the next lower one is the question now
            except (OSError, ValueError, TypeError):
                # Unreadable: it names no live job, so it holds nothing (and is replaced).
                return Holder(number, "", "", "", 0, "", "", 0)
        return None

    def alive(self, holder: Holder) -> bool:
        """Whether ``holder``'s run is still going, by the rules a recoverer uses."""
        if not holder.job:
            return False
        job_dir = self._layout.running / holder.job
        if not job_dir.is_dir():
            return False  # its run ended (decided, recovered): it renders nothing any more
        hb = read_heartbeat(job_dir)
        if hb is not None and hb.host == HOSTNAME and hb.token == holder.token and lock_is_free(job_dir, hb.token):
            return False  # its runner died: the kernel released the claim's lock
        signature = None if hb is None else [hb.token, hb.counter]
        return self._tracker.silent_for(f"{holder.job}", signature) < self._lease

    def try_hold(self, key: str, number: int, holder: Holder) -> bool:
        """Create claim ``number`` of ``key`` for ``holder``; True if this call did."""
        directory = self.root / key
        for level in (self.root.parent, self.root, directory):
            # Mode 0755 whatever the umask: a cache directory its group may write to is
            # refused (render_cache.RenderCache.refusal), and parents=True would ignore it.
            level.mkdir(mode=TRUSTED_DIR_MODE, exist_ok=True)
        data = json.dumps({k: v for k, v in asdict(holder).items() if k != "number"}, sort_keys=True).encode()
        try:
            return create_exclusive(directory / f"{number:06d}", data)
        except FileNotFoundError:
            return False  # the directory was removed meanwhile (purge): look again

    def release(self, key: str, number: int) -> None:
        """Give up claim ``number``, and the dead claims it superseded; the directory goes
        when nothing is left in it (a waiter that creates a claim meanwhile recreates it)."""
        directory = self.root / key
        for name in list_names(directory):
            if CLAIM_NAME.fullmatch(name) and int(name) <= number:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(directory / name)
        with contextlib.suppress(OSError):  # not empty: a newer claim (a taken-over stall)
            os.rmdir(directory)

    def clear_ended(self, key: str | None = None) -> int:
        """Remove the claims (of ``key``, or of every key) whose run has certainly ended: its
        ``running/`` entry is gone (a holder killed after storing leaves its claim behind,
        and a hit never takes it over). Returns how many went."""
        removed = 0
        for name in [key] if key is not None else list_names(self.root):
            directory = self.root / name
            for claim in list_names(directory):
                try:
                    job = str(json.loads((directory / claim).read_bytes()).get("job") or "")
                except (OSError, ValueError, AttributeError):
                    job = ""
                if CLAIM_NAME.fullmatch(claim) and (not job or not (self._layout.running / job).is_dir()):
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(directory / claim)
                        removed += 1
            with contextlib.suppress(OSError):
                os.rmdir(directory)
        return removed
