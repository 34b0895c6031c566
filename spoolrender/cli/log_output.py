"""How `spoolrender` logs: the only place that configures logging."""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from collections.abc import Callable
from typing import IO, Any

from spoolrender.core.safe_text import printable


def setup_logging(args: argparse.Namespace) -> None:
    level = logging.WARNING if args.quiet else (logging.INFO if args.verbose < 2 else logging.DEBUG)
    if args.command != "run" and not args.verbose:
        level = logging.WARNING
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        _JsonFormatter() if args.log_format == "json"
        else _TextFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    )  # fmt: skip
    handler.addFilter(_WatchdogStopNoise())
    logging.basicConfig(level=level, handlers=[handler])


class _WatchdogStopNoise(logging.Filter):
    # watchdog 7 logs this at ERROR when its emitter thread is stopped while blocked in
    # a read: a harmless race of observer.stop(), not a lost event (listings are the truth).
    def filter(self, record: logging.LogRecord) -> bool:
        return "called when the thread is inactive" not in record.getMessage()


class _TextFormatter(logging.Formatter):
    """One line per record: spool text in messages (reasons, file names) is escaped.

    A render's error line or a dropped file's name can hold terminal escapes or newlines;
    in a log they would forge lines or drive the reader's terminal. Tracebacks (appended
    after the message by format()) keep their own lines. JSON logs escape by themselves.
    """

    def formatMessage(self, record: logging.LogRecord) -> str:
        record.message = printable(record.message, double_backslashes=False)
        return super().formatMessage(record)


class _JsonFormatter(logging.Formatter):
    """One JSON object per line for log shippers; state changes add their fields."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        event = getattr(record, "event", None)
        if isinstance(event, dict):
            out.update(event)
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


def route_logs(stream: IO[str]) -> Callable[[], None]:
    """Send the log lines to ``stream`` (the live display's console, which prints them above
    the display); returns how to send them back where they went."""
    handlers = [h for h in logging.getLogger().handlers if isinstance(h, logging.StreamHandler)]
    before = [h.setStream(stream) for h in handlers]

    def undo() -> None:
        for handler, old in zip(handlers, before, strict=True):
            if old is not None:
                handler.setStream(old)

    return undo
