"""The WebGL rule (worker/errors.mjs): a failure is kind no-webgl (permanent, names the
fix) only when the error that failed the render says so, or a console line of type
error during the job does; a page's probe remark ("WebGL not supported", then a fallback)
never turns an unrelated failure into a permanent one."""

from __future__ import annotations

from typing import Any

from support.worker_js import call_worker

from spoolrender.renderers.remotion.renderer import PERMANENT_KINDS

# One node process for several cases: each a failure's message and the job's console.
CLASSIFY = """
return input.map(({message, console}) => {
  const job = {jobId: 'j', gl: 'angle'};
  const keep = m.keepBrowserLog(job);
  for (const [type, text] of console) keep({type, text, stackTrace: []});
  const err = new Error(message);
  const kind = m.classify(err, job);
  return {kind, message: m.friendlyMessage({kind, err, job, request: {composition: 'Scene'}})};
});
"""
PROBE = "WebGL is not supported, falling back to 2D canvas"  # matches WEBGL_RE
TIMEOUT = 'A delayRender() "Loading font" was called but not cleared after 28000ms'


def classify(*cases: tuple[str, list[tuple[str, str]]]) -> list[Any]:
    return list(call_worker("errors.mjs", CLASSIFY, [{"message": m, "console": c} for m, c in cases]))


def test_a_webgl_error_that_failed_the_render_is_permanent_and_names_swangle() -> None:
    three, skia = classify(
        ("Error creating WebGL context.", []),  # Three.js throws it
        # CanvasKit's throw reaches us only as a logged error; the render fails without a message.
        ("", [("log", "rendering frame 0"), ("error", "Uncaught failed to create webgl context: err 0")]),
    )
    assert three["kind"] == "no-webgl" and "no-webgl" in PERMANENT_KINDS
    assert three["message"] == (
        "No WebGL context with gl: angle on this host (Error creating WebGL context.): "
        "set `settings: {gl: swangle}` in the job file"
    )
    assert skia["kind"] == "no-webgl", skia
    assert "(Uncaught failed to create webgl context: err 0)" in skia["message"]


def test_a_probe_remark_leaves_an_unrelated_failure_retried() -> None:
    probe_types = ("log", "warning", "info", "debug")
    *probed, crashed, logged_as_error = classify(
        *[(TIMEOUT, [(t, PROBE), ("log", "using the 2D fallback")]) for t in probe_types],
        ("Target closed", [("warning", PROBE)]),
        (TIMEOUT, [("error", PROBE)]),
    )
    for probe_type, result in zip(probe_types, probed, strict=True):
        assert result == {"kind": "error", "message": TIMEOUT}, probe_type
    assert "error" not in PERMANENT_KINDS
    assert crashed["kind"] == "browser-crashed" and crashed["kind"] not in PERMANENT_KINDS
    # The same line logged as an error is the failure's own story.
    assert logged_as_error["kind"] == "no-webgl"
