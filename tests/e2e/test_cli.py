"""The `spoolrender` command as users type it: init, submit, status, retry."""

from __future__ import annotations

import json
import os
import platform
import signal
import stat
import subprocess
import time
from pathlib import Path

from support.processes import spoolrender_cmd
from support.spool_jobs import command_job, drop, entries, write_spool_config
from support.waiting import wait_for

from spoolrender.config.settings import config_template
from spoolrender.config.spool_config import load_config
from spoolrender.spool.layout import SpoolLayout, init_spool


def cli(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        spoolrender_cmd(*args), input=None if stdin is None else stdin.decode(), capture_output=True,
        text=True, check=False, timeout=120,
    )  # fmt: skip


def test_init_creates_layout_with_group_drop_permissions(tmp_path: Path) -> None:
    result = cli("init", str(tmp_path / "sp"))
    assert result.returncode == 0, result.stderr
    root = tmp_path / "sp"
    for d in ("incoming", "running", "retry", "done", "failed", ".spoolrender"):
        assert (root / d).is_dir()
    mode = (root / "incoming").stat().st_mode
    assert mode & stat.S_IWGRP and mode & stat.S_ISGID and mode & stat.S_ISVTX
    assert not (root / "done").stat().st_mode & stat.S_IWGRP
    assert "settle_seconds" in (root / "spoolrender.yaml").read_text()
    (root / "spoolrender.yaml").write_text("max_attempts: 7\n")
    init_spool(root, config_text=config_template())  # idempotent: keeps the operator's config
    assert (root / "spoolrender.yaml").read_text() == "max_attempts: 7\n"


def test_submit_validates_and_writes_atomically(spool: SpoolLayout, tmp_path: Path) -> None:
    job = tmp_path / "ok.yaml"
    job.write_text("renderer: command\ncommand: props\n")
    result = cli("submit", "--spool", str(spool.root), str(job))
    assert result.returncode == 0, result.stderr
    assert entries(spool, "incoming") == ["ok.yaml"]
    again = cli("submit", "--spool", str(spool.root), str(job))
    assert again.returncode == 1 and "already exists" in again.stderr

    bad = tmp_path / "bad.yaml"
    bad.write_text("renderer: command\ncommand: rm-rf\npriority: high\n")
    result = cli("submit", "--spool", str(spool.root), str(bad))
    assert result.returncode == 1
    assert "field 'command'" in result.stderr and "field 'priority'" in result.stderr
    assert entries(spool, "incoming") == ["ok.yaml"]

    result = cli(
        "submit",
        "--spool",
        str(spool.root),
        "-",
        "--name",
        "piped",
        stdin=b"renderer: command\ncommand: props\n",
    )
    assert result.returncode == 0, result.stderr
    assert entries(spool, "incoming") == ["ok.yaml", "piped.yaml"]
    for hostile in ("two\nlines", "\x1b[2Jclear", "bidi\u202e", "x" * 251):
        refused = cli("submit", "--spool", str(spool.root), "-", "--name", hostile, stdin=b"renderer: command\n")
        assert refused.returncode == 1 and "invalid job file name" in refused.stderr, hostile
    assert not [n for n in (spool.incoming).iterdir() if n.name.startswith(".") and n.name != ".gitkeep"]


def test_retry_gives_failed_jobs_fresh_attempts(spool: SpoolLayout) -> None:
    drop(spool, "a.yaml", {**command_job(exit=65), "max_attempts": 1})
    drop(spool, "b.yaml", {**command_job(exit=65), "max_attempts": 1})
    assert subprocess.run(spoolrender_cmd("run", "--drain", "--spool", str(spool.root))).returncode == 3
    assert len(entries(spool, "failed")) == 2
    result = cli("retry", "a", "--spool", str(spool.root))
    assert result.returncode == 0 and "a" in result.stdout
    assert len(entries(spool, "retry")) == 1
    missing = cli("retry", "nope", "--spool", str(spool.root))
    assert missing.returncode == 1 and "no job with id 'nope'" in missing.stderr
    result = cli("retry", "--all-failed", "--spool", str(spool.root))
    assert result.returncode == 0
    assert len(entries(spool, "retry")) == 2 and entries(spool, "failed") == []
    # With attempts reset, the jobs run once more (and fail again: exit 65 is permanent).
    assert subprocess.run(spoolrender_cmd("run", "--drain", "--spool", str(spool.root))).returncode == 3
    failed = entries(spool, "failed")
    assert len(failed) == 2
    runs = json.loads((spool.failed / failed[0] / "failure.json").read_text())["runs"]
    assert [r["outcome"] for r in runs] == ["failed", "reset", "failed"]


def test_run_refuses_a_missing_spool(tmp_path: Path) -> None:
    result = cli("run", "--drain", "--spool", str(tmp_path / "nowhere"))
    assert result.returncode == 1 and "spoolrender init" in result.stderr


def test_bad_config_is_a_clear_error(spool: SpoolLayout) -> None:
    (spool.root / "spoolrender.yaml").write_text("lease_seconds: soon\n")
    result = cli("status", "--spool", str(spool.root))
    assert result.returncode == 1 and "lease_seconds" in result.stderr


def test_submitted_job_is_readable_whatever_the_umask(spool: SpoolLayout) -> None:
    from spoolrender.config.spool_config import load_config
    from spoolrender.ops.submission import submit

    old = os.umask(0o077)
    try:
        path = submit(load_config(spool.root, environ={}), b"renderer: command\ncommand: props\n", "private.yaml")
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644


def test_submit_reads_at_most_the_limit_and_never_blocks_on_a_fifo(spool: SpoolLayout, tmp_path: Path) -> None:
    root = str(spool.root)
    (spool.root / "spoolrender.yaml").write_text("max_job_bytes: 4096\n")
    # An endless stdin (/dev/zero) is cut off one byte past the limit, not read to the end.
    with open("/dev/zero", "rb") as zero:
        endless = subprocess.run(
            spoolrender_cmd("submit", "--spool", root, "-", "--name", "z"), stdin=zero, capture_output=True,
            text=True, timeout=60, check=False,
        )  # fmt: skip
    assert endless.returncode == 1 and "standard input is over the limit of 4096 bytes" in endless.stderr
    # Devices and FIFOs given by name are refused at once; a FIFO nobody writes to would
    # otherwise block the open (or the read) forever.
    fifo = tmp_path / "job.fifo"
    os.mkfifo(fifo)
    for source in ("/dev/zero", str(fifo)):
        refused = cli("submit", "--spool", root, source)
        assert refused.returncode == 1 and "not a regular file" in refused.stderr, source
    big = tmp_path / "big.yaml"
    big.write_bytes(b"renderer: command\ncommand: props\n" + b"#" * 5000 + b"\n")
    too_big = cli("submit", "--spool", root, str(big))
    assert too_big.returncode == 1 and "over the limit of 4096 bytes" in too_big.stderr
    assert entries(spool, "incoming") == []


def test_submit_refuses_an_id_that_is_done_unless_rerun(spool: SpoolLayout, tmp_path: Path) -> None:
    job = tmp_path / "clip.yaml"
    job.write_text("renderer: command\ncommand: props\n")
    assert cli("submit", "--spool", str(spool.root), str(job)).returncode == 0
    assert subprocess.run(spoolrender_cmd("run", "--drain", "--spool", str(spool.root))).returncode == 0
    again = cli("submit", "--spool", str(spool.root), str(job))
    assert again.returncode == 1 and "'clip' was already rendered (done/clip." in again.stderr
    assert "rerun: true" in again.stderr
    job.write_text("renderer: command\ncommand: props\nrerun: true\n")
    assert cli("submit", "--spool", str(spool.root), str(job)).returncode == 0


def remotion_project(directory: Path) -> Path:
    directory.mkdir(parents=True)
    (directory / "package.json").write_text(json.dumps({"dependencies": {"remotion": "4.0.541"}}))
    return directory


def test_init_records_the_remotion_project_or_says_there_is_none(tmp_path: Path) -> None:
    lone = cli("init", str(tmp_path / "srv" / "spool"))
    assert lone.returncode == 0, lone.stderr
    assert "no Remotion project set" in lone.stderr and "--remotion-project DIR" in lone.stderr
    assert "\nremotion_project:" not in (tmp_path / "srv" / "spool" / "spoolrender.yaml").read_text()

    bad = cli("init", str(tmp_path / "srv" / "spool"), "--remotion-project", str(tmp_path / "missing"))
    assert bad.returncode == 1 and "is not a directory" in bad.stderr

    project = remotion_project(tmp_path / "my video")
    given = cli("init", str(tmp_path / "srv" / "spool"), "--remotion-project", str(project))
    assert given.returncode == 0, given.stderr
    assert "npm ci" in given.stderr  # its node_modules are not installed yet
    config = load_config(tmp_path / "srv" / "spool", environ={})
    assert config.remotion_project == project
    assert "settle_seconds" in (tmp_path / "srv" / "spool" / "spoolrender.yaml").read_text()  # comments kept
    kept = cli("init", str(tmp_path / "srv" / "spool"))
    assert kept.returncode == 0 and "(remotion_project, kept)" in kept.stdout

    # Beside the spool, as in this repository: found and recorded explicitly.
    found = remotion_project(tmp_path / "site" / "remotion")
    detected = cli("init", str(tmp_path / "site" / "spool"))
    assert detected.returncode == 0 and f"Remotion project: {found}" in detected.stdout
    assert load_config(tmp_path / "site" / "spool", environ={}).remotion_project.resolve() == found
    assert 'remotion_project: "../remotion"' in (tmp_path / "site" / "spool" / "spoolrender.yaml").read_text()


def test_retry_makes_a_waiting_job_due_now(spool: SpoolLayout) -> None:
    write_spool_config(spool, {"backoff_base_seconds": 900, "backoff_cap_seconds": 900})
    drop(spool, "flaky.yaml", {**command_job(fail_until_attempt=2), "max_attempts": 3})
    assert subprocess.run(spoolrender_cmd("run", "--drain", "--spool", str(spool.root))).returncode == 0
    (waiting,) = entries(spool, "retry")
    assert int(waiting.split("-", 1)[0]) / 1000 > time.time() + 300
    twin = cli(
        "submit",
        "--spool",
        str(spool.root),
        "-",
        "--name",
        "twin",
        stdin=b"id: flaky\nrenderer: command\ncommand: props\n",
    )
    assert twin.returncode == 1 and f"'flaky' is already queued or running (retry/{waiting})" in twin.stderr
    result = cli("retry", "flaky", "--spool", str(spool.root))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"retry/{waiting}: due now (was due later), attempts kept"
    (due,) = entries(spool, "retry")
    assert int(due.split("-", 1)[0]) / 1000 <= time.time()
    assert subprocess.run(spoolrender_cmd("run", "--drain", "--spool", str(spool.root))).returncode == 0
    assert len(entries(spool, "done")) == 1
    running = cli("retry", "flaky", "--spool", str(spool.root))
    assert running.returncode == 1 and "'flaky' is done: nothing to retry" in running.stderr


def test_ctrl_c_in_a_waiting_submit_exits_130_without_a_traceback(spool: SpoolLayout) -> None:
    # A person at a terminal: SIGINT at its default disposition, whatever this test run
    # inherited (a suite started with `nohup` or as a background job of a non-interactive
    # shell ignores SIGINT, and Python keeps an ignored SIGINT ignored in its children).
    proc = subprocess.Popen(
        spoolrender_cmd("submit", "--spool", str(spool.root), "-", "--name", "never"), stdin=subprocess.PIPE,
        stderr=subprocess.PIPE, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    assert proc.stdin is not None and proc.stderr is not None
    proc.stdin.write(b"renderer: command\n")  # and then nothing: the producer hangs
    proc.stdin.flush()
    wait_for(lambda: _reads_stdin(proc.pid), timeout=60)
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=30) == 130
    proc.stdin.close()
    with proc.stderr:
        assert b"Traceback" not in proc.stderr.read()
    assert entries(spool, "incoming") == []


# read(2)'s number in /proc/PID/syscall, by machine.
_READ_SYSCALL = {"x86_64": 0, "aarch64": 63}


def _reads_stdin(pid: int) -> bool:
    """True once the process is blocked in read(0, ...) on its stdin pipe (its Python
    start-up is over). Not any pipe: a pipe read during start-up (ctypes' find_library ran
    `ldconfig -p` at import) let the test interrupt an import, outside the CLI's handler."""
    try:
        wchan = Path(f"/proc/{pid}/wchan").read_text()
        call = Path(f"/proc/{pid}/syscall").read_text().split()
    except OSError:
        return False
    blocked_in_read = len(call) > 1 and call[0] == str(_READ_SYSCALL[platform.machine()])
    return "pipe" in wchan and blocked_in_read and int(call[1], 16) == 0  # fd 0


def test_every_command_of_the_parser_has_exactly_one_handler() -> None:
    import argparse

    from spoolrender.cli.commands import COMMANDS, OPS_COMMANDS
    from spoolrender.cli.parser import build_parser

    (subparsers,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    assert set(subparsers.choices) == set(COMMANDS) | set(OPS_COMMANDS)
    assert not set(COMMANDS) & set(OPS_COMMANDS)
