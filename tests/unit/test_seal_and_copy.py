"""What a run renders from (spoolrender.intake.seal, spoolrender.intake.owncopy), on job directories in a
temp dir: the private copy (complete, read-only, no more readable than the submitted file),
an old job directory converted to one, the seal of the first decided run, and which changes
of the submitted file are an upload going on (the only ones that discard a run)."""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

import pytest

from spoolrender import defaults
from spoolrender.intake.owncopy import (
    continued_append,
    ensure_copy,
    holds_job,
    is_private_copy,
    others_may_write,
    prepare_private_file,
    submitted_owner,
    write_copy,
)
from spoolrender.intake.seal import (
    SEAL_KEY,
    UPLOAD_IN_PROGRESS,
    JobFileState,
    refused_change,
    sealed_hash,
    upload_discards,
)
from spoolrender.spool.records import FAILED, PUBLISHING, REQUEUE, RETRY, RunRecord
from spoolrender.spool.spooldir import DirHandle

JOB = b"composition: Intro\nprops: {title: Week 48}\n"


def record(run: int, outcome: str, sha: str | None = None, kind: str | None = None) -> RunRecord:
    return RunRecord(run=run, outcome=outcome, host="h", pid=1, token="t", ended=time.time(),
                     details={} if sha is None else {SEAL_KEY: sha},
                     error=None if kind is None else {"kind": kind, "message": "m", "transient": True})  # fmt: skip


@pytest.fixture
def job_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "running" / "intro.0123456789ab.0123456789ab"
    directory.mkdir(parents=True, mode=0o755)
    return directory


def submitted(job_dir: Path, data: bytes = JOB, mode: int = 0o644) -> Path:
    path = job_dir / defaults.SUBMITTED_FILENAME
    path.write_bytes(data)
    os.chmod(path, mode)
    return path


def test_only_bytes_that_continue_the_copied_ones_are_an_upload_going_on() -> None:
    copied = JobFileState.of(JOB)
    assert copied.continued_by(JOB + b"output: intro.mp4\n")
    assert not copied.continued_by(JOB)  # unchanged
    assert not copied.continued_by(JOB[:-1])  # shorter
    assert not copied.continued_by(b"X" + JOB[1:] + b"more")  # rewritten, then longer
    assert copied.short() == f"{len(JOB)} bytes, sha256 {copied.sha256[:12]}"


def test_the_seal_is_the_first_decided_runs_hash_and_a_requeue_seals_nothing() -> None:
    assert sealed_hash([]) is None
    assert sealed_hash([record(1, REQUEUE, "a" * 64)]) is None
    runs = [record(1, REQUEUE, "a" * 64), record(2, RETRY, "b" * 64), record(3, FAILED, "c" * 64)]
    assert sealed_hash(runs) == "b" * 64
    assert sealed_hash([record(1, PUBLISHING)]) is None  # a record of before the seal
    assert "sealed sha256 bbbbbbbbbbbb" in refused_change("b" * 64, "changed")


def test_only_upload_discards_count_against_the_cap() -> None:
    runs = [record(1, REQUEUE, kind=UPLOAD_IN_PROGRESS), record(2, REQUEUE, kind="shutdown"),
            record(3, RETRY, kind=UPLOAD_IN_PROGRESS), record(4, REQUEUE, kind=UPLOAD_IN_PROGRESS)]  # fmt: skip
    assert upload_discards(runs) == 2


@pytest.mark.parametrize(("submitted_mode", "copy"), [(0o644, 0o444), (0o600, 0o400), (0o640, 0o440), (0o666, 0o444)])
def test_the_copy_is_read_only_and_no_more_readable_than_the_submitted_file(
    job_dir: Path, submitted_mode: int, copy: int
) -> None:
    old = os.umask(0o077)  # the umask must not decide the copy's mode
    try:
        with DirHandle.open(job_dir) as job:
            write_copy(job, JOB, submitted_mode)
    finally:
        os.umask(old)
    st = os.lstat(job_dir / defaults.JOB_FILENAME)
    assert stat.S_IMODE(st.st_mode) == copy
    assert (job_dir / defaults.JOB_FILENAME).read_bytes() == JOB
    assert is_private_copy(st)
    assert os.listdir(job_dir) == [defaults.JOB_FILENAME]  # no temporary left
    assert holds_job(job_dir)


def test_an_old_job_directory_gets_a_copy_and_keeps_the_submitters_file_as_evidence(job_dir: Path) -> None:
    # A job directory of an older version: job.yaml is the submitter's own file.
    (job_dir / defaults.JOB_FILENAME).write_bytes(JOB)
    os.chmod(job_dir / defaults.JOB_FILENAME, 0o664)
    (job_dir / f"{defaults.JOB_FILENAME}.half").write_bytes(b"")  # not one of ours: left alone
    (job_dir / ".job.yaml.deadbeef").write_bytes(JOB[:5])  # a killed claim's half copy
    assert ensure_copy(job_dir, 1 << 20) is None
    assert (job_dir / defaults.SUBMITTED_FILENAME).read_bytes() == JOB
    assert is_private_copy(os.lstat(job_dir / defaults.JOB_FILENAME))
    assert not (job_dir / ".job.yaml.deadbeef").exists()
    assert (job_dir / f"{defaults.JOB_FILENAME}.half").exists()
    copy_inode = os.lstat(job_dir / defaults.JOB_FILENAME).st_ino
    assert ensure_copy(job_dir, 1 << 20) is None  # a copy already: nothing to do
    assert os.lstat(job_dir / defaults.JOB_FILENAME).st_ino == copy_inode


def test_a_submitted_file_that_cannot_be_a_job_is_refused_with_the_reason(job_dir: Path) -> None:
    submitted(job_dir, b"x" * 100)
    why = ensure_copy(job_dir, 10)
    assert why is not None and "10" in why
    assert not (job_dir / defaults.JOB_FILENAME).exists()


def test_an_append_is_an_upload_going_on_and_a_rewrite_or_touch_is_not(job_dir: Path) -> None:
    path = submitted(job_dir)
    copied = JobFileState.of(JOB)
    assert continued_append(job_dir, copied, 1 << 20) is None
    os.utime(path, (1, 1))
    assert continued_append(job_dir, copied, 1 << 20) is None  # a touch
    path.write_bytes(JOB.replace(b"48", b"49") + b"output: x.mp4\n")
    assert continued_append(job_dir, copied, 1 << 20) is None  # a rewrite, longer: no upload of these bytes
    path.write_bytes(JOB + b"output: intro.mp4\n")
    why = continued_append(job_dir, copied, 1 << 20)
    assert why == f"grew from {len(JOB)} to {len(JOB) + 18} bytes after it was claimed"
    path.unlink()
    assert continued_append(job_dir, copied, 1 << 20) is None  # gone: no upload of this job


def test_a_local_writer_holding_the_submitted_file_open_is_an_upload_going_on(job_dir: Path) -> None:
    """The lease is probed on the descriptor the bytes are read from (one open for both)."""
    path = submitted(job_dir)
    copied = JobFileState.of(JOB)
    with open(path, "ab"):  # an upload still writing, not a byte appended yet
        assert continued_append(job_dir, copied, 1 << 20) == "is still open for writing by a local process"
    assert continued_append(job_dir, copied, 1 << 20) is None  # closed, the copied bytes: done
    path.unlink()
    os.mkfifo(path)  # no job file: opened without waiting for a writer, no upload of this job
    assert continued_append(job_dir, copied, 1 << 20) is None


def test_a_file_others_may_write_or_that_changed_owner_may_hold_someone_elses_bytes(job_dir: Path) -> None:
    path = submitted(job_dir, mode=0o644)
    at_claim = submitted_owner(job_dir)
    assert at_claim == (os.getuid(), 0o644)
    assert others_may_write(job_dir, at_claim) is None
    os.chmod(path, 0o664)
    assert others_may_write(job_dir, at_claim) == "is writable by its group or others (mode 0664)"
    os.chmod(path, 0o644)
    assert others_may_write(job_dir, (at_claim[0] + 1, 0o644)) == (
        f"changed owner since the claim (uid {at_claim[0] + 1} to {at_claim[0]})"
    )
    assert others_may_write(job_dir, None) == "cannot be checked against the claim"


def test_a_private_file_is_narrowed_whatever_the_umask_and_never_followed(job_dir: Path, tmp_path: Path) -> None:
    os.chmod(job_dir, 0o700)  # a private job's directory
    log = job_dir / "run-0001.log"
    log.write_bytes(b"")
    os.chmod(log, 0o666)
    prepare_private_file(log, job_dir)
    assert stat.S_IMODE(os.stat(log).st_mode) == 0o600
    target = tmp_path / "elsewhere"
    target.write_bytes(b"")
    os.symlink(target, job_dir / "hooks.log")
    with pytest.raises(OSError):
        prepare_private_file(job_dir / "hooks.log", job_dir)
