"""The CLI's log lines (spoolrender.cli.log_output): a text line never carries a terminal
escape or a forged line from spool text, a JSON line carries a state change's fields, the
watchdog's harmless stop race is dropped, and the live display can take the lines and give
them back."""

from __future__ import annotations

import io
import json
import logging
import sys

from spoolrender.cli.log_output import _JsonFormatter, _TextFormatter, _WatchdogStopNoise, route_logs


def record(message: str, *args: object, **extra: object) -> logging.LogRecord:
    made = logging.LogRecord("spoolrender.runner.loop", logging.WARNING, __file__, 1, message, args, None)
    for key, value in extra.items():
        setattr(made, key, value)
    return made


def test_a_text_line_escapes_what_a_job_file_name_could_smuggle() -> None:
    line = _TextFormatter("%(levelname)s %(message)s").format(record("job %s: failed", "x\n2026 ERROR forged\x1b[2J"))
    assert "\n" not in line and "\x1b" not in line
    assert line.startswith("WARNING job x")
    assert "forged" in line  # shown, escaped: never dropped


def test_a_json_line_is_one_object_with_the_events_fields() -> None:
    made = record("job %s: done", "intro", event={"job_id": "intro", "state": "done", "attempt": 2})
    made.created, made.msecs = 1_700_000_000.25, 250.0
    line = _JsonFormatter().format(made)
    assert "\n" not in line
    assert json.loads(line) == {
        "time": "2023-11-14T22:13:20.250Z", "level": "warning", "logger": "spoolrender.runner.loop",
        "message": "job intro: done", "job_id": "intro", "state": "done", "attempt": 2,
    }  # fmt: skip


def test_a_json_line_carries_the_exception() -> None:
    try:
        raise ValueError("bad record")
    except ValueError:
        made = logging.LogRecord("spoolrender", logging.ERROR, __file__, 1, "boom", (), sys.exc_info())
    assert "ValueError: bad record" in json.loads(_JsonFormatter().format(made))["exception"]


def test_only_the_watchdog_stop_race_is_filtered() -> None:
    noise = _WatchdogStopNoise()
    assert not noise.filter(record("Unhandled exception: called when the thread is inactive"))
    assert noise.filter(record("job intro: failed"))


def test_the_live_display_takes_the_log_lines_and_gives_them_back() -> None:
    before, during = io.StringIO(), io.StringIO()
    handler = logging.StreamHandler(before)
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        undo = route_logs(during)
        logging.getLogger("spoolrender.test").error("during the display")
        undo()
        logging.getLogger("spoolrender.test").error("after it")
    finally:
        root.removeHandler(handler)
    assert "during the display" in during.getvalue() and "after it" not in during.getvalue()
    assert "after it" in before.getvalue() and "during the display" not in before.getvalue()
