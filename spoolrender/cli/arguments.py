"""What every command's parser shares: the common options (``--spool``, ``--set``, ``-v``,
``-q``, ``--log-format``, ``--no-live``) and each value's type, which parses a flag's text
(``50m``, ``3``, ``urgent``) or refuses it with argparse's usage message.

Separate from the parsers themselves (cli/parser.py, cli/operator_parsers.py) because these
are the words the commands' parsers are written in, not a command: both import them, and
what a duration or a queue name means on the command line is said once here.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TypeAlias

from spoolrender.config.spool_config import CONFIG_KEYS
from spoolrender.errors import SpoolrenderError

# The help text is laid out by hand (examples, exit statuses): printed as written.
RAW = argparse.RawDescriptionHelpFormatter
# What add_subparsers() returns; a string: the class is generic only to type checkers.
Subparsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


def add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--spool", type=Path, default=None,
        help="spool directory (default: $SPOOLRENDER_SPOOL or ./spool)",
    )  # fmt: skip
    p.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE",
        help=f"override a spool setting for this command (keys: {', '.join(CONFIG_KEYS)})",
    )  # fmt: skip
    p.add_argument("-v", "--verbose", action="count", default=0, help="more log output (-vv for debug)")
    p.add_argument("-q", "--quiet", action="store_true", help="only warnings and errors")
    p.add_argument(
        "--log-format", choices=("text", "json"), default="text",
        help="json: one object per line (state changes carry job, from, to, attempt, host, duration, reason)",
    )  # fmt: skip


def add_live_option(p: argparse.ArgumentParser) -> None:
    """`run --no-live` (cli/live_display.py): the display is on by itself only where someone watches."""
    p.add_argument(
        "--no-live", action="store_true",
        help="no live display (slots, progress, ETA, totals, last failures); it is shown only when stdout is "
        "a terminal and not under systemd (INVOCATION_ID, JOURNAL_STREAM), and logs stay the same lines",
    )  # fmt: skip


def queue_name(value: str) -> str:
    from spoolrender.config.queues import name_problem

    problem = name_problem("queue", value)
    if problem is not None:
        raise argparse.ArgumentTypeError(problem)
    return value


def comma_names(text: str | None) -> list[str] | None:
    """A comma-separated flag as a list (config checks the names); None when not given."""
    return None if text is None else [part.strip() for part in text.split(",") if part.strip()]


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
    return value


def non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0, got {text!r}")
    return value


def duration(text: str) -> float:
    """A DURATION flag: a number with its unit (``50m``), > 0."""
    seconds = _parse(text, bare_seconds=False)
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"expected a duration > 0, got {text!r}")
    return seconds


def age(text: str) -> float:
    """An age flag (``--older-than``): a number with its unit, >= 0 (``0s``: everything)."""
    return _parse(text, bare_seconds=False)


def seconds(text: str) -> float:
    """A SECONDS flag: a bare number is seconds (the name says so); a unit may be given (``2m``)."""
    return _parse(text, bare_seconds=True)


def watch_interval(text: str) -> float:
    """``status --watch``'s interval: at least STATUS_WATCH_MIN_S (0 or less redrew in a tight loop)."""
    from spoolrender.defaults import STATUS_WATCH_MIN_S

    interval = _parse(text, bare_seconds=True)
    if interval < STATUS_WATCH_MIN_S:
        raise argparse.ArgumentTypeError(f"expected an interval of at least {STATUS_WATCH_MIN_S:g} s, got {text!r}")
    return interval


def _parse(text: str, *, bare_seconds: bool) -> float:
    from spoolrender.config.durations import parse_duration

    try:
        return parse_duration(text, bare_seconds=bare_seconds)
    except SpoolrenderError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc
