"""Issue 20, class A: every run renders from the runner's private copy of its job file.

The submitter owns the inode of the file they dropped, also after the claim moved it into
running/. Each test here does to that inode (found by its inode number, wherever the
claim put it) what the review's reproducers did, with a real runner and a real render
command that hashes the ``{job_file}`` it reads (tests/programs/job_hash.py): before the
private copy the render read the submitter's inode, so these tests failed on fe27397.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import stat
import subprocess
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import pytest
import yaml
from support.chunk_jobs import FRAMES_CONFIG, frames_job, video
from support.processes import MEMBER_UID, as_member, spoolrender_cmd, stopped
from support.spool_jobs import command_job, drop, entries, write_spool_config
from support.uploads_harness import digest, job_file, job_hash_command
from support.waiting import wait_for

from spoolrender.cli.exit_codes import EXIT_JOBS_FAILED
from spoolrender.defaults import MAX_UPLOAD_DISCARDS
from spoolrender.intake.seal import SUBMITTED_NOTE_KEY
from spoolrender.spool.layout import RETRY_NAME, SpoolLayout, retry_name

Start = Callable[..., subprocess.Popen[bytes]]
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="a second uid needs root (setpriv)")


def _config(**extra: object) -> dict[str, object]:
    return {"slots": 1, "commands": {"jobhash": job_hash_command()}, **extra}


def _drop_tracked(spool: SpoolLayout, name: str, data: bytes) -> int:
    """Drop ``data`` as ``incoming/<name>``; returns the inode the submitter owns."""
    tmp = spool.incoming / f".{name}.part"
    tmp.write_bytes(data)
    inode = os.stat(tmp).st_ino
    os.rename(tmp, spool.incoming / name)
    return inode


def _submitters_file(spool: SpoolLayout, inode: int) -> Path | None:
    """Where in running/ the submitter's inode is now (job.yaml before the copy existed)."""
    for path in spool.running.glob("*/*.yaml"):
        try:
            if os.lstat(path).st_ino == inode:
                return path
        except FileNotFoundError:
            continue
    return None


def _claimed(spool: SpoolLayout, inode: int) -> Path:
    """The submitter's file, once the run is under way (its job.yaml exists)."""
    found: list[Path] = []

    def claimed() -> bool:
        path = _submitters_file(spool, inode)
        if path is None or not (path.parent / "job.yaml").exists():
            return False
        found.append(path)
        return True

    wait_for(claimed, timeout=60)
    return found[-1]


def _second_claim(record: Path) -> bool:
    """``running/<id>.<uid>.<token>/run-0001.json`` of a later claim than the first (the
    first claim's token is the job's uid)."""
    *_, uid, token = record.parent.name.split(".")
    return token != uid


def _done_record(spool: SpoolLayout, prefix: str) -> tuple[Path, dict[str, object]]:
    (entry,) = [e for e in entries(spool, "done") if e.startswith(prefix)]
    return spool.done / entry, json.loads((spool.done / entry / "result.json").read_text())


def _decided(spool: SpoolLayout, pattern: str) -> bool:
    return any(spool.root.glob(pattern))


def _hold_props(tmp_path: Path, **extra: object) -> str:
    props = {"wait_for": str(tmp_path / "go"), "read_marker": str(tmp_path / "read"),
             "hold_until": str(tmp_path / "release"), **extra}  # fmt: skip
    return json.dumps(props)


def test_aba_rename_during_the_render_changes_nothing(spool: SpoolLayout, start_runner: Start, tmp_path: Path) -> None:
    """Item 1: the submitter's file renamed aside, another version put in its place for the
    render to read, the first renamed back before the decision: the render read the copy."""
    write_spool_config(spool, _config())
    start_runner(log=tmp_path / "runner.log")
    original = job_file("aba", 2_000, props=_hold_props(tmp_path))
    inode = _drop_tracked(spool, "aba.yaml", original)
    path = _claimed(spool, inode)
    job_dir = path.parent
    dir_mode, copy = stat.S_IMODE(os.stat(job_dir).st_mode), os.lstat(job_dir / "job.yaml")
    aside = job_dir / ".aside"
    os.rename(path, aside)
    path.write_bytes(original.replace(b"padding", b"EVIL!!!"))
    (tmp_path / "go").touch()
    wait_for(lambda: (tmp_path / "read").exists(), timeout=60)
    os.rename(aside, path)
    (tmp_path / "release").touch()
    wait_for(lambda: len(entries(spool, "done")) == 1, timeout=60)
    done_dir, record = _done_record(spool, "aba.")
    assert (spool.root / "output" / "uploads" / "aba.txt").read_text() == digest(original)
    runs = record["runs"]
    assert isinstance(runs, list) and [r["outcome"] for r in runs] == ["publishing"]
    assert runs[0]["details"]["job_sha256"] == hashlib.sha256(original).hexdigest()
    assert (done_dir / "job.yaml").read_bytes() == original  # show/serve's "as submitted"
    # Only the runner may rename in the job directory; the copy is its own, read-only.
    assert dir_mode & 0o022 == 0
    assert copy.st_uid == os.geteuid() and stat.S_IMODE(copy.st_mode) == 0o444 and copy.st_ino != inode


def test_in_place_rewrite_restored_with_utime_during_a_sealed_retry(
    spool: SpoolLayout, start_runner: Start, tmp_path: Path
) -> None:
    """Item 2: during run 2 of a sealed job the submitter rewrites their file in place, the
    render reads it, and the old bytes and mtime are put back: published from the copy."""
    write_spool_config(spool, _config())
    start_runner(log=tmp_path / "runner.log")
    original = job_file("sealed", 2_000, props=_hold_props(tmp_path, fail_until_attempt=2))
    inode = _drop_tracked(spool, "sealed.yaml", original)
    # Run 2 under way: its directory (a new claim token, unlike run 1's, whose token is the
    # job's uid) holds run 1's record. Run 1's own directory holds it too, for a moment,
    # before it moves to retry/: a path found there would vanish.
    wait_for(lambda: any(_second_claim(d) for d in spool.running.glob("*/run-0001.json")), timeout=60)
    path = _claimed(spool, inode)
    before = os.stat(path)
    with open(path, "r+b") as fh:  # the same inode, other bytes
        fh.write(original.replace(b"padding", b"EVIL!!!"))
    (tmp_path / "go").touch()
    wait_for(lambda: (tmp_path / "read").exists(), timeout=60)
    with open(path, "r+b") as fh:
        fh.write(original)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    (tmp_path / "release").touch()
    wait_for(lambda: len(entries(spool, "done")) == 1, timeout=60)
    _, record = _done_record(spool, "sealed.")
    assert (spool.root / "output" / "uploads" / "sealed.txt").read_text() == digest(original)
    runs = record["runs"]
    assert isinstance(runs, list) and [r["outcome"] for r in runs] == ["retry", "publishing"]
    assert {r["details"]["job_sha256"] for r in runs} == {hashlib.sha256(original).hexdigest()}


def test_touching_ones_own_job_file_during_the_render_discards_nothing(
    spool: SpoolLayout, start_runner: Start, tmp_path: Path
) -> None:
    """Item 4: a touch is no upload; a job of max_attempts 1 ends after its one run."""
    write_spool_config(spool, _config())
    start_runner(log=tmp_path / "runner.log")
    data = job_file("touched", 1_000, props=json.dumps({"wait_for": str(tmp_path / "go")}))
    inode = _drop_tracked(spool, "touched.yaml", data.replace(b"props:", b"max_attempts: 1\nprops:"))
    path = _claimed(spool, inode)
    os.utime(path)
    (tmp_path / "go").touch()
    wait_for(lambda: len(entries(spool, "done")) == 1, timeout=60)
    _, record = _done_record(spool, "touched.")
    runs = record["runs"]
    assert isinstance(runs, list) and [r["outcome"] for r in runs] == ["publishing"]


def test_file_replaced_between_scan_and_claim_goes_back_and_is_its_own_job(
    spool: SpoolLayout, start_runner: Start, tmp_path: Path
) -> None:
    """Item 5: incoming/x.yaml is replaced by rename after the scan read it (id alpha) and
    before the claim: beta is never rendered under alpha's id; a later alpha is published once."""
    write_spool_config(spool, {**_config(), "settle_seconds": 0})
    runner = start_runner(env={"SPOOLRENDER_PAUSE_AT": "claim-before-rename"}, log=tmp_path / "runner.log")
    alpha = b"id: alpha\nrenderer: command\ncommand: jobhash\noutput: alpha.txt\nprops: {}\n"
    beta = b"id: beta\nrenderer: command\ncommand: jobhash\noutput: beta.txt\nprops: {}\n"
    _drop_tracked(spool, "x.yaml", alpha)
    wait_for(lambda: stopped(runner), timeout=60)  # the scan decided on alpha
    _drop_tracked(spool, "x.yaml", beta)  # by rename, over alpha
    runner.send_signal(signal.SIGCONT)
    wait_for(lambda: len(entries(spool, "done")) == 1 and entries(spool, "incoming") == [], timeout=60)
    _drop_tracked(spool, "alpha.yaml", alpha)
    wait_for(lambda: len(entries(spool, "done")) == 2 and entries(spool, "incoming") == [], timeout=60)
    assert entries(spool, "failed") == []
    for entry in entries(spool, "done"):
        job = yaml.safe_load((spool.done / entry / "job.yaml").read_text())
        assert entry.startswith(f"{job['id']}."), (entry, job)  # every entry holds its own job
        assert os.readlink(spool.ids / job["id"]) == entry.split(".", 1)[1]
    assert sorted(e.split(".")[0] for e in entries(spool, "done")) == ["alpha", "beta"]
    assert (spool.root / "output" / "beta.txt").read_text() == digest(beta)
    assert (spool.root / "output" / "alpha.txt").read_text() == digest(alpha)
    assert "went back to incoming/" in (tmp_path / "runner.log").read_text()


def test_queue_dir_swapped_for_a_symlink_before_the_claim_moves_nothing_from_elsewhere(
    spool: SpoolLayout, start_runner: Start, tmp_path: Path
) -> None:
    """Item 6, the claim's side: the claim renames through the queue directory it holds
    open (never through a symlink), not by the listed path."""
    write_spool_config(spool, {**_config(), "settle_seconds": 0})
    (spool.incoming / "q1").mkdir(mode=0o3775)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    victim = elsewhere / "a.yaml"
    victim.write_bytes(b"not a job of the spool\n")
    runner = start_runner(env={"SPOOLRENDER_PAUSE_AT": "claim-before-rename"}, log=tmp_path / "runner.log")
    queued = b"renderer: command\ncommand: jobhash\noutput: q.txt\nprops: {}\n"
    (spool.incoming / "q1" / ".a.part").write_bytes(queued)
    os.rename(spool.incoming / "q1" / ".a.part", spool.incoming / "q1" / "a.yaml")
    wait_for(lambda: stopped(runner), timeout=60)
    os.rename(spool.incoming / "q1", tmp_path / "q1-moved")
    os.symlink(elsewhere, spool.incoming / "q1")
    runner.send_signal(signal.SIGCONT)
    # The claim renamed from the directory it opened before the swap: the queued job, and
    # never the same-named file the link points at.
    wait_for(lambda: any(e.startswith("a.") for e in entries(spool, "done")), timeout=60)
    assert victim.read_bytes() == b"not a job of the spool\n"
    assert not (tmp_path / "q1-moved" / "a.yaml").exists()
    (entry,) = [e for e in entries(spool, "done") if e.startswith("a.")]
    assert (spool.done / entry / "job.yaml").read_bytes() == queued


def test_chunks_render_the_parents_copy_whatever_its_file_does(
    spool: SpoolLayout, start_runner: Start, tmp_path: Path
) -> None:
    """Item 3: the props swapped after the split decision (when the chunks are queued) and
    restored before the join: every chunk renders the parent's copy, and the join only
    joins chunks rendered from it."""
    write_spool_config(spool, {"slots": 1, **FRAMES_CONFIG})
    runner = start_runner(env={"SPOOLRENDER_PAUSE_AT": "after-split-move,after-wake"}, log=tmp_path / "runner.log")
    original = yaml.safe_dump(frames_job(3, frames=30)).encode()
    inode = _drop_tracked(spool, "split.yaml", original)
    wait_for(lambda: stopped(runner), timeout=60)  # in split/, its chunks not yet queued
    (path,) = [p for p in spool.split.glob("*/*.yaml") if os.lstat(p).st_ino == inode]
    before = os.stat(path)
    marker = tmp_path / "evil-marker"
    with open(path, "r+b") as fh:  # other props: chunks rendered from them leave a marker
        fh.truncate(0)
        fh.write(yaml.safe_dump(frames_job(3, frames=30, marker=str(marker))).encode())
    runner.send_signal(signal.SIGCONT)
    wait_for(lambda: stopped(runner), timeout=120)  # the last chunk woke the job: the join is next
    found = list(spool.split.glob("*/*.yaml")) + list(spool.retry.glob("*/*.yaml"))
    (restored,) = [p for p in found if os.lstat(p).st_ino == inode]
    with open(restored, "r+b") as fh:
        fh.truncate(0)
        fh.write(original)
    os.utime(restored, ns=(before.st_atime_ns, before.st_mtime_ns))
    runner.send_signal(signal.SIGCONT)
    wait_for(lambda: len(entries(spool, "done")) == 1, timeout=120)
    _, record = _done_record(spool, "split.")
    assert not marker.exists(), marker.read_text()  # no chunk rendered the swapped props
    assert (spool.root / "output" / "split.mp4").read_text() == video(30)
    runs = record["runs"]
    assert isinstance(runs, list) and [r["outcome"] for r in runs][-1] == "publishing"


def _legacy_retry_entry(spool: SpoolLayout, start_runner: Start, tmp_path: Path, original: bytes) -> Path:
    """A job waiting in retry/ after a sealed run, as fe27397 left it: its job.yaml is the
    submitter's own file (here: this version's entry, turned back into that shape)."""
    write_spool_config(spool, _config(backoff_base_seconds=600, backoff_cap_seconds=600))
    _drop_tracked(spool, "legacy.yaml", original)
    proc = start_runner("--drain", log=tmp_path / "first.log")
    assert proc.wait(timeout=120) == 0
    (entry,) = entries(spool, "retry")
    job_dir = spool.retry / entry
    os.unlink(job_dir / "job.yaml")
    os.rename(job_dir / "submitted.yaml", job_dir / "job.yaml")
    os.chmod(job_dir / "job.yaml", 0o644)
    m = RETRY_NAME.fullmatch(entry)
    assert m is not None
    due_now = spool.retry / retry_name("legacy", m.group("uid"), time.time(), 0)
    os.rename(job_dir, due_now)
    write_spool_config(spool, _config())
    return due_now / "job.yaml"


def test_legacy_retry_entry_is_converted_at_its_claim(spool: SpoolLayout, start_runner: Start, tmp_path: Path) -> None:
    original = job_file("legacy", 1_000, props=json.dumps({"fail_until_attempt": 2}))
    legacy = _legacy_retry_entry(spool, start_runner, tmp_path, original)
    inode = os.stat(legacy).st_ino
    assert start_runner("--drain", log=tmp_path / "second.log").wait(timeout=120) == 0
    done_dir, _ = _done_record(spool, "legacy.")
    assert os.stat(done_dir / "submitted.yaml").st_ino == inode  # kept as evidence
    copy = os.lstat(done_dir / "job.yaml")
    assert stat.S_IMODE(copy.st_mode) == 0o444 and copy.st_ino != inode
    assert (spool.root / "output" / "uploads" / "legacy.txt").read_text() == digest(original)


def test_legacy_retry_entry_edited_while_it_waited_is_refused(
    spool: SpoolLayout, start_runner: Start, tmp_path: Path
) -> None:
    original = job_file("legacy", 1_000, props=json.dumps({"fail_until_attempt": 2}))
    legacy = _legacy_retry_entry(spool, start_runner, tmp_path, original)
    legacy.write_bytes(original.replace(b"padding", b"EDITED!"))
    assert start_runner("--drain", log=tmp_path / "second.log").wait(timeout=120) == EXIT_JOBS_FAILED
    (entry,) = entries(spool, "failed")
    failure = json.loads((spool.failed / entry / "failure.json").read_text())
    assert failure["kind"] == "job-changed" and "cannot be edited" in failure["reason"]
    assert not (spool.root / "output" / "uploads" / "legacy.txt").exists()


def test_discards_for_an_upload_that_goes_on_are_capped(
    spool: SpoolLayout, start_runner: Start, tmp_path: Path
) -> None:
    """A remote writer that keeps appending (seen only as bytes continuing the copy) has
    runs discarded, MAX_UPLOAD_DISCARDS at most: then the job decides from its copy."""
    write_spool_config(spool, _config())
    start_runner(log=tmp_path / "runner.log")
    (tmp_path / "go").touch()
    # consume_hold: each run takes the release for itself; the next run cannot slip through
    # on it before this loop has seen the decision and appended again.
    original = job_file("growing", 1_000, props=_hold_props(tmp_path, consume_hold=True))
    inode = _drop_tracked(spool, "growing.yaml", original)
    read, release = tmp_path / "read", tmp_path / "release"
    for run in range(1, MAX_UPLOAD_DISCARDS + 2):
        wait_for(read.exists, timeout=60)
        read.unlink()
        path = _submitters_file(spool, inode)
        assert path is not None
        with open(path, "ab") as fh:
            fh.write(f"# appended after run {run} read its copy\n".encode())
        release.touch()
        wait_for(partial(_decided, spool, f"*/growing.*/run-{run:04d}.json"), timeout=60)
        release.unlink(missing_ok=True)
    wait_for(lambda: len(entries(spool, "done")) == 1, timeout=60)
    done_dir, record = _done_record(spool, "growing.")
    runs = record["runs"]
    assert isinstance(runs, list)
    assert [r["outcome"] for r in runs] == ["requeue"] * MAX_UPLOAD_DISCARDS + ["publishing"]
    assert {r["error"]["kind"] for r in runs[:-1]} == {"upload-in-progress"}
    assert "rendered from the copy made at the claim" in runs[-1]["details"]["submitted_file"]
    rendered = (done_dir / "job.yaml").read_bytes()
    assert rendered.count(b"# appended after run") == MAX_UPLOAD_DISCARDS
    assert (spool.root / "output" / "uploads" / "growing.txt").read_text() == digest(rendered)


def test_runner_killed_between_dropping_a_discarded_copy_and_its_record(
    spool: SpoolLayout, start_runner: Start, tmp_path: Path
) -> None:
    """Crash point discard-before-decide: the directory holds submitted.yaml, no copy and
    no run record, like a claim killed before its copy: recovery gives the file back to
    incoming/ (tests/reliability/test_crash_points.py), and its next claim copies the
    complete file."""
    write_spool_config(spool, _config())
    killed = start_runner(env={"SPOOLRENDER_CRASH_AT": "discard-before-decide"}, log=tmp_path / "killed.log")
    (tmp_path / "go").touch()
    original = job_file("crashed", 1_000, props=_hold_props(tmp_path))
    inode = _drop_tracked(spool, "crashed.yaml", original)
    wait_for((tmp_path / "read").exists, timeout=60)
    path = _submitters_file(spool, inode)
    assert path is not None
    rest = b"# the rest of the upload\n"
    with open(path, "ab") as fh:
        fh.write(rest)
    (tmp_path / "release").touch()
    assert killed.wait(timeout=60) == -signal.SIGKILL
    start_runner(log=tmp_path / "runner.log")
    wait_for(lambda: len(entries(spool, "done")) == 1, timeout=60)
    done_dir, record = _done_record(spool, "crashed.")
    runs = record["runs"]
    assert isinstance(runs, list)
    assert [(r["outcome"], r["attempt"]) for r in runs] == [("publishing", 1)]
    assert (done_dir / "job.yaml").read_bytes() == original + rest


@needs_root
def test_another_members_append_to_a_group_writable_job_is_never_rendered(
    member_spool: SpoolLayout, start_member_runner: Start
) -> None:
    """Review 2: a job written under umask 002 is writable by every spool-group member.
    Another member's append (``output:`` of their choosing) to the claimed file counted as
    the upload going on: the run was discarded and the re-claim copied their bytes. Only a
    file its owner alone may write (and whose owner is unchanged) can be an upload going
    on; here the run is decided from the copy, with a note."""
    spool = member_spool
    write_spool_config(spool, {"slots": 1, "commands": {"jobhash": job_hash_command()}})
    base = spool.root.parent
    props = json.dumps({"read_marker": str(base / "read"), "hold_until": str(base / "release")})
    path = spool.incoming / "victim.yaml"
    path.write_bytes(f"renderer: command\ncommand: jobhash\nprops: {props}\n".encode())
    os.chown(path, 1, -1)  # the victim (uid 1), group = the spool's (incoming/ is setgid)
    os.chmod(path, 0o664)  # umask 002
    os.utime(path, (1, 1))
    inode = os.stat(path).st_ino
    start_member_runner()
    wait_for((base / "read").exists, timeout=60)
    claimed = _claimed(spool, inode)
    as_member("sh", "-c", f"printf 'output: stolen/chosen-by-member.txt\\n' >> {claimed}")
    (base / "release").touch()
    wait_for(lambda: bool(entries(spool, "done") or entries(spool, "failed")), timeout=90)
    _, result = _done_record(spool, "victim.")
    assert not (spool.root / "output" / "stolen").exists()
    note = str(result["details"][SUBMITTED_NOTE_KEY])  # type: ignore[index]
    assert "is writable by its group or others (mode 0664): not taken as an upload" in note, note


@needs_root
def test_the_private_copy_is_no_more_readable_than_the_submitted_file(
    member_spool: SpoolLayout, start_member_runner: Start
) -> None:
    """Review 2: the copy was 0444 whatever the job's mode, so a member's 0600 job (a
    customer's data, an API key in its props) became readable by every local user in
    running/ and done/. The copy gets 0400 plus only the read bits the file had; the
    runner's own user still reads it (show)."""
    spool = member_spool
    home = spool.root.parent / "member-home"
    home.mkdir()
    os.chown(home, MEMBER_UID, -1)
    secret = "renderer: command\ncommand: props\nprops: {api_key: s3cr3t-of-the-member}\n"
    part = home / "private.yaml"
    as_member("sh", "-c", f"umask 077 && printf '{secret}' > {part} && mv {part} {spool.incoming}/private.yaml")
    os.utime(spool.incoming / "private.yaml", (1, 1))
    drop(spool, "public.yaml", command_job())
    start_member_runner("--drain").wait(timeout=120)
    private, _ = _done_record(spool, "private.")
    public, _ = _done_record(spool, "public.")
    assert stat.S_IMODE(os.stat(private / "job.yaml").st_mode) == 0o400
    assert stat.S_IMODE(os.stat(public / "job.yaml").st_mode) == 0o444
    outsider = subprocess.run(  # uid 1 (daemon): a local user outside the spool's group
        ["setpriv", "--reuid=1", "--regid=1", "--clear-groups", "cat", str(private / "job.yaml")],
        capture_output=True, text=True,
    )  # fmt: skip
    assert outsider.returncode != 0 and "s3cr3t" not in outsider.stdout
    show = spoolrender_cmd("show", "private", "--json", "--spool", str(spool.root))
    shown = subprocess.run(show, capture_output=True, text=True)
    assert shown.returncode == 0 and json.loads(shown.stdout)["state"] == "done", shown


def test_run_logs_are_no_more_readable_than_the_job(spool: SpoolLayout, start_runner: Start) -> None:
    """Run logs were 0644 in 0755 job directories, whatever the job's mode: a command's
    output (props, env) was readable by every local user. A log gets the private copy's
    read bits (plus the runner's write bit): a 0600 job's log is 0600."""
    job = yaml.safe_dump(command_job(content="a customer's props")).encode()
    old = os.umask(0o077)
    try:
        drop(spool, "private.yaml", job)
    finally:
        os.umask(old)
    drop(spool, "public.yaml", job)
    os.chmod(spool.incoming / "public.yaml", 0o644)
    assert start_runner("--drain").wait(timeout=120) == 0
    for prefix, mode in (("private.", 0o600), ("public.", 0o644)):
        entry, _ = _done_record(spool, prefix)
        (log,) = entry.glob("run-*.log")
        assert stat.S_IMODE(os.stat(log).st_mode) == mode, (prefix, oct(os.stat(log).st_mode))
        assert stat.S_IMODE(os.stat(entry / "job.yaml").st_mode) == mode & 0o444


def test_a_private_jobs_failure_is_readable_by_no_other_user(spool: SpoolLayout, start_runner: Start) -> None:
    """Run records, failure.json, result.json and the hooks' delivery state quote what the
    render printed last (here its props, a secret, on stderr), and were 0644 whatever the
    job's mode: a 0600 job's secret was readable by every local user in failed/. They get
    the private copy's read bits now, as its run logs do; a public job's are as before."""
    leak = ["sh", "-c", 'cat "$1" >&2; exit 75', "sh", "{props_file}"]  # 75: transient, a retry first
    write_spool_config(spool, {
        "commands": {"leak": leak},
        "hooks": {"noted": {"on": ["retry", "failed"], "command": ["true"]}},
    })  # fmt: skip
    secrets = {"private": f"private-s3cret-{os.getpid()}", "public": f"public-s3cret-{os.getpid()}"}
    for name, secret in secrets.items():
        job = {"renderer": "command", "command": "leak", "props": {"api_key": secret}, "max_attempts": 2}
        old = os.umask(0o077 if name == "private" else 0o022)
        try:
            drop(spool, f"{name}.yaml", job)
        finally:
            os.umask(old)
    runner = start_runner()  # not --drain: a drain may end while a retry is not due yet
    wait_for(lambda: len(entries(spool, "failed")) == 2, timeout=90)
    runner.send_signal(signal.SIGTERM)  # its hooks' last writes done before the files are read
    runner.wait(timeout=60)
    failed = {e.partition(".")[0]: spool.failed / e for e in entries(spool, "failed")}
    assert sorted(failed) == ["private", "public"], entries(spool, "failed")
    for name, mode in (("private", 0o600), ("public", 0o644)):
        job_dir = failed[name]
        written = [job_dir / "failure.json", *job_dir.glob("run-*.json"), *job_dir.glob("hook-*.json")]
        assert len(written) == 5, written  # failure.json, two runs, the retry's and the failure's hook state
        for path in written:
            assert stat.S_IMODE(os.stat(path).st_mode) == mode, (path, oct(os.stat(path).st_mode))
        assert secrets[name] in (job_dir / "failure.json").read_text()  # the runner's user reads it
    readable = [
        path
        for path in spool.root.rglob("*")
        if path.is_file() and not path.is_symlink() and os.stat(path).st_mode & (stat.S_IRGRP | stat.S_IROTH)
    ]
    assert any(secrets["public"].encode() in p.read_bytes() for p in readable)
    leaked = [p for p in readable if secrets["private"].encode() in p.read_bytes()]
    assert leaked == [], leaked


def test_a_claimer_stalled_before_its_copy_loses_the_claim_quietly(
    spool: SpoolLayout, start_runner: Start, tmp_path: Path
) -> None:
    """A runner stopped between the claim rename and the copy for longer than the lease:
    another runner gives the file back to incoming/ (recovery) and renders it. The stalled
    one, woken, finds the file gone from its directory: a lost claim, not a crash."""
    write_spool_config(spool, {**_config(), "settle_seconds": 0, "lease_seconds": 2, "heartbeat_seconds": 0.2})
    stalled = start_runner(env={"SPOOLRENDER_PAUSE_AT": "claim-after-rename"}, log=tmp_path / "stalled.log")
    _drop_tracked(spool, "alpha.yaml", b"renderer: command\ncommand: jobhash\noutput: alpha.txt\nprops: {}\n")
    wait_for(lambda: stopped(stalled), timeout=60)
    start_runner(log=tmp_path / "other.log")
    wait_for(lambda: len(entries(spool, "done")) == 1, timeout=120)
    stalled.send_signal(signal.SIGCONT)
    wait_for(lambda: "recovery took it back" in (tmp_path / "stalled.log").read_text(), timeout=60)
    assert stalled.poll() is None, (tmp_path / "stalled.log").read_text()
    assert entries(spool, "failed") == [] and len(entries(spool, "done")) == 1
