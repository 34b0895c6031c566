"""The `spoolrender` command as users type it: init, submit, status, retry."""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path

from conftest import command_job, drop, entries, spoolrender_cmd

from spoolrender.layout import SpoolLayout, init_spool


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
    init_spool(root)  # idempotent: keeps the operator's config
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
    from spoolrender.config import load_config
    from spoolrender.control import submit

    old = os.umask(0o077)
    try:
        path = submit(load_config(spool.root, environ={}), b"renderer: command\ncommand: props\n", "private.yaml")
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
