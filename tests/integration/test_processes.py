"""Real runner processes, real signals: kills, pauses, shutdowns, timeouts and races."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from support.processes import spoolrender_cmd
from support.spool_jobs import allow_steps, command_job, drop, entries, write_spool_config
from support.waiting import wait_for

from spoolrender.spool.heartbeat import read_heartbeat
from spoolrender.spool.layout import SpoolLayout

Start = Callable[..., subprocess.Popen[bytes]]


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0); it is dead for our purposes.
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def running_heartbeat_with_pgid(layout: SpoolLayout) -> bool:
    names = entries(layout, "running")
    if len(names) != 1:
        return False
    hb = read_heartbeat(layout.running / names[0])
    return hb is not None and hb.pgid is not None


def only_record(layout: SpoolLayout, state: str, filename: str) -> dict[str, Any]:
    (entry,) = entries(layout, state)
    data: dict[str, Any] = json.loads((layout.state_dir(state) / entry / filename).read_text())
    return data


def test_sigkilled_runner_job_is_recovered_by_another(spool: SpoolLayout, start_runner: Start, tmp_path: Path) -> None:
    pidfile = tmp_path / "render.pid"
    # A retry that is due at once would be claimed by drain b (and rendered for a minute).
    write_spool_config(spool, {"backoff_base_seconds": 600, "backoff_cap_seconds": 600})
    drop(spool, "long.yaml", command_job(sleep=60, pidfile=str(pidfile)))
    a = start_runner()
    wait_for(lambda: running_heartbeat_with_pgid(spool) and pidfile.exists())
    render_pid = int(pidfile.read_text())
    a.send_signal(signal.SIGKILL)
    a.wait()
    assert pid_alive(render_pid), "the orphaned render outlives a SIGKILLed runner"
    # A long backoff keeps the recovered job in retry/: with the tiny test backoff a slow
    # drain found it due again and started the 60 s render anew instead of exiting.
    b = start_runner("--drain", "--set", "backoff_base_seconds=600", "--set", "backoff_cap_seconds=600")
    b.wait(timeout=60)
    assert entries(spool, "running") == [] and len(entries(spool, "retry")) == 1
    (entry,) = entries(spool, "retry")
    run = json.loads((spool.retry / entry / "run-0001.json").read_text())
    assert run["outcome"] == "retry" and run["error"]["kind"] == "runner-died"
    # Same host: the released lock proved the owner dead at b's first sweep, no lease wait
    # (a lease wait would say "heartbeat unchanged for ...").
    assert "lock was released" in run["error"]["message"]
    wait_for(lambda: not pid_alive(render_pid))  # the recoverer stopped the orphan
    assert os.listdir(spool.root / "output" / ".spoolrender-tmp") == []


def test_paused_runner_never_publishes_after_its_job_was_taken(
    spool: SpoolLayout, start_runner: Start, tmp_path: Path
) -> None:
    """Fencing: runner A (another "host", via a UTS namespace) is paused past the lease."""
    if os.geteuid() != 0 or subprocess.run(["unshare", "-u", "true"], check=False).returncode != 0:
        pytest.skip("needs unshare -u (root) to give runner A its own hostname")
    marker = tmp_path / "renders.txt"
    steps = tmp_path / "steps"  # A's render goes on only once A is stopped
    drop(spool, "j.yaml", command_job(steps_file=str(steps), marker=str(marker), content_pid=True))
    a_log = tmp_path / "a.log"
    with open(a_log, "wb") as a_out:  # the child keeps its own copy of the descriptor
        a = subprocess.Popen(
            ["unshare", "-u", "sh", "-c", 'hostname other-host && exec "$@"', "sh",
             *spoolrender_cmd("run", "--spool", str(spool.root), "-v")],
            stdout=a_out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        wait_for(lambda: running_heartbeat_with_pgid(spool))
        (a_entry,) = entries(spool, "running")
        os.kill(a.pid, signal.SIGSTOP)
        allow_steps(steps, 10)  # its render goes on and finishes while A sleeps
        wait_for(lambda: marker.exists() and len(marker.read_text().splitlines()) == 1, timeout=60)
        b = start_runner()
        # B judges A dead only after the lease (2 s) of unchanged heartbeat, then renders.
        wait_for(lambda: len(entries(spool, "done")) == 1, timeout=60)
        assert a_entry not in entries(spool, "running")
        os.kill(a.pid, signal.SIGCONT)
        wait_for(lambda: "took it over" in a_log.read_text(), timeout=60)
        b.send_signal(signal.SIGTERM)
        b.wait(timeout=60)
    finally:
        a.kill()
        a.wait()
    renders = marker.read_text().splitlines()
    assert len(renders) == 2  # both rendered...
    result = only_record(spool, "done", "result.json")
    out = Path(result["output"]).read_text()
    b_render_pid = out.removeprefix("rendered by ")
    assert b_render_pid in renders[1]  # ...only B's render was published
    assert result["host"] != "other-host"
    runs = result["runs"]
    assert runs[0]["outcome"] == "retry" and "heartbeat unchanged" in runs[0]["error"]["message"]
    assert os.listdir(spool.root / "output" / ".spoolrender-tmp") == []


def test_sigterm_lets_running_job_finish(spool: SpoolLayout, start_runner: Start, tmp_path: Path) -> None:
    write_spool_config(spool, {"grace_seconds": 300})  # far longer than the test takes
    steps = tmp_path / "steps"  # still rendering when the SIGTERM comes: it ends when we let it
    drop(spool, "j.yaml", command_job(steps_file=str(steps)))
    r = start_runner()
    wait_for(lambda: running_heartbeat_with_pgid(spool))
    r.send_signal(signal.SIGTERM)
    allow_steps(steps, 10)
    assert r.wait(timeout=60) == 0
    assert len(entries(spool, "done")) == 1


def test_sigterm_past_grace_requeues_without_using_an_attempt(spool: SpoolLayout, start_runner: Start) -> None:
    write_spool_config(spool, {"grace_seconds": 0.5})
    drop(spool, "j.yaml", {**command_job(sleep=60), "max_attempts": 1})
    r = start_runner()
    wait_for(lambda: running_heartbeat_with_pgid(spool))
    r.send_signal(signal.SIGTERM)
    assert r.wait(timeout=60) == 0
    (entry,) = entries(spool, "retry")
    run = json.loads((spool.retry / entry / "run-0001.json").read_text())
    assert run["outcome"] == "requeue" and run["attempt"] is None
    # max_attempts is 1 and that attempt was not used: the job can still run.
    write_spool_config(spool, {})
    (spool.retry / entry / "job.yaml").write_text(
        "renderer: command\ncommand: props\nmax_attempts: 1\n"
    )  # a quick job this time: same job, same attempt budget
    subprocess.run(spoolrender_cmd("run", "--drain", "--spool", str(spool.root)), check=True)
    assert only_record(spool, "done", "result.json")["attempts"] == 1


def test_timeout_kills_the_whole_process_tree(spool: SpoolLayout, tmp_path: Path) -> None:
    child_pidfile = tmp_path / "child.pid"
    drop(spool, "slow.yaml", {**command_job(sleep=60, child_pidfile=str(child_pidfile)), "timeout": 1,
                              "max_attempts": 1})  # fmt: skip
    started = time.monotonic()
    drained = subprocess.run(spoolrender_cmd("run", "--drain", "--spool", str(spool.root)), timeout=60)
    assert drained.returncode == 3  # a job failed for good
    assert time.monotonic() - started < 45  # the 60 s render was cut short (with room for a slow start-up)
    failure = only_record(spool, "failed", "failure.json")
    assert failure["kind"] == "timeout" and "timed out after 1 s" in failure["reason"]
    assert not pid_alive(int(child_pidfile.read_text()))


def test_half_written_upload_waits_until_complete(spool: SpoolLayout, start_runner: Start) -> None:
    write_spool_config(spool, {"settle_seconds": 1.5})
    r = start_runner()
    path = spool.incoming / "upload.yaml"
    text = b"renderer: command\ncommand: props\nprops:\n  content: complete\n"
    # Like scp: the final name is written in pieces, first a prefix that does not parse.
    with open(path, "wb") as fh:
        fh.write(text[:12])
        fh.flush()
        time.sleep(0.8)  # shorter than the settle time: not yet claimable
        assert entries(spool, "incoming") == ["upload.yaml"]
        fh.write(text[12:])
    # close-after-write: complete now, claimed without waiting for the settle time.
    wait_for(lambda: len(entries(spool, "done")) == 1, timeout=60)
    r.send_signal(signal.SIGTERM)
    r.wait(timeout=60)
    assert (spool.root / "output" / "upload.mp4").read_bytes() == b"complete"
    assert entries(spool, "failed") == []


def test_stalled_garbage_is_declared_invalid_once_settled(spool: SpoolLayout) -> None:
    write_spool_config(spool, {"settle_seconds": 0.5})
    (spool.incoming / "junk.yaml").write_bytes(b"\x00\x01binary")
    subprocess.run(spoolrender_cmd("run", "--drain", "--spool", str(spool.root)), timeout=30)
    assert "NUL" in only_record(spool, "failed", "failure.json")["reason"]


@pytest.mark.slow
def test_several_runners_claim_and_publish_each_job_exactly_once(spool: SpoolLayout, tmp_path: Path) -> None:
    marker = tmp_path / "renders.txt"
    quick = ["sh", "-c", 'echo "$2" >> "$3" && echo "$2" > "$1"', "sh", "{output}", "{job_id}", str(marker)]
    write_spool_config(spool, {"commands": {"quick": quick}})
    jobs = 400
    for i in range(jobs):
        drop(spool, f"j{i:04d}.yaml", {"renderer": "command", "command": "quick"})
    runners = [
        subprocess.Popen(spoolrender_cmd("run", "--drain", "--spool", str(spool.root)),
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(4)
    ]  # fmt: skip
    for r in runners:
        assert r.wait(timeout=300) == 0
    done = entries(spool, "done")
    renders = marker.read_text().split()
    assert len(done) == jobs
    assert len(renders) == jobs and len(set(renders)) == jobs  # each rendered exactly once
    assert entries(spool, "incoming") == entries(spool, "running") == entries(spool, "failed") == []
    outputs = sorted(p.name for p in (spool.root / "output").glob("*.mp4"))
    assert len(outputs) == jobs


def test_help_teaches_with_examples() -> None:
    for sub in ("init", "submit", "run", "status", "retry"):
        out = subprocess.run([sys.executable, "-m", "spoolrender.cli", sub, "--help"], capture_output=True,
                             text=True, check=True).stdout  # fmt: skip
        assert "example" in out
