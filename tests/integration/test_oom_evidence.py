"""Out-of-memory evidence (renderers/remotion/out_of_memory.py): a rise of the OOM killer's count is this
render's only when it is counted in the runner's memory cgroup, or the render's own worker
died of SIGKILL; a host-wide rise alone is "possibly" out of memory, never final.

No OOM kill is caused here (it would hit other developers' processes on a shared host):
the counts are read for real, the verdicts are checked from given counts.
"""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from spoolrender.errors import RenderError
from spoolrender.renderers.remotion.node_worker import OUT_OF_MEMORY, RemotionWorker
from spoolrender.renderers.remotion.out_of_memory import OomCount, oom_evidence, oom_kills
from spoolrender.renderers.remotion.renderer import _memory_verdict


def test_the_oom_count_says_whose_it_is() -> None:
    count = oom_kills()
    assert count is not None  # /proc/vmstat at least, on any Linux
    assert count.scope in ("cgroup", "host") and count.kills >= 0
    with pytest.raises(ValueError, match="scope"):
        OomCount(1, "somewhere")


def test_a_host_wide_rise_alone_is_only_possibly_the_renders() -> None:
    evidence = oom_evidence(OomCount(3, "host"), OomCount(4, "host"), own_sigkill=False)
    assert evidence is not None and not evidence.certain
    assert evidence.reason.startswith("possibly out of memory") and "oom_kill 3 -> 4, host-wide" in evidence.reason


@pytest.mark.parametrize(
    ("before", "after", "own_sigkill"),
    [
        (OomCount(3, "cgroup"), OomCount(4, "cgroup"), False),  # counted in the runner's cgroup
        (OomCount(3, "host"), OomCount(5, "host"), True),  # host-wide, and our worker was SIGKILLed
    ],
)
def test_a_rise_tied_to_the_renders_processes_is_certain(before: OomCount, after: OomCount, own_sigkill: bool) -> None:
    evidence = oom_evidence(before, after, own_sigkill=own_sigkill)
    assert evidence is not None and evidence.certain
    assert "possibly" not in evidence.reason
    assert evidence.reason.startswith("the kernel's OOM killer ended a process of the render (")


@pytest.mark.parametrize(
    ("before", "after"),
    [
        (OomCount(3, "cgroup"), OomCount(3, "cgroup")),  # no rise
        (OomCount(3, "cgroup"), OomCount(9, "host")),  # counts of different scopes
        (None, OomCount(9, "host")),
        (OomCount(3, "host"), None),
    ],
)
def test_no_evidence_without_a_comparable_rise(before: OomCount | None, after: OomCount | None) -> None:
    assert oom_evidence(before, after, own_sigkill=True) is None


def test_possibly_out_of_memory_is_retried_even_at_concurrency_1() -> None:
    crash = RenderError("the browser crashed", transient=True, kind="browser-crashed")
    verdict = _memory_verdict(crash, OomCount(3, "host"), OomCount(4, "host"), 1, own_sigkill=False)
    assert verdict.kind == OUT_OF_MEMORY and verdict.transient
    assert verdict.message.startswith("possibly out of memory") and "not retried" not in verdict.message
    assert verdict.message.endswith("the browser crashed (the retry renders at concurrency 1)")


def test_certainly_out_of_memory_at_concurrency_1_is_final() -> None:
    crash = RenderError("the browser crashed", transient=True, kind="browser-crashed")
    verdict = _memory_verdict(crash, OomCount(3, "cgroup"), OomCount(4, "cgroup"), 1, own_sigkill=False)
    assert verdict.kind == OUT_OF_MEMORY and not verdict.transient and "not retried" in verdict.message
    at_two = _memory_verdict(crash, OomCount(3, "host"), OomCount(4, "host"), 2, own_sigkill=True)
    assert at_two.kind == OUT_OF_MEMORY and at_two.transient and "possibly" not in at_two.message


def test_a_failure_the_oom_killer_cannot_cause_is_left_alone() -> None:
    invalid = RenderError("no composition 'Nope'", transient=False, kind="invalid-input")
    assert _memory_verdict(invalid, OomCount(3, "host"), OomCount(4, "host"), 2, own_sigkill=True) is invalid


def test_the_workers_own_sigkill_is_read_from_its_exit_status() -> None:
    """The evidence `own_sigkill` comes from: a real process, SIGKILLed, as the worker's
    exit status shows it (only the process is real: no Node worker is started)."""
    worker = RemotionWorker.__new__(RemotionWorker)
    worker.proc = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    assert worker.exit_signal() is None  # alive
    worker.proc.kill()
    worker.proc.wait()
    assert worker.proc.stdin is not None
    worker.proc.stdin.close()
    assert worker.exit_signal() == signal.SIGKILL
    ended = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    ended.wait()
    worker.proc = ended
    assert worker.exit_signal() is None  # an exit code is no signal
