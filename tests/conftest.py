"""Shared fixtures: a real spool in a temp dir, configs, and a real render command."""

from __future__ import annotations

import compileall
import os
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from support.processes import MEMBER_GROUP, runner_processes
from support.spool_jobs import write_spool_config
from support.xdist_units import longest_first

import spoolrender
from spoolrender.config.spool_config import SpoolConfig, load_config
from spoolrender.spool.layout import SpoolLayout, init_spool


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


@pytest.fixture
def spool(tmp_path: Path) -> SpoolLayout:
    layout = init_spool(tmp_path / "spool")
    write_spool_config(layout, {})
    return layout


@pytest.fixture
def config(spool: SpoolLayout) -> SpoolConfig:
    return load_config(spool.root, environ={})


@pytest.fixture(scope="session")
def sample_bundles(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bundle cache (``cache_dir``) of every test that renders the sample project
    remotion/ without testing the bundling itself: one per run, shared by the pytest-xdist
    workers (their base temp dirs are in the run's). A bundle of remotion/ takes webpack
    30 s to minutes of CPU; 11 were built per run, one per module or test, where one serves
    them all. Sharing a cache_dir is what runners on one project do: the bundle cache's lock
    (on the project's node_modules/.cache) builds a key once, and the others wait and use it."""
    base = tmp_path_factory.getbasetemp()
    if "PYTEST_XDIST_WORKER" in os.environ:
        base = base.parent  # the run's directory: each worker's basetemp is popen-gwN in it
    path = base / "sample-bundles"
    path.mkdir(exist_ok=True)
    return path


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


@pytest.fixture
def start_member_runner(member_spool: SpoolLayout) -> Iterator[Callable[..., subprocess.Popen[bytes]]]:
    """:func:`start_runner` for :func:`member_spool`."""
    yield from runner_processes(member_spool)


@pytest.fixture
def start_runner(spool: SpoolLayout) -> Iterator[Callable[..., subprocess.Popen[bytes]]]:
    """Start `spoolrender run` as a real subprocess; all are killed at teardown."""
    yield from runner_processes(spool)
