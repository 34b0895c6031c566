"""Processes the tests start: the spoolrender CLI, runner processes stopped as an
operator stops them, and commands run as the hostile spool-group member."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from spoolrender.spool.layout import SpoolLayout


def spoolrender_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "spoolrender.cli", *args]


MEMBER_UID = 65534  # nobody: the hostile spool-group member of the security tests
MEMBER_GROUP = "nogroup"


def as_member(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` as the hostile spool-group member (uid 65534, group nogroup only)."""
    return subprocess.run(
        ["setpriv", f"--reuid={MEMBER_UID}", f"--regid={MEMBER_GROUP}", "--clear-groups", *argv],
        check=check,
        capture_output=True,
        text=True,
    )


def runner_processes(spool: SpoolLayout) -> Iterator[Callable[..., subprocess.Popen[bytes]]]:
    procs: list[subprocess.Popen[bytes]] = []

    def start(*extra: str, env: dict[str, str] | None = None, log: Path | None = None) -> subprocess.Popen[bytes]:
        with open(log or os.devnull, "ab") as out:  # the child keeps its own copy
            proc = subprocess.Popen(
                spoolrender_cmd("run", "--spool", str(spool.root), "-v", *extra),
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**os.environ, **(env or {})},
            )
        procs.append(proc)
        return proc

    yield start
    # SIGTERM twice (the second one skips the grace time): the runner cancels its renders,
    # their whole process groups; a SIGKILL would leave them running as orphans. Up to
    # RUNNER_SIGTERM_GAP_S between the two, so that the runner has taken the first before the
    # second comes (two pending SIGTERMs are one); no gap for a runner that is gone already.
    for _ in range(2):
        for proc in procs:
            if proc.poll() is None:
                proc.terminate()
        wait_exited(procs, RUNNER_SIGTERM_GAP_S)
    for proc in procs:
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


RUNNER_SIGTERM_GAP_S = 0.3


def wait_exited(procs: list[subprocess.Popen[bytes]], timeout: float) -> None:
    """Until every process of ``procs`` has exited, or ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while any(proc.poll() is None for proc in procs) and time.monotonic() < deadline:
        time.sleep(0.02)


def stopped(proc: subprocess.Popen[bytes]) -> bool:
    """True once ``proc`` stopped itself with SIGSTOP (a pause point, SPOOLRENDER_PAUSE_AT)."""
    try:
        with open(f"/proc/{proc.pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[1].split()[0] == b"T"
    except OSError:
        return False
