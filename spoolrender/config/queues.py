"""Named queues and runner tags: which runner may take which job, in what order.

A job's queue comes from where it was dropped or from its ``queue:`` field:

- ``incoming/<queue>/job.yaml``: a drop directory per queue, so scp/NFS/cron users pick a
  queue by the path they copy to, without editing YAML (Postfix and Maildir route by
  directory the same way). The operator makes queue directories (``spoolrender queue add
  urgent`` or ``init --queue urgent``: owned by the runner's user, mode 3775 like
  incoming/). A directory a submitter made (``mkdir incoming/urgent``) is not honoured:
  they own it, so they could delete or replace the other submitters' drops in it, or swap
  it for a symlink; its files wait unclaimed and ``status`` says why
  (spoolrender.spool.queue_dirs.queue_dir_problem).
- ``queue: urgent`` in the job file, for jobs dropped into ``incoming/`` itself. A file in
  a queue directory may repeat its directory's name; naming another queue is invalid.
- otherwise ``default``.

Claims stay cheap: the scanner already parses each waiting file once per change of its
size/mtime (to know its priority and whether it parses), and the queue and ``requires:``
tags come from that same parse; a queue directory costs one listing. A retried job's
route is read once per retry entry (the directory it came from is kept as ``queue`` in
its job directory).

A runner serves ``queues`` in order (``run --queues urgent,default``; ``*`` is every other
queue, and the default, ``[*]``, serves everything in priority order) and takes only
jobs whose ``requires:`` tags it has all of (``run --tags gpu,bigmem``). Runners announce
both in their beacon, with a count of the waiting jobs they saw per queue and tag set,
so ``status`` can tell when a job is waiting for a runner that does not exist.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spoolrender.spool.queue_dirs import IncomingView

NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")
DEFAULT_QUEUE = "default"
ALL_QUEUES = "*"
QUEUE_FILENAME = "queue"  # in a job directory: the queue directory the job was dropped into


def name_problem(kind: str, value: object) -> str | None:
    """Why ``value`` is not a valid queue or tag name (None if it is)."""
    if not isinstance(value, str) or not NAME.fullmatch(value):
        return f"expected a {kind} name (lower-case letters, digits, - and _, at most 64), got {value!r}"
    return None


@dataclass(frozen=True, order=True)
class Route:
    """Where a job may run: its queue and the tags a runner needs to take it."""

    queue: str = DEFAULT_QUEUE
    requires: tuple[str, ...] = ()  # sorted, unique


def route(queue: str | None, requires: Iterable[str] = ()) -> Route:
    return Route(queue or DEFAULT_QUEUE, tuple(sorted(set(requires))))


@dataclass(frozen=True)
class Subscription:
    """What one runner serves: queues in order of preference, and its tags."""

    queues: tuple[str, ...] = (ALL_QUEUES,)
    tags: frozenset[str] = frozenset()

    def rank(self, job: Route) -> int | None:
        """The job's place in this runner's queue order; None if the runner cannot take it."""
        if not set(job.requires) <= self.tags:
            return None
        if job.queue in self.queues:
            return self.queues.index(job.queue)
        if ALL_QUEUES in self.queues:
            return self.queues.index(ALL_QUEUES)
        return None


def queue_dir_of(name: str) -> str | None:
    """The queue directory of an incoming/-relative name (``urgent/a.yaml`` -> ``urgent``)."""
    head, sep, _ = name.partition("/")
    return head if sep else None


def is_queue_dir_name(name: str) -> bool:
    return NAME.fullmatch(name) is not None


def incoming_view(incoming: Path) -> IncomingView:
    """incoming/ and its honoured queue directories, held open (close it: a context manager)."""
    return IncomingView.open(incoming, is_queue_dir_name)


def list_incoming(incoming: Path) -> list[str]:
    """Names waiting in incoming/, those in honoured queue directories as ``<queue>/<name>``."""
    with incoming_view(incoming) as view:
        return view.names


def waiting_groups(routes: Iterable[tuple[Route, float]]) -> list[dict[str, Any]]:
    """Waiting jobs counted by route, for a runner's beacon: ``(route, arrival wall time)``."""
    groups: dict[Route, list[float]] = {}
    for r, arrived in routes:
        groups.setdefault(r, []).append(arrived)
    return [
        {"queue": r.queue, "requires": list(r.requires), "count": len(times), "oldest": min(times)}
        for r, times in sorted(groups.items())
    ]


def _subscription(beacon: dict[str, Any]) -> Subscription:
    queues = beacon.get("queues") or [ALL_QUEUES]
    return Subscription(tuple(str(q) for q in queues), frozenset(str(t) for t in beacon.get("tags") or ()))


def _entry(queues: dict[str, dict[str, Any]], name: str) -> dict[str, Any]:
    return queues.setdefault(name, {"waiting": 0, "unserved": 0, "oldest_age_seconds": None, "runners": 0})


def queue_report(
    runners: list[dict[str, Any]], now: float, listed: list[dict[str, Any]] | None = None
) -> tuple[dict[str, dict[str, Any]], list[dict[str, Any]]]:
    """Per-queue waiting counts and the jobs nobody online can serve, from runner beacons.

    The waiting counts come from the freshest online beacon (every runner sees the same
    spool), else from ``listed`` (:func:`spoolrender.ops.listed_routes.listed_groups`: before any runner started, or
    while none is online). A queue's ``runners`` are the online runners that serve it,
    by its name or through ``*``; ``*`` itself is no queue and has no row. A group is
    unserved when no online runner's queues and tags admit it.
    """
    online = [b for b in runners if b.get("online")]
    subscriptions = [_subscription(b) for b in online]
    seen = [b for b in online if isinstance(b.get("waiting"), list)]
    latest = max(seen, key=lambda b: float(b.get("updated") or 0), default=None)
    groups = latest["waiting"] if latest is not None else listed or []
    queues: dict[str, dict[str, Any]] = {}
    unserved: list[dict[str, Any]] = []
    for sub in subscriptions:
        for q in sub.queues:
            if q != ALL_QUEUES:
                _entry(queues, q)
    for group in groups:
        r = route(str(group.get("queue")), [str(t) for t in group.get("requires") or ()])
        count = int(group.get("count") or 0)
        entry = _entry(queues, r.queue)
        entry["waiting"] += count
        age = max(0.0, now - float(group.get("oldest") or now))
        if entry["oldest_age_seconds"] is None or age > entry["oldest_age_seconds"]:
            entry["oldest_age_seconds"] = round(age, 1)
        if any(sub.rank(r) is not None for sub in subscriptions):
            continue
        entry["unserved"] += count
        if not online:
            reason = "no runner is online"
        elif not any(sub.rank(Route(r.queue)) is not None for sub in subscriptions):
            reason = f"no online runner serves queue {r.queue!r}"
        else:
            reason = f"no online runner of queue {r.queue!r} has tag(s) {', '.join(r.requires)}"
        unserved.append({"queue": r.queue, "requires": list(r.requires), "count": count, "reason": reason})
    for name, entry in queues.items():
        entry["runners"] = sum(sub.rank(Route(name)) is not None for sub in subscriptions)
    return dict(sorted(queues.items())), unserved


def dropped_in(job_dir: Path) -> str | None:
    """The drop directory a claimed job came from (its queue file), None if none."""
    try:
        return (job_dir / QUEUE_FILENAME).read_text(encoding="utf-8").strip() or None
    except OSError:
        return None


def job_queue(dropped_in: str | None, declared: str | None) -> tuple[str, str | None]:
    """A claimed job's queue, and a problem if its file names another queue than its drop
    directory ``dropped_in`` (:func:`dropped_in`)."""
    if dropped_in and declared and declared != dropped_in:
        return dropped_in, (
            f"field 'queue': {declared!r}, but the file was dropped into incoming/{dropped_in}/; "
            "drop it into the queue's directory or into incoming/ itself, or change the field"
        )
    return dropped_in or declared or DEFAULT_QUEUE, None
