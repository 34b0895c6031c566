"""The live display of `spoolrender run` in a real terminal (a pty), and plain logs elsewhere."""

from __future__ import annotations

import fcntl
import os
import re
import select
import struct
import subprocess
import termios
import time
from pathlib import Path

from support.processes import spoolrender_cmd
from support.spool_jobs import allow_steps, command_job, drop
from support.waiting import wait_for

from spoolrender.spool.layout import SpoolLayout

ESCAPE = re.compile(rb"\x1b\[[0-9;?]*[A-Za-z]")
LOG_LINE = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (INFO|WARNING|ERROR|DEBUG) spoolrender\.")


def _environment(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("INVOCATION_ID", "JOURNAL_STREAM")}
    return {**env, "TERM": "xterm-256color", "COLUMNS": "", "LINES": "", **extra}


class Terminal:
    """A pty 120x40 that a child writes to as its stdout and stderr; what it wrote is kept."""

    def __init__(self) -> None:
        self.master, self.slave = os.openpty()
        fcntl.ioctl(self.slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
        self.output = b""

    def read(self) -> bytes:
        while select.select([self.master], [], [], 0.05)[0]:
            try:
                chunk = os.read(self.master, 65536)
            except OSError:  # EIO: the child closed the terminal's last handle
                break
            if not chunk:
                break
            self.output += chunk
        return self.output

    def text(self) -> str:
        return ESCAPE.sub(b"", self.read()).decode("utf-8", "replace")


def _drain_in(spool: SpoolLayout, terminal: Terminal, *extra: str, env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        spoolrender_cmd("run", "--drain", "--spool", str(spool.root), *extra),
        stdin=subprocess.DEVNULL, stdout=terminal.slave, stderr=terminal.slave, env=env,
    )  # fmt: skip


def _finish(proc: subprocess.Popen[bytes], terminal: Terminal) -> None:
    deadline = time.monotonic() + 120
    while proc.poll() is None and time.monotonic() < deadline:
        terminal.read()
    assert proc.wait(timeout=5) == 3  # a job failed for good: --drain's exit status 3
    terminal.read()


def test_run_on_a_terminal_shows_slots_progress_totals_and_failures(spool: SpoolLayout, tmp_path: Path) -> None:
    steps = tmp_path / "steps"
    allow_steps(steps, 4)
    drop(spool, "title-card.yaml", command_job(steps_file=str(steps)))
    drop(spool, "broken-card.yaml", {**command_job(exit=1), "max_attempts": 1})
    terminal = Terminal()
    proc = _drain_in(spool, terminal, env=_environment())
    try:
        # The slot shows the job with the percent its renderer reported (PROGRESS 0.4).
        wait_for(lambda: re.search(r"title-card +\S* +40% ", terminal.text()) is not None, timeout=90)
        wait_for(lambda: "broken-card  failed  command-exit" in terminal.text(), timeout=90)
        screen = terminal.text()
        assert re.search(r"SLOT +JOB +PROGRESS +% +ELAPSED +ETA +STAGE", screen), screen
        assert re.search(r"drain: 2 claimed, 1 running, 0 done, 0 to retry, 1 failed, 0 waiting", screen), screen
        # Logs go on above the display, the same lines as without it.
        assert re.search(LOG_LINE.pattern + r"run\.executor: job broken-card: running -> failed", screen), screen
        allow_steps(steps, 10)
        _finish(proc, terminal)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(terminal.slave)
    screen = terminal.text()
    assert "drain: 2 claimed, 0 running, 1 done, 0 to retry, 1 failed, 0 waiting" in screen, screen
    assert re.search(r"runner \S+ stopped: drained: 2 claimed, 1 done", screen), screen


def test_run_without_a_terminal_or_under_systemd_writes_plain_logs(spool: SpoolLayout) -> None:
    drop(spool, "title-card.yaml", command_job())
    drop(spool, "broken-card.yaml", {**command_job(exit=1), "max_attempts": 1})
    piped = subprocess.run(spoolrender_cmd("run", "--drain", "--spool", str(spool.root)),
                           capture_output=True, env=_environment(), timeout=120)  # fmt: skip
    assert piped.returncode == 3
    # stdout: the one summary line `run` always ends with; no display.
    assert re.fullmatch(rb"drained: 2 claimed, 1 done, [^\n\x1b]*\n", piped.stdout), piped.stdout
    assert b"\x1b" not in piped.stderr
    lines = piped.stderr.decode().splitlines()
    assert lines and all(LOG_LINE.match(line) for line in lines), lines
    assert "SLOT" not in piped.stderr.decode()

    # A terminal, but systemd's (its journal wants lines), or refused with --no-live.
    for extra, env in (((), _environment(INVOCATION_ID="0123abcd")), (("--no-live",), _environment())):
        drop(spool, "again.yaml", {**command_job(exit=1), "max_attempts": 1, "id": f"again-{len(extra)}"})
        terminal = Terminal()
        proc = _drain_in(spool, terminal, *extra, env=env)
        try:
            _finish(proc, terminal)
        finally:
            os.close(terminal.slave)
        out = terminal.read()
        assert not ESCAPE.search(out), out
        assert b"SLOT" not in out
        text = out.decode().replace("\r\n", "\n")
        plain = [line for line in text.splitlines() if line and not line.startswith("drained: ")]
        assert plain and all(LOG_LINE.match(line) for line in plain), text
