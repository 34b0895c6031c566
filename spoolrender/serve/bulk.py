"""`spoolrender serve`'s bulk actions: ``POST /bulk`` and ``DELETE /jobs/{id}``.

The request names an action (retry, cancel, delete) and the jobs: a list of ``ids``, or a
``filter`` (the fields of ``GET /jobs``: state, q, composition, props, kind, queue, since,
until) meaning every job it matches, on every page, or the ``entries`` a dry run answered
(``[{"state", "entry", "id"}]``, its ``acted`` items). ``"dry_run": true`` answers what would
happen (counts and each entry) and changes nothing: the dashboard shows that answer before
it asks for a confirmation, and the confirmation sends that answer's entries, so that only
what the operator saw is acted on (one still listed as it was; the others are skipped, with
why). What is done is :mod:`spoolrender.ops.bulk`'s, shared with the command line.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from spoolrender import defaults
from spoolrender.config.spool_config import SpoolConfig
from spoolrender.ops.bulk import BulkAction, BulkItem, Target, bulk_action, locate
from spoolrender.ops.id_hints import id_hint
from spoolrender.ops.lookup import Located, incoming_id
from spoolrender.serve.browse import Filters, JobIndex, name_id, state_listings
from spoolrender.serve.readmodel import ApiError, check_job_id
from spoolrender.spool.layout import SpoolLayout

FILTER_FIELDS = frozenset({"state", "q", "composition", "props", "kind", "queue", "since", "until"})
REQUEST_FIELDS = frozenset({"action", "ids", "filter", "entries", "dry_run"})
SELECTIONS = ("ids", "filter", "entries")


def bulk_request(config: SpoolConfig, index: JobIndex, data: bytes, who: str) -> dict[str, Any]:
    """``POST /bulk``: the JSON body ``{"action", "ids" | "filter" | "entries", "dry_run"}``, answered by
    :meth:`spoolrender.ops.bulk.BulkResult.to_json`."""
    try:
        request = json.loads(data)
    except ValueError as exc:
        raise ApiError(400, f"the body is not JSON: {exc}") from exc
    if not isinstance(request, dict):
        raise ApiError(400, 'the body must be a JSON object: {"action": ..., "ids": [...] or "filter": {...}}')
    unknown = sorted(set(request) - REQUEST_FIELDS)
    if unknown:
        raise ApiError(400, f"unknown field(s) {', '.join(unknown)} (known: {', '.join(sorted(REQUEST_FIELDS))})")
    try:
        action = BulkAction(str(request.get("action")))
    except ValueError as exc:
        raise ApiError(400, f"action: one of {', '.join(a.value for a in BulkAction)}") from exc
    dry_run = request.get("dry_run", False)
    if not isinstance(dry_run, bool):
        raise ApiError(400, "dry_run: true or false")
    if sum(key in request for key in SELECTIONS) != 1:
        raise ApiError(
            400,
            "give one of ids (a list of job ids), filter (as GET /jobs takes it) or entries "
            "(a dry run's acted items), not both",
        )
    gone: list[BulkItem] = []
    if "ids" in request:
        ids = request["ids"]
        if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
            raise ApiError(400, "ids: a list of job ids")
        if len(ids) > defaults.BULK_MAX_JOBS:
            raise ApiError(413, f"ids: at most {defaults.BULK_MAX_JOBS} jobs in one request")
        targets, missing = locate(config, [check_job_id(i) for i in ids])
    elif "entries" in request:
        targets, missing = [], []
        for target, why in _listed(config, request["entries"]):
            if why is None:
                targets.append(target)
            else:
                gone.append(BulkItem(target.job_id, target.state, target.entry, why))
    else:
        targets, missing = _matching(config, index, request["filter"]), []
        if len({t.job_id for t in targets}) > defaults.BULK_MAX_JOBS:
            raise ApiError(413, f"the filter matches more than {defaults.BULK_MAX_JOBS} jobs: narrow it")
    result = bulk_action(config, action, targets, missing, dry_run=dry_run, who=who)
    return dataclasses.replace(result, skipped=result.skipped + tuple(gone)).to_json()


def _listed(config: SpoolConfig, given: Any) -> list[tuple[Target, str | None]]:
    """The ``entries`` of a request, each with why it is no longer as the dry run listed it
    (None: it is, and may be acted on)."""
    shape = 'entries: a list of {"state": ..., "entry": "state/name", "id": ...} (a dry run\'s acted items)'
    if not isinstance(given, list) or not all(isinstance(e, dict) for e in given):
        raise ApiError(400, shape)
    if len(given) > defaults.BULK_MAX_JOBS:
        raise ApiError(413, f"entries: at most {defaults.BULK_MAX_JOBS} in one request")
    layout = SpoolLayout(config.spool)
    layout.check()
    listing = {s: set(names) for s, names in state_listings(layout).items()}
    found: list[tuple[Target, str | None]] = []
    for item in given:
        state, entry, job_id = item.get("state"), item.get("entry"), item.get("id")
        if state not in defaults.STATE_DIRS or not isinstance(entry, str) or not entry.startswith(f"{state}/"):
            raise ApiError(400, shape)
        if job_id is not None and not isinstance(job_id, str):
            raise ApiError(400, shape)
        name = entry.removeprefix(f"{state}/")
        # Only a name as listed is ever used (never a path from the request).
        if name not in listing[state]:
            found.append(
                (Target(job_id or name_id(state, name), state, name), "moved on since the dry run: left as it is")
            )
            continue
        now = (
            incoming_id(config, Located("", state, layout.incoming / name, name))
            if state == "incoming"
            else name_id(state, name)
        )
        why = None if job_id in (None, now) else f"its job file now names the id {now!r}: left as it is"
        found.append((Target(now, state, name), why))
    return found


def _matching(config: SpoolConfig, index: JobIndex, given: Any) -> list[Target]:
    """Every entry that ``GET /jobs`` with the filter ``given`` would list, on every page."""
    if not isinstance(given, dict) or not set(given) <= FILTER_FIELDS:
        raise ApiError(400, f"filter: an object with the fields {', '.join(sorted(FILTER_FIELDS))}")
    state = given.get("state") or None
    if state is not None and state not in defaults.STATE_DIRS:
        raise ApiError(400, f"filter.state: one of {', '.join(defaults.STATE_DIRS)}")
    for key in ("since", "until"):
        if given.get(key) is not None and not isinstance(given[key], int | float):
            raise ApiError(400, f"filter.{key}: epoch seconds")
    for key in ("q", "composition", "props", "kind", "queue"):
        if given.get(key) is not None and not isinstance(given[key], str):
            raise ApiError(400, f"filter.{key}: a string")
    filters = Filters(
        text=given.get("q") or None,
        kind=given.get("kind") or None,
        since=given.get("since"),
        until=given.get("until"),
        queue=given.get("queue") or None,
        composition=given.get("composition") or None,
        props=given.get("props") or None,
        see_private=True,  # POST /bulk needs the token (routes.post_bulk)
    )
    layout = SpoolLayout(config.spool)
    layout.check()
    listing = state_listings(layout)
    targets = []
    for s in (state,) if state else defaults.STATE_DIRS:
        for name in index.select(s, listing[s], filters):
            if s == "incoming":  # the id a waiting file will get (its `id:` field, else its name)
                job_id = incoming_id(config, Located("", s, layout.incoming / name, name))
            else:
                job_id = name_id(s, name)
            targets.append(Target(job_id, s, name))
    return targets


def delete_job(config: SpoolConfig, job_id: str, who: str) -> dict[str, Any]:
    """``DELETE /jobs/{id}``: forget a finished job's records, as ``spoolrender purge ID``;
    404 for an unknown id, 409 for a job still queued or running (cancel it first)."""
    targets, _ = locate(config, [check_job_id(job_id)])
    if not targets:
        raise ApiError(404, f"no job with id {job_id!r}{id_hint(config.spool, job_id)}")
    result = bulk_action(config, BulkAction.DELETE, targets, dry_run=False, who=who)
    if not result.acted:
        reason = result.skipped[0].text if result.skipped else "nothing to delete"
        raise ApiError(409, f"job {job_id!r} {reason}")
    return result.to_json()
