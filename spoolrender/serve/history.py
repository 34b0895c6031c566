"""How the spool behaved over the last hours: samples `serve` keeps in the spool itself.

Every ``interval`` seconds (a minute by default) a server writes one small JSON sample
for the interval that just ended: the jobs that finished in it (done and failed, and how
long each done one took to render), and from the snapshot ``status`` takes, the counts per
state, the backlog (incoming and retry), the oldest waiting job's age and each runner's
busy slots. A job counts as finished in the interval in which the server first saw it in
done/ or failed/ (it lists them every quarter interval, at most every 2 s), by the
server's own clock, so skewed runner clocks do not matter; a server writes only intervals
it watched from their start.

Samples live in ``.spoolrender/history/<start>-<interval>.json``, one file per interval,
created by a hard link from a private temporary file: the link fails if the file exists, so
when several servers (on several hosts) watch one spool, the first one's sample counts and
the others skip it; a restarted server, or one on another host, reads the same history.
Samples older than ``RETENTION_SECONDS`` (and beyond ``MAX_SAMPLES``) are deleted, so the
history stays small (about 0.5 KB a sample).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import threading
import time
from pathlib import Path
from typing import Any

from spoolrender.config.spool_config import SpoolConfig
from spoolrender.ops.status import collect_status
from spoolrender.serve.readmodel import result_summary
from spoolrender.spool.layout import SpoolLayout, new_token
from spoolrender.spool.spooldir import DirHandle, SpoolPathRefused
from spoolrender.spool.trouble_log import TroubleLog

log = logging.getLogger(__name__)

HISTORY_DIR = "history"
SAMPLE_NAME = re.compile(r"(\d{10})-(\d{1,5})\.json")
RETENTION_SECONDS = 48 * 3600
MAX_SAMPLES = 4000
MAX_FINISHED_LISTED = 500  # per sample: durations beyond this are left out (the counts are not)
MAX_SAMPLE_BYTES = 256 * 1024


class HistoryRecorder:
    """Writes a sample per interval (a thread) and reads the history back (for ``GET /history``)."""

    def __init__(self, config: SpoolConfig, interval: float = 60.0) -> None:
        self.config = config
        self.layout = SpoolLayout(config.spool)
        self.interval = max(1, int(interval))
        self.directory = self.layout.private / HISTORY_DIR
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="spoolrender-history", daemon=True)
        self._cache: dict[str, dict[str, Any]] = {}  # sample files never change: read each once
        self._cache_lock = threading.Lock()
        self._trouble = TroubleLog(log, f"history: keeping the spool's history in {self.directory}",
                                   level=logging.WARNING)  # fmt: skip

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)

    # --- writing ----------------------------------------------------------------------------

    def _loop(self) -> None:
        # A job finished in the interval in which this server first saw it in done/ or
        # failed/ (its own clock: runners' clocks may be skewed). Intervals before the
        # first one watched from its start are not written: the server did not see them.
        interval = self.interval
        seen: dict[str, set[str]] | None = None
        next_start = 0
        pending: dict[int, dict[str, Any]] = {}
        while not self._stop.is_set():
            try:
                now = time.time()
                finished = self._finished_names()
                if seen is None:
                    next_start = (int(now) // interval + 1) * interval
                else:
                    bucket = pending.setdefault(int(now) // interval * interval, _empty())
                    for state in ("done", "failed"):
                        for name in finished[state] - seen[state]:
                            bucket[state] += 1
                            if state == "done" and len(bucket["durations"]) < MAX_FINISHED_LISTED:
                                took = self._render_seconds(name)
                                if took is not None:
                                    bucket["durations"].append(round(took, 3))
                seen = finished
                while next_start + interval <= now:
                    self._write_sample(next_start, interval, pending.pop(next_start, _empty()))
                    next_start += interval
                for start in [b for b in pending if b < next_start]:
                    del pending[start]
            except Exception as exc:  # the server goes on without history, and says why
                # Once, reminded, and once when over (spool/trouble_log.py): said only the first
                # time ever, a later outage, or one that never ended, went unsaid.
                self._trouble.failed(exc)
                seen = None  # start watching afresh: what happened meanwhile is unknown
            else:
                self._trouble.succeeded()
            self._stop.wait(min(interval / 4, 2.0))

    def _render_seconds(self, name: str) -> float | None:
        """How long done/``name`` took to render; read through done/'s descriptor
        (spoolrender.spool.spooldir: a listed name is never re-resolved by path)."""
        try:
            with DirHandle.open(self.layout.done) as done, done.sub(name) as entry:
                took = (result_summary(entry.through) or {}).get("duration_seconds")
        except (OSError, SpoolPathRefused):
            return None  # purged meanwhile, or not a job directory (never followed)
        return float(took) if isinstance(took, int | float) else None

    def _finished_names(self) -> dict[str, set[str]]:
        return {state: set(os.listdir(self.layout.state_dir(state))) for state in ("done", "failed")}

    def _write_sample(self, start: int, interval: int, finished: dict[str, Any]) -> None:
        status = collect_status(self.config)
        sample = {
            "start": start,
            "interval": interval,
            **finished,
            "counts": status["counts"],
            "backlog": status["counts"]["incoming"] + status["counts"]["retry"],
            "oldest_waiting_seconds": status["oldest_incoming_age_seconds"],
            "runners": [
                {"runner": r.get("runner"), "host": r.get("host"), "busy": r.get("busy"), "slots": r.get("slots")}
                for r in status["runners"]
                if r.get("online")
            ],
        }
        self.directory.mkdir(exist_ok=True)
        name = f"{start:010d}-{interval}.json"
        temp = self.directory / f".{name}.{new_token()[:8]}"
        try:
            temp.write_bytes(json.dumps(sample, separators=(",", ":")).encode())
            # link() refuses an existing name: the first server to write an interval wins,
            # and a reader never sees a half-written sample (it appears complete or not at all).
            with contextlib.suppress(FileExistsError):
                os.link(temp, self.directory / name)
        finally:
            with contextlib.suppress(OSError):
                os.unlink(temp)
        self._prune(start)

    def _prune(self, now: float) -> None:
        names = sorted(n for n in os.listdir(self.directory) if SAMPLE_NAME.fullmatch(n))
        keep_from = max(0, len(names) - MAX_SAMPLES)
        for i, name in enumerate(names):
            m = SAMPLE_NAME.fullmatch(name)
            assert m is not None
            if i < keep_from or int(m.group(1)) < now - RETENTION_SECONDS:
                with contextlib.suppress(OSError):
                    os.unlink(self.directory / name)

    # --- reading ----------------------------------------------------------------------------

    def samples(self, since: float) -> list[dict[str, Any]]:
        """The samples that start at or after ``since``, oldest first."""
        try:
            names = sorted(os.listdir(self.directory))
        except FileNotFoundError:
            return []
        out = []
        with self._cache_lock:
            for name in names:
                m = SAMPLE_NAME.fullmatch(name)
                if m is None or int(m.group(1)) < since:
                    continue
                if name not in self._cache:
                    sample = _read_sample(self.directory / name)
                    if sample is None:
                        continue
                    self._cache[name] = sample
                out.append(self._cache[name])
            present = set(names)
            for name in [n for n in self._cache if n not in present]:
                del self._cache[name]  # pruned
        return out


def _empty() -> dict[str, Any]:
    return {"done": 0, "failed": 0, "durations": []}


def _read_sample(path: Path) -> dict[str, Any] | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as fh:
        data = fh.read(MAX_SAMPLE_BYTES + 1)
    try:
        sample = json.loads(data) if len(data) <= MAX_SAMPLE_BYTES else None
    except ValueError:
        return None
    return sample if isinstance(sample, dict) else None
