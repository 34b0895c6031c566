"""`spoolrender serve`'s bulk actions: ``POST /bulk`` and ``DELETE /jobs/{id}``.

The request names an action (retry, cancel, delete) and the jobs: a list of ``ids``, or a
``filter`` (the fields of ``GET /jobs``: state, q, composition, props, kind, queue, since,
until) meaning every job it matches, on every page. ``"dry_run": true`` answers what would
happen (counts and each entry) and changes nothing: the dashboard shows that answer before
it asks for a confirmation. What is done is :mod:`spoolrender.bulk`'s, shared with the command line.
"""

from __future__ import annotations

import json
from typing import Any

from spoolrender import defaults
from spoolrender.bulk import BulkAction, Target, bulk_action, locate
from spoolrender.config import SpoolConfig
from spoolrender.layout import SpoolLayout
from spoolrender.lookup import Located, incoming_id
from spoolrender.serve.browse import Filters, JobIndex, name_id, state_listings
from spoolrender.serve.readmodel import ApiError, check_job_id
from spoolrender.suggest import id_hint

FILTER_FIELDS = frozenset({"state", "q", "composition", "props", "kind", "queue", "since", "until"})
REQUEST_FIELDS = frozenset({"action", "ids", "filter", "dry_run"})


def bulk_request(config: SpoolConfig, index: JobIndex, data: bytes, who: str) -> dict[str, Any]:
    """``POST /bulk``: the JSON body ``{"action", "ids" | "filter", "dry_run"}``, answered by
    :meth:`spoolrender.bulk.BulkResult.to_json`."""
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
    if ("ids" in request) == ("filter" in request):
        raise ApiError(400, "give either ids (a list of job ids) or filter (as GET /jobs takes it), not both")
    if "ids" in request:
        ids = request["ids"]
        if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
            raise ApiError(400, "ids: a list of job ids")
        if len(ids) > defaults.BULK_MAX_JOBS:
            raise ApiError(413, f"ids: at most {defaults.BULK_MAX_JOBS} jobs in one request")
        targets, missing = locate(config, [check_job_id(i) for i in ids])
    else:
        targets, missing = _matching(config, index, request["filter"]), []
        if len({t.job_id for t in targets}) > defaults.BULK_MAX_JOBS:
            raise ApiError(413, f"the filter matches more than {defaults.BULK_MAX_JOBS} jobs: narrow it")
    return bulk_action(config, action, targets, missing, dry_run=dry_run, who=who).to_json()


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
