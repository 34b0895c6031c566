"""runWorkerMain (worker/errors.mjs), the end of the one-shot worker scripts
(check-props.mjs, compositions.mjs): exit 0 when main resolves, even with handles left
open; else exactly one fatal line on stdout and exit 1; a stray unhandled rejection (a
failed page's close) is logged to stderr and changes neither."""

from __future__ import annotations

import json
import subprocess

from support.worker_js import NODE_TIMEOUT_S, WORKER


def run_main(body: str) -> subprocess.CompletedProcess[str]:
    script = (
        f"import {{runWorkerMain}} from {json.dumps((WORKER / 'errors.mjs').as_uri())};\n"
        # A rejection nobody awaits, as a failed page's own close gives, while main runs on.
        "const stray = async () => { Promise.reject(new Error('Target closed')); await new Promise((r) => "
        "setTimeout(r, 20)); };\n"
        f"runWorkerMain(async () => {{ await stray(); {body} }},\n"
        "  (err, first) => `described: ${first || 'nothing'}`);\n"
    )
    return subprocess.run(["node", "--input-type=module", "-e", script], capture_output=True, text=True,
                          timeout=NODE_TIMEOUT_S, check=False)  # fmt: skip


def test_a_resolved_main_exits_0_though_a_handle_is_open() -> None:
    done = run_main("setInterval(() => undefined, 1000);")
    assert (done.returncode, done.stdout) == (0, "")
    assert "[spoolrender-worker] unhandled rejection: Error: Target closed" in done.stderr


def test_a_failed_main_emits_one_fatal_line_and_exits_1() -> None:
    failed = run_main("const err = new Error('Error: no such bundle\\nat somewhere'); err.kind = 'setup'; throw err;")
    assert failed.returncode == 1, failed.stderr
    (line,) = failed.stdout.splitlines()
    fatal = json.loads(line)
    assert {k: fatal[k] for k in ("type", "kind", "message")} == {
        "type": "fatal", "kind": "setup", "message": "described: no such bundle",
    }  # fmt: skip
    assert "no such bundle" in fatal["detail"] and "at " in fatal["detail"]
    assert "unhandled rejection: Error: Target closed" in failed.stderr


def test_a_thrown_non_error_has_kind_error_and_its_text() -> None:
    failed = run_main("throw '';")
    assert failed.returncode == 1
    assert json.loads(failed.stdout)["message"] == "described: nothing"
    assert json.loads(failed.stdout)["kind"] == "error"
