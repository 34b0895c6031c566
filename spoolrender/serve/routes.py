"""The endpoints of `spoolrender serve`: one method per route, and the route table.

Above the transport (:mod:`.http`: parsing, limits, the Host check, auth), below the
server process (:mod:`.server`). What the answers say comes from :mod:`.api`,
:mod:`.events` and the other layers below; a method only turns a request into a call and
its result into a response.
"""

from __future__ import annotations

import os
import re
import time

from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4

from spoolrender import defaults
from spoolrender.ops.lookup import find_job
from spoolrender.serve.api import (
    DEFAULT_LIMIT,
    DEFAULT_LOG_BYTES,
    MAX_LIMIT,
    MAX_LOG_BYTES,
    MAX_LOG_LINES,
    cancel_job,
    job_detail,
    job_file,
    list_jobs,
    log_tail,
    metrics_text,
    pause_spool,
    resume_spool,
    retry_job,
    status_document,
    submit_job,
)
from spoolrender.serve.auth import bearer_matches
from spoolrender.serve.browse import Filters
from spoolrender.serve.bulk import bulk_request, delete_job
from spoolrender.serve.events import encode_unsequenced
from spoolrender.serve.http import (
    CSP,
    GONE_CHECK_SECONDS,
    NO_PARAMS,
    RETRY_MS,
    STATIC,
    RequestHandler,
    Route,
    RouteTable,
    int_param,
)
from spoolrender.serve.outputs import MEDIA_TYPES, open_output, parse_range, published_output
from spoolrender.serve.posters import poster
from spoolrender.serve.readmodel import ApiError, check_job_id
from spoolrender.spool.heartbeat import HOSTNAME


class SpoolHandler(RequestHandler):
    """The request handler of `spoolrender serve`, with every endpoint."""

    # --- reading ----------------------------------------------------------------------------

    def get_static(self, params: dict[str, str], args: list[str]) -> None:
        if "id" in params:  # a job page: refuse a bad id here, before the page asks the API
            check_job_id(params["id"])
        name, content_type = STATIC[args[0]]
        headers = {"Content-Security-Policy": CSP, "X-Frame-Options": "DENY"}
        self._send(200, self.site.static[name], content_type, headers)

    def get_status(self, params: dict[str, str], args: list[str]) -> None:
        status = status_document(self.site.config)
        self.site.hub.floor.hold_status(status)  # progress as the events publish it
        self._send_json(200, status)

    def get_jobs(self, params: dict[str, str], args: list[str]) -> None:
        state = params.get("state") or None
        if state is not None and state not in defaults.STATE_DIRS:
            raise ApiError(400, f"unknown state {state[:40]!r} (known: {', '.join(defaults.STATE_DIRS)})")
        limit = int_param(params, "limit", DEFAULT_LIMIT, 1, MAX_LIMIT)
        offset = int_param(params, "offset", 0, 0, 10**9)
        filters = Filters(
            text=params.get("q") or None,
            kind=params.get("kind") or None,
            since=_time_param(params, "since"),
            until=_time_param(params, "until"),
            queue=params.get("queue") or None,
            composition=params.get("composition") or None,
            props=params.get("props") or None,
            see_private=self._has_token(),
        )
        page = list_jobs(
            self.site.config, state=state, limit=limit, offset=offset, filters=filters, index=self.site.index
        )
        for item in page["jobs"]:
            self.site.hub.floor.hold_item(item["state"], item)  # progress as the events publish it
        self._send_json(200, page)

    def get_job(self, params: dict[str, str], args: list[str]) -> None:
        info = job_detail(self.site.config, args[0], see_private=self._has_token())
        self.site.hub.floor.hold_detail(info)  # progress as the events publish it
        self._send_json(200, info)

    def get_log(self, params: dict[str, str], args: list[str]) -> None:
        if "bytes" in params and "lines" in params:
            raise ApiError(400, "give either bytes or lines, not both")
        tail = int_param(params, "bytes", DEFAULT_LOG_BYTES, 0, MAX_LOG_BYTES)
        lines = int_param(params, "lines", 0, 0, MAX_LOG_LINES) if "lines" in params else None
        run = int_param(params, "run", 0, 1, 9999) if "run" in params else None
        start_at = int_param(params, "offset", 0, 0, 10**15) if "offset" in params else None
        if start_at is not None and ("bytes" in params or "lines" in params):
            raise ApiError(400, "give offset (follow the log) or bytes/lines (its end), not both")
        tail_ = log_tail(self.site.config, args[0], run=run, tail_bytes=tail, lines=lines, start_at=start_at,
                         see_private=self._has_token())  # fmt: skip
        headers = {
            "X-Spoolrender-Log": f"{tail_.entry}/{tail_.name}",
            "X-Spoolrender-Log-Size": str(tail_.size),
            "X-Spoolrender-Log-Offset": str(tail_.offset),
        }
        self._send(200, tail_.data, "text/plain; charset=utf-8", headers)

    def get_file(self, params: dict[str, str], args: list[str]) -> None:
        entry, data = job_file(self.site.config, args[0], see_private=self._has_token())
        # text/plain and nosniff: a job file is shown, never run, whatever it contains.
        self._send(200, data, "text/plain; charset=utf-8", {"X-Spoolrender-Entry": entry})

    def get_output(self, params: dict[str, str], args: list[str]) -> None:
        config = self.site.config
        published = published_output(config, args[0])
        fd, st = open_output(config, published)
        try:
            headers = {
                "Accept-Ranges": "bytes",
                # An output is shown or played, never run: no scripts even if it is HTML.
                "Content-Security-Policy": "default-src 'none'; sandbox",
                "Content-Disposition": ("inline" if published.suffix in MEDIA_TYPES else "attachment")
                + f'; filename="{SAFE_FILENAME.sub("_", published.rel.name)}"',
                "Cache-Control": "no-cache",
                "Last-Modified": self.date_time_string(int(st.st_mtime)),
            }
            try:
                wanted = parse_range(self.headers.get("Range"), st.st_size)
            except ApiError as exc:
                headers = {"Content-Range": f"bytes */{st.st_size}", "Accept-Ranges": "bytes"}
                self._send_json(416, exc.body(), headers)
                return
            if wanted is None:
                self._send_file(200, fd, 0, st.st_size, published.media_type, headers)
            else:
                start, end = wanted
                headers["Content-Range"] = f"bytes {start}-{end}/{st.st_size}"
                self._send_file(206, fd, start, end - start + 1, published.media_type, headers)
        finally:
            os.close(fd)

    def get_poster(self, params: dict[str, str], args: list[str]) -> None:
        data = poster(self.site.config, published_output(self.site.config, args[0]))
        self._send(200, data, "image/jpeg", {"Content-Security-Policy": "default-src 'none'; sandbox"})

    def get_history(self, params: dict[str, str], args: list[str]) -> None:
        hours = int_param(params, "hours", 6, 1, 48)
        now = time.time()
        samples = self.site.history.samples(now - hours * 3600)
        doc = {"now": now, "hours": hours, "interval": self.site.history.interval, "samples": samples}
        # Throughput since a time the page chooses (its local midnight: "today"), counted
        # over the samples that start then or later, as many hours back as they are kept.
        totals_since = _time_param(params, "totals_since")
        if totals_since is not None:
            counted = self.site.history.samples(totals_since)
            doc["totals"] = {
                "since": totals_since,
                "done": sum(s.get("done", 0) for s in counted),
                "failed": sum(s.get("failed", 0) for s in counted),
            }
        self._send_json(200, doc)

    def get_metrics(self, params: dict[str, str], args: list[str]) -> None:
        self._send(200, metrics_text(self.site.config).encode(), CONTENT_TYPE_PLAIN_0_0_4)

    def get_events(self, params: dict[str, str], args: list[str]) -> None:
        job = check_job_id(params["job"]) if "job" in params else None
        if job is not None and not find_job(self.site.config, job):
            raise ApiError(404, f"no job with id {job!r}")
        if not self.site.streams.acquire(blocking=False):
            raise ApiError(503, "too many event streams open; try again later")
        try:
            self._stream(job)
        finally:
            self.site.streams.release()

    def _stream(self, job: str | None) -> None:
        hub = self.site.hub
        self.close_connection = True
        with hub.subscription():
            self._responded = True
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream; charset=utf-8")
            self.send_header("Cache-Control", "no-store")
            self.send_header("X-Accel-Buffering", "no")  # nginx: do not buffer the stream
            self.send_header("X-Content-Type-Options", "nosniff")
            self.end_headers()
            self.wfile.write(f"retry: {RETRY_MS}\n: spoolrender events\n\n".encode())

            def catch_up() -> int:
                # Where the stream starts (or starts again after falling behind): now.
                if job is not None:
                    after = hub.last_seq()  # before reading, so no later change is missed
                    self.wfile.write(b"".join(encode_unsequenced(k, p) for k, p in hub.job_events(job)))
                    return after
                summary = hub.latest_summary()
                self.wfile.write(summary.encode(hub.boot))
                return summary.seq

            resumed = hub.resume_point(self.headers.get("Last-Event-ID"))
            after = resumed if resumed is not None else catch_up()
            keepalive = self.site.keepalive_seconds
            written = time.monotonic()
            while not hub.stopped:
                # Short waits, so that a client that went away frees its slot (and thread)
                # at once instead of at the next keepalive write.
                events = hub.wait(after, min(keepalive, GONE_CHECK_SECONDS))
                if self._client_gone():
                    return
                if events is None:
                    catch_up()
                    after = hub.last_seq()
                    written = time.monotonic()
                    continue
                wanted = [e for e in events if job is None or (e.job == job and e.kind != "summary")]
                if wanted:
                    self.wfile.write(b"".join(e.encode(hub.boot) for e in wanted))
                    written = time.monotonic()
                elif time.monotonic() - written >= keepalive:
                    # Also on a busy spool for a quiet job: proxies keep the stream open, and a
                    # client that went away is noticed.
                    self.wfile.write(b": keepalive\n\n")
                    written = time.monotonic()
                if events:
                    after = events[-1].seq

    def post_jobs(self, params: dict[str, str], args: list[str]) -> None:
        self._authorize()
        name = params.get("name")
        header = self.headers.get("X-Spoolrender-Name")
        if name is not None and header is not None and name != header:
            raise ApiError(400, "the name in the query and in X-Spoolrender-Name differ")
        result = submit_job(self.site.config, self._body(), name if name is not None else header)
        self._send_json(201, result, {"Location": result["url"]})

    def get_actions(self, params: dict[str, str], args: list[str]) -> None:
        """Whether write actions are on, and (with an Authorization header) whether its token is right."""
        token = self.site.token
        header = self.headers.get("Authorization")
        self._send_json(
            200,
            {
                "writes": token is not None,
                "reason": None
                if token
                else "write actions are disabled on this server: no serve_token_file "
                "(or serve_token) in the spool's spoolrender.yaml",
                "token_ok": None if token is None or header is None else bool(bearer_matches(header, token)),
            },
        )

    def post_pause(self, params: dict[str, str], args: list[str]) -> None:
        self._authorize()
        reason = params.get("reason") or f"paused over HTTP by {self.client_address[0]} ({HOSTNAME})"
        self._send_json(200, pause_spool(self.site.config, reason))

    def post_resume(self, params: dict[str, str], args: list[str]) -> None:
        self._authorize()
        self._send_json(200, resume_spool(self.site.config))

    def post_retry(self, params: dict[str, str], args: list[str]) -> None:
        self._authorize()
        self._send_json(200, retry_job(self.site.config, args[0]))

    def post_cancel(self, params: dict[str, str], args: list[str]) -> None:
        self._authorize()
        self._send_json(200, cancel_job(self.site.config, args[0], self._who()))

    def delete_job(self, params: dict[str, str], args: list[str]) -> None:
        self._authorize()
        self._send_json(200, delete_job(self.site.config, args[0], self._who()))

    def post_bulk(self, params: dict[str, str], args: list[str]) -> None:
        self._authorize()
        data = self._body(defaults.BULK_MAX_BODY, "a bulk request: ")
        self._send_json(200, bulk_request(self.site.config, self.site.index, data, self._who()))

    def _has_token(self) -> bool:
        """Whether the request carries the right write token: it may read private jobs
        (readmodel.is_private) too. A missing or wrong one only reads what others may."""
        token = self.site.token
        return token is not None and bool(bearer_matches(self.headers.get("Authorization"), token))

    def _who(self) -> str:
        """Who asked, as a cancel's record says it."""
        return f"spoolrender serve on {HOSTNAME} for {self.client_address[0]}"


def _time_param(params: dict[str, str], name: str) -> float | None:
    text = params.get(name) or None
    if text is None:
        return None
    if not TIME_PARAM.fullmatch(text):
        raise ApiError(400, f"query parameter {name}: expected epoch seconds, e.g. 1767225600 or 1767225600.5")
    return float(text)


TIME_PARAM = re.compile(r"[0-9]{1,12}(\.[0-9]{1,6})?")
ROUTES: RouteTable = {}
JOBS_PARAMS = frozenset({"state", "limit", "offset", "q", "kind", "since", "until", "queue", "composition", "props"})
SAFE_FILENAME = re.compile(r"[^A-Za-z0-9._-]")  # a header value: no quotes, no line breaks
PAGE_PARAMS = {
    "/job": frozenset({"id"}),
    "/browse": JOBS_PARAMS,
}  # read by the page's script, checked here first


def _add(shape: tuple[str, ...], **methods: tuple[Route, frozenset[str]]) -> None:
    ROUTES[shape] = (tuple(methods), methods)


for _path in STATIC:
    _add(tuple(_path[1:].split("/")), GET=(SpoolHandler.get_static, PAGE_PARAMS.get(_path, NO_PARAMS)))
_add(("status",), GET=(SpoolHandler.get_status, NO_PARAMS))
_add(
    ("jobs",),
    GET=(SpoolHandler.get_jobs, JOBS_PARAMS),
    POST=(SpoolHandler.post_jobs, frozenset({"name"})),
)
_add(("jobs", "{id}"), GET=(SpoolHandler.get_job, NO_PARAMS), DELETE=(SpoolHandler.delete_job, NO_PARAMS))
_add(("jobs", "{id}", "log"), GET=(SpoolHandler.get_log, frozenset({"bytes", "lines", "run", "offset"})))
_add(("jobs", "{id}", "file"), GET=(SpoolHandler.get_file, NO_PARAMS))
_add(("jobs", "{id}", "output"), GET=(SpoolHandler.get_output, NO_PARAMS), HEAD=(SpoolHandler.get_output, NO_PARAMS))
_add(("jobs", "{id}", "poster"), GET=(SpoolHandler.get_poster, NO_PARAMS))
_add(("jobs", "{id}", "retry"), POST=(SpoolHandler.post_retry, NO_PARAMS))
_add(("jobs", "{id}", "cancel"), POST=(SpoolHandler.post_cancel, NO_PARAMS))
_add(("events",), GET=(SpoolHandler.get_events, frozenset({"job"})))
_add(("actions",), GET=(SpoolHandler.get_actions, NO_PARAMS))
_add(("bulk",), POST=(SpoolHandler.post_bulk, NO_PARAMS))
_add(("pause",), POST=(SpoolHandler.post_pause, frozenset({"reason"})))
_add(("resume",), POST=(SpoolHandler.post_resume, NO_PARAMS))
_add(("metrics",), GET=(SpoolHandler.get_metrics, NO_PARAMS))
_add(("history",), GET=(SpoolHandler.get_history, frozenset({"hours", "totals_since"})))

SpoolHandler.routes = ROUTES
