"""worker/errors.mjs withFetchedUrl: a "Failed to fetch" names the URL the page asked for,
not a request Chromium made by itself (the bundle server's /favicon.ico, which can fail
later in the log once the page has failed: CI's test_compositions failure of stop 32)."""

from __future__ import annotations

from support.worker_js import call_worker

PAGE_FAILED = "Failed to load resource: net::ERR_CONNECTION_REFUSED (at http://127.0.0.1:9/data.json)"


def named(log: list[str]) -> str:
    body = "return m.withFetchedUrl('TypeError: Failed to fetch', new Error('Failed to fetch'), {browserLog: input});"
    out = call_worker("errors.mjs", body, log)
    assert isinstance(out, str)
    return out


def test_the_pages_request_is_named_though_the_favicon_failed_after_it() -> None:
    favicon = "Failed to load resource: net::ERR_CONNECTION_REFUSED (at http://localhost:3001/favicon.ico)"
    said = named([PAGE_FAILED, favicon])
    assert said == "TypeError: Failed to fetch (http://127.0.0.1:9/data.json)", said


def test_a_page_file_of_the_bundle_server_is_still_named() -> None:
    asked = "Failed to load resource: net::ERR_FAILED (at http://localhost:3001/public/data.json)"
    assert named([asked]) == "TypeError: Failed to fetch (http://localhost:3001/public/data.json)"
