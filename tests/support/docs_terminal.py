"""A reader's terminal for the runnable examples (shell, shell-remotion, python) of one page.

A reader types a page's examples into one terminal, top to bottom: a runner started with
``&`` in one block is still there for the next one. So a :class:`Terminal` is one temp
HOME, one working directory and one spool directory for ``/srv/spool``, shared by a
page's examples in page order; each block runs in its own session (process group), and
whatever it left running in the background is stopped when the terminal is closed.

Nothing of the example's text is rewritten but the placeholder ``/srv/spool``; ``~/my-video``
needs no rewriting, it is in the temp HOME.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import psutil

from support.docs_examples import Example, Kind
from support.node_modules import link_node_modules as private_node_modules

SPOOL_PLACEHOLDER = "/srv/spool"
PROJECT_NAME = "my-video"  # ~/my-video
OUTPUT_TAIL_LINES = 25  # of a failed block's output, in its failure message
STOP_WAIT_S = 20.0  # for a background process group to go after SIGTERM, before SIGKILL
# Not passed to the examples: they belong to this test run, not to a reader's shell.
_DROPPED_VARIABLES = ("SPOOLRENDER_", "PYTEST_", "VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "XDG_")


class Terminal:
    """One page's temp HOME, working directory and spool, its examples run in order."""

    def __init__(
        self,
        root: Path,
        *,
        project: Path,
        link_node_modules: bool,
        lockfile: bool = True,
        spoolrender: Path | None,
        wheel: Path | None = None,
        timeout: float,
    ) -> None:
        """~/my-video is a copy of the Remotion project ``project`` without its node_modules,
        linked there instead with ``link_node_modules``, and without its package-lock.json
        unless ``lockfile`` (as Remotion's starters come: none ships one); ``spoolrender`` (a console script),
        if given, is first on PATH; ``wheel``, if given, is in the working directory."""
        self.root = root
        self.home = root / "home"
        self.cwd = root / "work"
        self.spool = root / "srv" / "spool"
        self.timeout = timeout
        self.results: dict[str, str | None] = {}  # example id -> problem (None: it passed)
        self._groups: list[int] = []
        bin_dir = root / "bin"
        for directory in (self.home, self.cwd, self.spool.parent, bin_dir):
            directory.mkdir(parents=True)
        copy = self.home / PROJECT_NAME
        skipped = ["node_modules"] if lockfile else ["node_modules", "package-lock.json"]
        shutil.copytree(project, copy, symlinks=True, ignore=shutil.ignore_patterns(*skipped))
        if link_node_modules:
            private_node_modules(copy, project / "node_modules")
        if spoolrender is not None:
            # Only the command: the venv's bin/ on PATH would hand a block its python and
            # pip, and a `pip install` in an example would change this checkout's venv.
            (bin_dir / "spoolrender").symlink_to(spoolrender)
        if wheel is not None:
            shutil.copy2(wheel, self.cwd / wheel.name)
        self.env = self._environment(bin_dir)

    def _environment(self, bin_dir: Path) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(_DROPPED_VARIABLES)}
        venv_bin = str(Path(sys.executable).parent)
        path = [p for p in os.environ.get("PATH", os.defpath).split(os.pathsep) if p and p != venv_bin]
        # ~/.local/bin, where pipx and `pip install --user` put commands (Debian's
        # ~/.profile adds it when it exists): an example that installs spoolrender runs it.
        env["PATH"] = os.pathsep.join([str(bin_dir), str(self.home / ".local/bin"), *path])
        env["HOME"] = str(self.home)
        # Warm download caches of the real user: what is installed is the same, only faster.
        real_home = Path.home()
        if (real_home / ".npm").is_dir():
            env["npm_config_cache"] = str(real_home / ".npm")
            # Packages a lockfile pins are taken from that cache without asking the
            # registry whether they changed (they cannot), and no audit or funding calls.
            env.update(npm_config_prefer_offline="true", npm_config_audit="false", npm_config_fund="false")
        if (real_home / ".cache/pip").is_dir():
            env["PIP_CACHE_DIR"] = str(real_home / ".cache/pip")
        # apt-get as written (root: idempotent when the package is there), but waiting for
        # the dpkg lock another apt-get on this shared host may hold, instead of failing.
        apt_config = self.root / "apt.conf"
        apt_config.write_text('DPkg::Lock::Timeout "600";\n', encoding="utf-8")
        env["APT_CONFIG"] = str(apt_config)
        return env

    def run_through(self, chain: Sequence[Example], example: Example) -> str | None:
        """Run the examples of ``chain`` up to ``example`` that have not run yet, in order;
        ``example``'s problem, or that of the earlier example that stopped the chain."""
        for earlier in chain[: chain.index(example) + 1]:
            if earlier.id not in self.results:
                self.results[earlier.id] = self._run(earlier)
            problem = self.results[earlier.id]
            if problem is not None and earlier is not example:
                return f"{example.location}: not run, an earlier example of this page failed: {problem}"
        return self.results[example.id]

    def _run(self, example: Example) -> str | None:
        text = example.text.replace(SPOOL_PLACEHOLDER, str(self.spool))
        if example.kind is Kind.PYTHON:
            argv = [sys.executable, "-c", text]
        else:
            argv = ["bash", "-euo", "pipefail", "-c", text, "docs-example"]
        log = self.root / f"{Path(example.page).name}-{example.line}.log"
        with open(log, "wb") as out:  # a file, not a pipe: a background process keeps it open
            proc = subprocess.Popen(
                argv, cwd=self.cwd, env=self.env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group, stopped as a whole
            )  # fmt: skip
        self._groups.append(proc.pid)
        try:
            status = proc.wait(timeout=self.timeout)
        except subprocess.TimeoutExpired:
            stop_group(proc.pid)
            proc.wait()
            return (
                f"{example.location}: still running after {self.timeout:g} s (a foreground `spoolrender run` "
                f"never ends: write `run --drain`, or start it with `&`; or mark the block not-run){_tail(log)}"
            )
        if status != 0:
            return f"{example.location}: exit status {status}{_tail(log)}"
        return None

    def close(self) -> None:
        """Stop what the examples left running (a runner started with ``&``). The directory
        stays for pytest's temp-dir retention: removing an npm install's node_modules
        here took 45 s on a loaded host."""
        for group in self._groups:
            stop_group(group)


def _tail(log: Path) -> str:
    lines = log.read_text(encoding="utf-8", errors="replace").splitlines()[-OUTPUT_TAIL_LINES:]
    return "; output:\n" + "\n".join(lines) if lines else "; no output"


def _group_alive(group: int) -> bool:
    # psutil, not kill(-group, 0): the group's orphans are reaped by PID 1, which some
    # containers' PID 1 never does, and a zombie still counts as a member.
    for proc in psutil.process_iter(["status"]):
        try:
            if os.getpgid(proc.pid) == group and proc.info["status"] != psutil.STATUS_ZOMBIE:
                return True
        except (OSError, psutil.Error):  # gone meanwhile
            continue
    return False


def _wait_gone(group: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not _group_alive(group):
            return True
        time.sleep(0.1)
    return False


def stop_group(group: int) -> None:
    """SIGTERM a process group, again (a runner's second SIGTERM skips its grace time),
    then SIGKILL what is left: a runner cancels its renders' own process groups itself."""
    for sig, wait in ((signal.SIGTERM, 1.0), (signal.SIGTERM, STOP_WAIT_S), (signal.SIGKILL, STOP_WAIT_S)):
        if not _group_alive(group):
            return
        try:
            os.killpg(group, sig)
        except ProcessLookupError:
            return
        if _wait_gone(group, wait):
            return
