"""The WebGL rule (worker/errors.mjs): a failure is kind no-webgl (permanent, names the
fix) only when the error that failed the render says so, or a console line of type
error during the job does; a page's probe remark ("WebGL not supported", then a fallback)
never turns an unrelated failure into a permanent one."""

from __future__ import annotations

from typing import Any

from support.worker_js import call_worker

from spoolrender.renderers.remotion import PERMANENT_KINDS

CLASSIFY = """
const job = {jobId: 'j', gl: 'angle'};
const keep = m.keepBrowserLog(job);
for (const [type, text] of input.console) keep({type, text, stackTrace: []});
const err = new Error(input.message);
const kind = m.classify(err, job);
return {kind, message: m.friendlyMessage({kind, err, job, request: {composition: 'Scene'}})};
"""
PROBE = "WebGL is not supported, falling back to 2D canvas"  # matches WEBGL_RE
TIMEOUT = 'A delayRender() "Loading font" was called but not cleared after 28000ms'


def classify(message: str, console: list[tuple[str, str]]) -> Any:
    return call_worker("errors.mjs", CLASSIFY, {"message": message, "console": console})


def test_a_webgl_error_that_failed_the_render_is_permanent_and_names_swangle() -> None:
    three = classify("Error creating WebGL context.", [])  # Three.js throws it
    assert three["kind"] == "no-webgl" and "no-webgl" in PERMANENT_KINDS
    assert three["message"] == (
        "No WebGL context with gl: angle on this host (Error creating WebGL context.): "
        "set `settings: {gl: swangle}` in the job file"
    )
    # CanvasKit's throw reaches us only as a logged error; the render fails without a message.
    skia = classify("", [("log", "rendering frame 0"), ("error", "Uncaught failed to create webgl context: err 0")])
    assert skia["kind"] == "no-webgl", skia
    assert "(Uncaught failed to create webgl context: err 0)" in skia["message"]


def test_a_probe_remark_leaves_an_unrelated_failure_retried() -> None:
    for probe_type in ("log", "warning", "info", "debug"):
        probed = classify(TIMEOUT, [(probe_type, PROBE), ("log", "using the 2D fallback")])
        assert probed["kind"] == "error" and probed["kind"] not in PERMANENT_KINDS, (probe_type, probed)
        assert probed["message"] == TIMEOUT
    crashed = classify("Target closed", [("warning", PROBE)])
    assert crashed["kind"] == "browser-crashed" and crashed["kind"] not in PERMANENT_KINDS
    # The same line logged as an error is the failure's own story.
    assert classify(TIMEOUT, [("error", PROBE)])["kind"] == "no-webgl"
