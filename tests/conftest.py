"""Shared fixtures: a real spool in a temp dir, configs, and a real render command."""

from __future__ import annotations

import compileall
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

import spoolrender
from spoolrender.config import SpoolConfig, load_config
from spoolrender.layout import SpoolLayout, init_spool

PROGRAMS = Path(__file__).parent / "programs"
RENDER_PROPS = PROGRAMS / "render_props.py"
REPO = Path(__file__).resolve().parent.parent
REMOTION = REPO / "remotion"  # the sample Remotion project (scripts/setup.sh installs its packages)
FFPROBE = REMOTION / "node_modules/@remotion/compositor-linux-x64-gnu/ffprobe"
# `pytestmark = REMOTION_MARKS` in a module that renders with Remotion: selected by `-m
# remotion`, and skipped (with what to run) where the sample project's npm packages or
# Debian's Chromium are missing.
REMOTION_MARKS = [
    pytest.mark.remotion,
    pytest.mark.skipif(
        not (REMOTION / "node_modules" / "@remotion" / "renderer").is_dir(),
        reason="remotion/node_modules missing: run scripts/setup.sh",
    ),
    pytest.mark.skipif(not Path("/usr/bin/chromium").exists(), reason="Debian chromium missing: run scripts/setup.sh"),
]


def pytest_configure(config: pytest.Config) -> None:
    """Compile the package's bytecode once, before any test starts a CLI process.

    The suite starts ``python -m spoolrender.cli`` a few thousand times. Under
    PYTHONDONTWRITEBYTECODE=1 (set on these machines, and inherited by every child) no
    process writes a .pyc, so each one compiled all ~100 modules from source again: 1.1 s of
    CPU per start on a loaded 2-core host, against 0.45 s with the bytecode there. Children
    still read .pyc files; only the writing is off. Compiled in the controlling process only
    (pytest-xdist workers have ``workerinput``) and only what is out of date; a .pyc is
    written to a temporary name and renamed into place, so a concurrent reader never sees
    half of one."""
    if not hasattr(config, "workerinput"):
        compileall.compile_dir(Path(spoolrender.__file__).parent, quiet=1)
    # pytest-xdist's scheduler hands work units out in collection order, after sorting them
    # by their number of tests (--loadscope-reorder, on by default): the 59 quick docs cases
    # came first, and the longest single tests (a conformance case, the README's own-project
    # block: minutes each) only after every group, where a worker that draws one late ends
    # the run alone. The order is pytest_collection_modifyitems's below (the long ones
    # first); the controller reads this option when it schedules.
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


# tryfirst: before pytest-xdist's own hook, which turns the marks into groups (plugins
# registered later run first, and xdist's worker plugin is registered after this conftest).
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under ``--dist loadgroup`` (scripts/test.sh), keep a module's users of a module- or
    session-scoped fixture of that module on one pytest-xdist worker: such a fixture is a
    warm resource (a Remotion bundle and render worker, an sshd, a server over a busy spool)
    that each worker would otherwise build again. The other tests are spread one by one.
    A test that names its own ``xdist_group`` keeps it (the docs examples: one per page)."""
    for item in items:
        if not isinstance(item, pytest.Function) or item.get_closest_marker("xdist_group") is not None:
            continue
        module = item.nodeid.split("::", 1)[0]
        for fixturedefs in item._fixtureinfo.name2fixturedefs.values():
            if any(d.scope in ("module", "session") and d.baseid == module for d in fixturedefs):
                item.add_marker(pytest.mark.xdist_group(module))
                break
    if hasattr(config, "workerinput"):
        items[:] = longest_first(items)


def longest_first(items: list[pytest.Item]) -> list[pytest.Item]:
    """``items`` with the work units (an ``xdist_group``, else a test) likely to take longest
    first: those with a test marked ``slow``, then those with one marked ``remotion``, then the
    others; within a rank the units of more tests first, then collection order (a unit's
    tests keep theirs). A worker that draws a long unit late ends the run alone
    (pytest-xdist gives each worker up to three units ahead, in this order). Only on xdist
    workers: a run in one process keeps pytest's order, so that a module's tests stay
    together around its module fixtures."""
    ranks: dict[str, int] = {}
    sizes: dict[str, int] = {}
    for item in items:
        unit = unit_of(item)
        rank = 0 if item.get_closest_marker("slow") else 1 if item.get_closest_marker("remotion") else 2
        ranks[unit] = min(rank, ranks.get(unit, rank))
        sizes[unit] = sizes.get(unit, 0) + 1
    return sorted(items, key=lambda item: (ranks[unit_of(item)], -sizes[unit_of(item)]))  # stable


def unit_of(item: pytest.Item) -> str:
    """The work unit pytest-xdist's loadgroup scheduler sees: the test's xdist_group, else the test."""
    mark = item.get_closest_marker("xdist_group")
    if mark is None:
        return item.nodeid
    return str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))


# Fast timings for tests: the protocol is the same, only the clocks run quicker.
FAST: dict[str, Any] = {
    "settle_seconds": 0.3,
    "heartbeat_seconds": 0.2,
    "lease_seconds": 2.0,
    "rescan_seconds": 0.5,
    "poll_seconds": 0.2,
    "backoff_base_seconds": 0.05,
    "backoff_cap_seconds": 0.2,
    "grace_seconds": 5,
    "slots": 2,
    "commands": {
        "props": [sys.executable, str(RENDER_PROPS), "{output}", "{props_file}"],
    },
}


@pytest.fixture
def spool(tmp_path: Path) -> SpoolLayout:
    layout = init_spool(tmp_path / "spool")
    write_spool_config(layout, {})
    return layout


def write_spool_config(layout: SpoolLayout, extra: dict[str, Any]) -> None:
    (layout.root / "spoolrender.yaml").write_text(yaml.safe_dump({**FAST, **extra}), encoding="utf-8")


@pytest.fixture
def config(spool: SpoolLayout) -> SpoolConfig:
    return load_config(spool.root, environ={})


def command_job(**props: Any) -> dict[str, Any]:
    return {"renderer": "command", "command": "props", "props": props}


def drop(layout: SpoolLayout, name: str, job: dict[str, Any] | str | bytes) -> Path:
    """Drop a job into incoming/ the way a well-behaved submitter does (write, then rename)."""
    if isinstance(job, dict):
        data = yaml.safe_dump(job).encode()
    elif isinstance(job, str):
        data = job.encode()
    else:
        data = job
    tmp = layout.incoming / f".{name}.part"
    tmp.write_bytes(data)
    target = layout.incoming / name
    os.rename(tmp, target)
    # Age it past the settle time by the file's own clock, as a job dropped a while ago.
    old = time.time() - 60
    os.utime(target, (old, old))
    return target


def allow_steps(steps_file: Path, count: int) -> None:
    """Let a render_props job with ``steps_file`` go on to PROGRESS step ``count`` of 10 (10
    ends it): a test decides how far a render is, never a clock. Renamed into place, so the
    render never reads a half-written number."""
    part = steps_file.with_name(steps_file.name + ".part")
    part.write_text(str(count))
    os.rename(part, steps_file)


def entries(layout: SpoolLayout, state: str) -> list[str]:
    return sorted(os.listdir(layout.state_dir(state)))


def spoolrender_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "spoolrender.cli", *args]


MEMBER_UID = 65534  # nobody: the hostile spool-group member of the security tests
MEMBER_GROUP = "nogroup"


@pytest.fixture
def member_spool() -> Iterator[SpoolLayout]:
    """A spool of group nogroup in a directory every uid can traverse (pytest's tmp is 0700),
    for tests that play a hostile spool-group member with :func:`as_member`."""
    base = Path(tempfile.mkdtemp(prefix="spoolrender-member-"))
    os.chmod(base, 0o755)
    layout = init_spool(base / "spool", group=MEMBER_GROUP)
    write_spool_config(layout, {"slots": 1})
    yield layout
    subprocess.run(["rm", "-rf", str(base)], check=False)


def as_member(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` as the hostile spool-group member (uid 65534, group nogroup only)."""
    return subprocess.run(
        ["setpriv", f"--reuid={MEMBER_UID}", f"--regid={MEMBER_GROUP}", "--clear-groups", *argv],
        check=check,
        capture_output=True,
        text=True,
    )


@pytest.fixture
def start_member_runner(member_spool: SpoolLayout) -> Iterator[Callable[..., subprocess.Popen[bytes]]]:
    """:func:`start_runner` for :func:`member_spool`."""
    yield from _runners(member_spool)


@pytest.fixture
def start_runner(spool: SpoolLayout) -> Iterator[Callable[..., subprocess.Popen[bytes]]]:
    """Start `spoolrender run` as a real subprocess; all are killed at teardown."""
    yield from _runners(spool)


def _runners(spool: SpoolLayout) -> Iterator[Callable[..., subprocess.Popen[bytes]]]:
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


def wait_for(predicate: Callable[[], bool], timeout: float = 60.0, interval: float = 0.05) -> None:
    """Until ``predicate()``; the deadline is generous (a loaded machine slows every step), as
    it costs nothing when the condition comes."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(interval)
    raise AssertionError(f"condition not met within {timeout} s")
