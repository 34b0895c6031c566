"""The live display of ``spoolrender run`` on a terminal, drawn with rich.

Per slot the job, its progress bar, percent, elapsed time and ETA; the run's totals (a
progress bar of the batch under ``--drain``); the last failures. Every figure comes from
:meth:`spoolrender.runner.loop.Runner.view` (the runner's own claims and the progress its
renderers report to the heartbeat).

It stays out of the way where nobody watches: only when stdout is a terminal, not under
systemd (``INVOCATION_ID`` or ``JOURNAL_STREAM`` set: the journal wants plain lines), not
with ``TERM=dumb``, and not with ``--no-live``. Logs stay what they are: the same lines on
stderr. When stderr is that same terminal they are printed above the display (through
rich's console, which redraws the display below them); when stderr goes elsewhere (a
file, a pipe) they go there untouched and only the display is on the terminal.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import IO

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from spoolrender.core.safe_text import printable
from spoolrender.ops.runner_view import RunnerView, SlotView

REFRESH_PER_SECOND = 2
BAR_WIDTH = 24
SYSTEMD_VARIABLES = ("INVOCATION_ID", "JOURNAL_STREAM")


def live_wanted(stream: IO[str], environ: Mapping[str, str], *, refused: bool) -> bool:
    """Draw the display on ``stream``? Not with ``--no-live``, off a terminal, or under systemd."""
    if refused or not stream.isatty():
        return False
    if any(environ.get(name) for name in SYSTEMD_VARIABLES):
        return False
    return environ.get("TERM", "") != "dumb"


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    seconds = int(seconds)
    if seconds < 3600:
        return f"{seconds // 60}:{seconds % 60:02d}"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def _slot_row(s: SlotView) -> list[RenderableType]:
    if s.job_id is None:
        return [str(s.slot), Text("idle", style="dim"), "", "", "", "", ""]
    fraction = s.progress
    bar: RenderableType = ProgressBar(total=1.0, completed=fraction or 0.0, width=BAR_WIDTH, pulse=fraction is None)
    percent = "-" if fraction is None else f"{fraction * 100:.0f}%"
    run = "" if s.run in (None, 1) else f" (run {s.run})"
    return [str(s.slot), Text(printable(s.job_id) + run), bar, percent, _duration(s.elapsed), _duration(s.eta),
            Text(printable(s.stage or ""))]  # fmt: skip


def render_view(view: RunnerView, width: int = 120) -> RenderableType:
    """One frame: the slots table, the totals line (and batch bar), the last failures."""
    table = Table(box=None, pad_edge=False, show_edge=False, header_style="bold")
    for column in ("SLOT", "JOB", "PROGRESS", "%", "ELAPSED", "ETA", "STAGE"):
        table.add_column(
            column, no_wrap=column != "JOB", justify="right" if column in ("%", "ELAPSED", "ETA") else "left"
        )
    for s in view.slots:
        table.add_row(*_slot_row(s))
    finished = view.done + view.failed + view.retried + view.requeued
    totals = Text(
        f"{'drain' if view.drain else 'run'}: {view.claimed} claimed, {view.running} running, {view.done} done, "
        f"{view.retried} to retry, {view.failed} failed, {view.waiting} waiting"
    )
    if view.paused:
        totals.append("  (spool paused)", style="yellow")
    if view.stopping:
        totals.append("  stopping: no more claims", style="yellow")
    parts: list[RenderableType] = [table, totals]
    if view.drain:
        batch = finished + view.running + view.waiting
        parts.append(ProgressBar(total=max(batch, 1), completed=finished, width=BAR_WIDTH * 2))
    if view.failures:
        parts.append(Text("last failures", style="bold"))
        for f in view.failures:
            what = "failed" if f.state == "failed" else "will retry"
            line = Text(f"  {printable(f.job_id)}  {what}  {printable(f.kind or '?')}: ", style="red")
            line.append(printable((f.message or "").splitlines()[0] if f.message else ""))
            line.truncate(max(40, width), overflow="ellipsis")
            parts.append(line)
    return Group(*parts)


@contextmanager
def live_display(
    view: Callable[[], RunnerView],
    stdout: IO[str],
    stderr: IO[str],
    route_logs: Callable[[IO[str]], Callable[[], None]],
) -> Iterator[None]:
    """Show ``view()`` on ``stdout`` while the block runs; the last frame stays on screen.

    ``route_logs(stream)`` sends the log lines to ``stream`` and returns how to undo it:
    used only when stderr is the same terminal, so that log lines land above the display
    instead of tearing it.
    """
    console = Console(file=stdout, highlight=False)
    same_terminal = stderr.isatty() and os.path.sameopenfile(stdout.fileno(), stderr.fileno())
    live = Live(
        console=console, get_renderable=lambda: render_view(view(), console.width),
        refresh_per_second=REFRESH_PER_SECOND, redirect_stdout=False, redirect_stderr=same_terminal,
    )  # fmt: skip
    with live:
        # Live has put its proxy into sys.stderr; the log handler holds the real stream until told.
        undo = route_logs(sys.stderr) if same_terminal else _nothing
        try:
            yield
        finally:
            undo()
            live.refresh()  # the last frame: the run's final totals


def _nothing() -> None:
    return None
