"""Progress as one observer publishes it over time: never below what it said before for the
same run.

Progress read off the spool can fall back within one run, truthfully: a split job's chunk
whose run failed (or whose runner died and was recovered) renders again from 0, and the
share of the job's frames rendered falls by that chunk's progress; a renderer may report a
stage's progress after a later one's. A progress bar that moves back reads as a bug, so an
observer that publishes progress over time holds, per entry, the highest it published:

- `spoolrender serve`: one floor for everything it serves, /events (progress events,
  summaries, a follower's first events), ``GET /status``, ``GET /jobs`` and
  ``GET /jobs/{id}``;
- ``status --watch``: one floor for its redraws.

An entry is one run of a job (a running/ entry: one claim), or one stay of a split job in
split/ (and then in retry/, waiting for its join). A new run starts from its own progress:
the join of a split job, a job retried after a failure. The ETA stays the read's own. A
floor forgets the entries a whole status document no longer lists, and keeps at most
``defaults.PROGRESS_FLOOR_ENTRIES`` (the oldest go first).

Every stay of a job in split/ has the same name (``<id>.<uid>``): a split job that failed
and is sent back with `spoolrender retry` is split anew under it. So a job seen anywhere
else (a ``GET /jobs`` item, a job's detail, an event's payload) ends its stay: the floor
forgets it, also when no whole status document is read (a client of ``GET /jobs/{id}``
alone). A stay that ends and starts again unseen by any read (within a poll) is held as one.
"""

from __future__ import annotations

import threading
from typing import Any

from spoolrender import defaults
from spoolrender.core.vocabulary import JobState
from spoolrender.spool.state_listings import JOB_NAMES

JOB_STATES = {state.value for state in JOB_NAMES}


class ProgressFloor:
    """The highest progress published per entry (``state/name``, as ``show`` names entries)."""

    def __init__(self, limit: int = defaults.PROGRESS_FLOOR_ENTRIES) -> None:
        self._limit = limit
        self._lock = threading.Lock()
        self._highest: dict[str, float] = {}  # oldest first

    def held(self, entry: str, progress: Any) -> Any:
        """``progress`` of ``entry`` as published: the highest published for it so far
        (a null progress after a number too: the run had got that far)."""
        with self._lock:
            high = self._highest.get(entry)
            number = isinstance(progress, int | float) and not isinstance(progress, bool)
            if number and (high is None or progress > high):
                self._highest.pop(entry, None)
                self._highest[entry] = float(progress)
                while len(self._highest) > self._limit:
                    del self._highest[next(iter(self._highest))]
                return progress
            return progress if high is None else high

    def hold_status(self, status: dict[str, Any]) -> None:
        """Hold each ``running`` and ``split`` item of a status document (status.read_status);
        forget every entry it does not list (it lists each running and split job)."""
        listed = set()
        for item in status["running"]:
            listed.add(key := f"running/{item['entry']}")
            item["progress"] = self.held(key, item["progress"])
        for item in status["split"]:
            listed.add(key := split_entry(item))
            item["progress"] = self.held(key, item["progress"])
        with self._lock:
            self._highest = {entry: high for entry, high in self._highest.items() if entry in listed}

    def hold_item(self, state: str, item: dict[str, Any]) -> None:
        """Hold a ``running`` or ``split`` item of ``state`` (a ``GET /jobs`` item, an event's
        payload); an item of any other state ends its job's stay in split/."""
        if state == "split":
            item["progress"] = self.held(split_entry(item), item.get("progress"))
            return
        self._stay_ended(state, item.get("entry"))
        if state == "running":
            item["progress"] = self.held(f"running/{item['entry']}", item.get("progress"))

    def hold_detail(self, info: dict[str, Any]) -> None:
        """Hold a job's detail (``GET /jobs/{id}``): a running job's progress, a split job's
        chunks' (in split/, or in retry/ waiting for its join)."""
        state, _, name = str(info.get("entry") or "").partition("/")
        if state != "split":
            self._stay_ended(state, name)
        if info.get("state") == "running":
            info["progress"] = self.held(info["entry"], info.get("progress"))
        elif isinstance(info.get("split"), dict) and info.get("state") in ("split", "retry"):
            info["split"]["progress"] = self.held(info["entry"], info["split"].get("progress"))

    def _stay_ended(self, state: str, name: object) -> None:
        """Forget the stay in split/ of the job of entry ``state``/``name``: it is elsewhere now."""
        pattern = JOB_NAMES.get(JobState(state)) if state in JOB_STATES else None
        m = pattern.fullmatch(name) if pattern is not None and isinstance(name, str) else None
        if m is not None:
            with self._lock:
                self._highest.pop(f"split/{m.group('id')}.{m.group('uid')}", None)


def split_entry(item: dict[str, Any]) -> str:
    """The entry of a ``split`` item: in split/, or in retry/ once woken for its join."""
    return f"{'retry' if item.get('joining') else 'split'}/{item['entry']}"
