"""Faults under a working runner: a full output filesystem, a spool that refuses changes,
heartbeats deleted and corrupted. Each must end as a transient failure or a recovery,
with nothing partial left and the runner still going. (Clock jumps: tests/integration/test_recovery.py
with an injected clock, and the skewed host in test_hosts.py; see docs/reliability.md.)"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml
from invariants import audit
from support.spool_jobs import allow_steps

from spoolrender import defaults
from spoolrender.spool.heartbeat import heartbeat_path
from spoolrender.spool.layout import SpoolLayout, init_spool

RENDER_PROPS = Path(__file__).resolve().parent.parent / "programs" / "render_props.py"
CMD = [sys.executable, "-m", "spoolrender.cli"]


def tmpfs(path: Path, size: str) -> bool:
    path.mkdir(parents=True, exist_ok=True)
    return subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                          capture_output=True, check=False).returncode == 0  # fmt: skip


@pytest.fixture
def mounts() -> Iterator[list[Path]]:
    mounted: list[Path] = []
    yield mounted
    for path in reversed(mounted):
        subprocess.run(["umount", "-l", str(path)], check=False)


def make_spool(root: Path, **extra: object) -> SpoolLayout:
    layout = init_spool(root)
    config = {
        "settle_seconds": 0, "heartbeat_seconds": 0.2, "lease_seconds": 2, "rescan_seconds": 0.3, "slots": 1,
        "backoff_base_seconds": 0.05, "backoff_cap_seconds": 0.1,
        "commands": {"props": [sys.executable, str(RENDER_PROPS), "{output}", "{props_file}"]}, **extra,
    }  # fmt: skip
    (layout.root / "spoolrender.yaml").write_text(yaml.safe_dump(config))
    return layout


def drop(layout: SpoolLayout, name: str, props: dict[str, object], **fields: object) -> None:
    tmp = layout.incoming / f".{name}.part"
    tmp.write_text(yaml.safe_dump({"renderer": "command", "command": "props", "props": props, **fields}))
    os.rename(tmp, layout.incoming / name)


def wait_until(predicate: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def runs_of(layout: SpoolLayout, state: str) -> list[dict[str, object]]:
    (entry,) = os.listdir(layout.state_dir(state))
    return [json.loads(p.read_text()) for p in sorted((layout.state_dir(state) / entry).glob("run-*.json"))]


def test_full_output_filesystem_is_transient_and_leaves_nothing(tmp_path: Path, mounts: list[Path]) -> None:
    out = tmp_path / "small-output"
    if os.geteuid() != 0 or not tmpfs(out, "1m"):
        pytest.skip("needs root to mount a small tmpfs")
    mounts.append(out)
    layout = make_spool(tmp_path / "spool", output_root=str(out), max_attempts=2)
    drop(layout, "big.yaml", {"size": 4 * 1024 * 1024})
    drop(layout, "small.yaml", {"content": "fits"})
    deadline = time.monotonic() + 60
    while os.listdir(layout.incoming) + os.listdir(layout.retry) and time.monotonic() < deadline:
        subprocess.run([*CMD, "run", "--drain", "--spool", str(layout.root)], capture_output=True, timeout=60)
        time.sleep(0.1)
    runs = runs_of(layout, "failed")
    assert [r["outcome"] for r in runs] == ["retry", "failed"]  # transient, then out of attempts
    assert all("No space left on device" in str(r["error"]) for r in runs), runs
    assert (out / "small.mp4").read_bytes() == b"fits"  # the runner went on
    assert sorted(os.listdir(out)) == [".spoolrender-tmp", "small.mp4"] and os.listdir(out / ".spoolrender-tmp") == []
    assert shutil.disk_usage(out).used < 64 * 1024  # the partial 1 MiB is gone


def test_output_filesystem_filled_by_others_requeues_a_job_a_bounded_number_of_times(
    tmp_path: Path, mounts: list[Path]
) -> None:
    """Someone else's file leaves the output filesystem 256 KiB: each run of the job is
    stopped by the disk (not its own doing), so it is requeued without an attempt, but
    only SPOOL_IO_FREE_REQUEUES times in a row: then the stop uses one (issue 21: no job
    loops for ever for free)."""
    out = tmp_path / "small-output"
    if os.geteuid() != 0 or not tmpfs(out, "1m"):
        pytest.skip("needs root to mount a small tmpfs")
    mounts.append(out)
    (out / "others.bin").write_bytes(b"o" * (768 * 1024))
    layout = make_spool(tmp_path / "spool", output_root=str(out), max_attempts=1)
    drop(layout, "big.yaml", {"size": 4 * 1024 * 1024})
    deadline = time.monotonic() + 120
    while os.listdir(layout.incoming) + os.listdir(layout.retry) and time.monotonic() < deadline:
        # A drain stops (status 1) once the disk has stopped a run: the next one goes on.
        subprocess.run([*CMD, "run", "--drain", "--spool", str(layout.root)], capture_output=True, timeout=60)
    runs = runs_of(layout, "failed")
    free = defaults.SPOOL_IO_FREE_REQUEUES
    assert [(r["outcome"], r["attempt"]) for r in runs] == [("requeue", None)] * free + [("failed", 1)], runs
    assert all(r["error"]["kind"] == "spool-io" for r in runs)  # type: ignore[index]
    assert all(str(r["error"]["message"]).startswith("No space left on device") for r in runs)  # type: ignore[index]
    last = str(runs[-1]["error"]["message"])  # type: ignore[index]
    assert f"counted as an attempt: requeued {free} times in a row" in last and "(attempt 1 of 1, none left)" in last
    assert sorted(os.listdir(out)) == [".spoolrender-tmp", "others.bin"] and os.listdir(out / ".spoolrender-tmp") == []


def test_spool_briefly_unwritable(tmp_path: Path) -> None:
    """The spool's directories refuse every change for a while (chattr +i: even root)."""
    layout = make_spool(tmp_path / "spool", output_root=str(tmp_path / "out"))
    dirs = [layout.root / d for d in ("incoming", "running", "retry", "done", "failed", ".spoolrender")]
    if subprocess.run(["chattr", "+i", str(dirs[0])], capture_output=True, check=False).returncode != 0:
        pytest.skip("chattr +i not supported on this filesystem")
    subprocess.run(["chattr", "-i", str(dirs[0])], check=True)
    with open(tmp_path / "runner.log", "wb") as log:
        runner = subprocess.Popen([*CMD, "run", "-v", "--spool", str(layout.root)], stdout=log, stderr=log)
    try:
        steps, rendered = tmp_path / "steps", tmp_path / "rendered"  # it ends when the test lets it
        drop(layout, "a.yaml", {"steps_file": str(steps), "marker": str(rendered), "content": "survived"})
        wait_until(lambda: bool(os.listdir(layout.running)), 60)
        subprocess.run(["chattr", "+i", *map(str, dirs)], check=True)
        try:
            allow_steps(steps, 10)  # the render ends while the spool cannot record its move...
            wait_until(rendered.exists, 60)
            # ...and the runner has tried to, and said why it could not.
            wait_until(lambda: "Operation not permitted" in (tmp_path / "runner.log").read_text(), 60)
        finally:
            subprocess.run(["chattr", "-i", *map(str, dirs)], check=True)
        drop(layout, "b.yaml", {"content": "after"})
        # Generously: the runner retries the spool with a backoff that grows to
        # defaults.SPOOL_IO_RETRY's cap while the fault lasts (longer on a loaded machine), so
        # its next look may come that long after the fault is over.
        wait_until(lambda: len(os.listdir(layout.done)) == 2, 120)
        assert runner.poll() is None  # still running
    finally:
        runner.terminate()
        runner.wait(timeout=30)
    result = audit(layout, {"a", "b"}, output_ok={"a": b"survived", "b": b"after"}, check_processes=False)
    assert result.ok, result.problems()
    assert "Operation not permitted" in (tmp_path / "runner.log").read_text()  # the trouble was logged


def test_heartbeat_deleted_and_corrupted_under_a_running_job(tmp_path: Path) -> None:
    layout = make_spool(tmp_path / "spool")
    logs = [open(tmp_path / f"r{i}.log", "wb") for i in range(2)]  # noqa: SIM115 - closed below
    runners = [subprocess.Popen([*CMD, "run", "--spool", str(layout.root)], stdout=f, stderr=f) for f in logs]
    try:
        # The render lasts until the test ends it: a fixed render time could end before a
        # slow test even saw it running, or in the middle of the vandalism.
        release = tmp_path / "release"
        drop(layout, "j.yaml", {"until_file": str(release), "content": "intact"})
        wait_until(lambda: bool(os.listdir(layout.running)), 60)
        (entry,) = os.listdir(layout.running)
        hb = heartbeat_path(layout.running / entry, entry.rsplit(".", 1)[1])  # the claim's own name
        end = time.monotonic() + 3.5  # longer than the lease (2 s)
        while time.monotonic() < end:
            try:
                hb.unlink()
                time.sleep(0.05)
                hb.write_bytes(b"\x00{not json")
            except FileNotFoundError:
                pass
            time.sleep(0.05)
        assert os.listdir(layout.running) == [entry]  # the vandalism spanned a running job
        release.touch()
        wait_until(lambda: bool(os.listdir(layout.done)), 60)
    finally:
        for r in runners:
            r.terminate()
            r.wait(timeout=30)
        for f in logs:
            f.close()
    runs = runs_of(layout, "done")
    assert [r["outcome"] for r in runs] == ["publishing"]  # nobody took the live job away
    result = audit(layout, {"j"}, output_ok={"j": b"intact"}, check_processes=False)
    assert result.ok, result.problems()
