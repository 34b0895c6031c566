"""scripts/test.sh's ``-n 4 --dist loadgroup`` keeps a group on one pytest-xdist worker.

The groups are tests/conftest.py's (a module's users of its own module fixture) and the
docs pages' (one terminal per page). xdist tells its scheduler a test's group by renaming
the test's node id (``<id>@<group>``) in its own collection hook. Two ways that was lost,
and loadgroup spread every test as ``--dist load`` does (nothing fails; each worker builds
the warm bundles, render workers and sshds again): pytest 9.2 keeps node ids where xdist
3.8 does not rename them (pytest-dev/pytest-xdist#1386: pytest pinned below 9.2), and
xdist's hook ran before tests/conftest.py's had added the module groups (now tryfirst).
A unit with a test marked ``slow`` is handed out first (tests/conftest.py orders the
collection, and turns off xdist's reorder by group size, which put it after every group):
collected last, it is the first test its worker runs.
A real pytest with two real workers runs the repository's own conftest here.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from support.checkout import REPO

TESTS = """
import os
import pytest


@pytest.fixture(scope="module")
def warm():
    return os.environ["PYTEST_XDIST_WORKER"]


@pytest.mark.parametrize("i", range(4))
def test_warm(warm, i):
    assert warm == os.environ["PYTEST_XDIST_WORKER"]
    open(os.path.join(os.environ["WORKERS_DIR"], str(i)), "w").write(warm)


@pytest.mark.xdist_group("page")
@pytest.mark.parametrize("i", range(4, 8))
def test_page(i):
    open(os.path.join(os.environ["WORKERS_DIR"], str(i)), "w").write(os.environ["PYTEST_XDIST_WORKER"])


@pytest.fixture(autouse=True)
def order(request):
    with open(os.path.join(os.environ["ORDER_DIR"], os.environ["PYTEST_XDIST_WORKER"]), "a") as fh:
        fh.write(request.node.name + "\\n")


@pytest.mark.slow
def test_long():
    open(os.path.join(os.environ["WORKERS_DIR"], "8"), "w").write(os.environ["PYTEST_XDIST_WORKER"])
"""


def test_loadgroup_runs_a_module_fixtures_users_and_a_named_group_on_one_worker(tmp_path: Path) -> None:
    (tmp_path / "test_grouped.py").write_text(TESTS)
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers = slow\n")
    workers = tmp_path / "workers"
    workers.mkdir()
    order = tmp_path / "order"
    order.mkdir()
    env = {**os.environ, "PYTHONPATH": str(REPO / "tests"), "WORKERS_DIR": str(workers), "ORDER_DIR": str(order)}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadgroup", "-p", "conftest", "-p", "no:cacheprovider",
         "-q", "test_grouped.py"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    ran = {int(p.name): p.read_text() for p in workers.iterdir()}
    assert sorted(ran) == list(range(9))
    assert len({ran[i] for i in range(4)}) == 1, ran  # the module fixture's users: one worker
    assert len({ran[i] for i in range(4, 8)}) == 1, ran  # an xdist_group: one worker
    (long_worker_order,) = [p.read_text().split() for p in order.iterdir() if p.name == ran[8]]
    assert long_worker_order[0] == "test_long", long_worker_order  # handed out first
