"""End to end with the real stack: Remotion 4, Node, Debian's Chromium, ffprobe.

Marked `remotion` (select with -m remotion, skip with -m "not remotion"). Skipped with a
reason only when the stack is not installed; scripts/setup.sh installs it, and CI runs it.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from support.checkout import FFPROBE, REMOTION, REMOTION_MARKS
from support.chunk_jobs import chunk_leftovers
from support.node_modules import link_node_modules
from support.processes import spoolrender_cmd
from support.spool_jobs import drop, entries, write_spool_config
from support.waiting import wait_for

from spoolrender.errors import RenderError
from spoolrender.renderers.remotion.bundle_cache import ensure_bundle
from spoolrender.spool.heartbeat import read_heartbeat
from spoolrender.spool.layout import SpoolLayout, init_spool

pytestmark = REMOTION_MARKS


@pytest.fixture(scope="session")
def bundle_cache(sample_bundles: Path) -> Path:
    # One cache for the whole run: the first test to render bundles, the others reuse it.
    return sample_bundles


@pytest.fixture
def rspool(spool: SpoolLayout, bundle_cache: Path) -> SpoolLayout:
    write_spool_config(
        spool,
        {"remotion_project": str(REMOTION), "cache_dir": str(bundle_cache), "slots": 1, "lease_seconds": 30},
    )
    return spool


def tiny(**props: Any) -> dict[str, Any]:
    return {"composition": "Tiny", "props": props}


@contextlib.contextmanager
def rendering(
    rspool: SpoolLayout, bundle_cache: Path, tmp_path: Path, job_id: str
) -> Iterator[subprocess.Popen[bytes]]:
    """A runner (log in tmp_path/runner.log) past 5% of a 4 s TitleCard job ``job_id``,
    with retries after 0.1 s; SIGTERMed on the way out. Yields the runner process."""
    write_spool_config(rspool, {"remotion_project": str(REMOTION), "cache_dir": str(bundle_cache), "slots": 1,
                                "backoff_base_seconds": 0.1, "backoff_cap_seconds": 0.2})  # fmt: skip
    drop(rspool, f"{job_id}.yaml", {"composition": "TitleCard", "props": {"title": job_id.title(), "seconds": 4}})
    with open(tmp_path / "runner.log", "wb") as out:
        runner = subprocess.Popen(spoolrender_cmd("run", "-v", "--spool", str(rspool.root)), stdout=out,
                                  stderr=subprocess.STDOUT)  # fmt: skip
    STARTED_RUNNERS.append(runner.pid)
    try:

        def started() -> bool:
            names = entries(rspool, "running")
            hb = read_heartbeat(rspool.running / names[0]) if names else None
            return hb is not None and hb.pgid is not None and (hb.progress or 0) > 0.05

        wait_for(started, timeout=120)
        yield runner
    finally:
        runner.send_signal(signal.SIGTERM)
        runner.wait(timeout=30)


def drain(layout: SpoolLayout, timeout: float = 300, expect: int = 0, env: dict[str, str] | None = None) -> str:
    """Run a drain; ``expect`` its exit status (3: some job failed for good)."""
    with subprocess.Popen(
        spoolrender_cmd("run", "--drain", "-v", "--spool", str(layout.root)),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    ) as proc:  # fmt: skip
        STARTED_RUNNERS.append(proc.pid)
        _, stderr = proc.communicate(timeout=timeout)
    assert proc.returncode == expect, stderr
    return stderr


def probe(path: Path) -> dict[str, Any]:
    out = subprocess.run(
        [str(FFPROBE), "-v", "error", "-count_frames", "-select_streams", "v:0", "-show_entries",
         "stream=nb_read_frames,width,height,codec_name:format=duration", "-of", "json", str(path)],
        capture_output=True, check=True,
    ).stdout  # fmt: skip
    data: dict[str, Any] = json.loads(out)
    return data


def record(layout: SpoolLayout, state: str, prefix: str, filename: str) -> dict[str, Any]:
    (entry,) = [e for e in entries(layout, state) if e.startswith(prefix + ".")]
    data: dict[str, Any] = json.loads((layout.state_dir(state) / entry / filename).read_text())
    return data


def leftovers(layout: SpoolLayout) -> list[str]:
    """Partial outputs, Remotion in-progress files, scratch dirs: must all be gone."""
    out = layout.root / "output"
    found = [str(p) for p in out.rglob("*") if ".remotion-in-progress" in p.name]
    scratch = out / ".spoolrender-tmp"
    if scratch.exists():
        found += [str(p) for p in scratch.iterdir()]
    return found


# Runners started by this module's tests: only their worker TMPDIRs are this module's
# business (other runners on the machine, e.g. a concurrent test run, are left alone).
STARTED_RUNNERS: list[int] = []


def worker_tmpdirs(runner_pid: int) -> list[Path]:
    return list(Path("/tmp").glob(f"spoolrender-worker-{runner_pid}-*"))


def processes_in(tmpdir: Path) -> list[int]:
    """Processes whose TMPDIR is ``tmpdir`` (a worker and what it spawned)."""
    found = []
    for proc in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if proc.environ().get("TMPDIR") == str(tmpdir) and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc.pid)
    return found


def leaked_worker_tmpdirs() -> list[Path]:
    """Worker TMPDIRs (named spoolrender-worker-<runner pid>-*) of runners started here that are gone."""
    leaked = []
    for path in Path("/tmp").glob("spoolrender-worker-*"):
        pid = path.name.removeprefix("spoolrender-worker-").split("-", 1)[0]
        if pid.isdigit() and int(pid) in STARTED_RUNNERS and not Path(f"/proc/{pid}").exists():
            leaked.append(path)
    return leaked


def test_jobs_render_to_verified_mp4_reusing_one_browser_and_bundle(rspool: SpoolLayout) -> None:
    drop(rspool, "a.yaml", {**tiny(frames=12, color="#ff0000"), "output": "tiny/a.mp4", "priority": 2})
    drop(rspool, "b.yaml", {**tiny(frames=20), "output": "tiny/b.mp4", "priority": 1})
    drain(rspool)
    a = probe(rspool.root / "output" / "tiny" / "a.mp4")
    assert a["streams"][0]["nb_read_frames"] == "12"
    assert (a["streams"][0]["width"], a["streams"][0]["height"]) == (160, 90)
    assert abs(float(a["format"]["duration"]) - 0.4) < 0.05
    b = probe(rspool.root / "output" / "tiny" / "b.mp4")
    assert b["streams"][0]["nb_read_frames"] == "20"
    first = record(rspool, "done", "a", "result.json")["details"]
    second = record(rspool, "done", "b", "result.json")["details"]
    assert first["frames"] == 12 and second["frames"] == 20
    # The worker's own counters: the same worker, browser and bundle served both jobs.
    assert second["worker"] == {"browserLaunches": 1, "bundleLoads": 1, "jobsRendered": 2, "jobsFailed": 0}
    assert leftovers(rspool) == []


def test_permanent_remotion_errors_fail_with_remotions_message(rspool: SpoolLayout) -> None:
    drop(rspool, "nope.yaml", {"composition": "Nope"})
    drop(rspool, "throws.yaml", {"composition": "Failing", "props": {"reason": "bad data", "atFrame": 2}})
    drop(rspool, "badprops.yaml", {"composition": "DataRecap", "props": {"title": "x", "items": "not a list"}})
    drop(rspool, "fine.yaml", tiny())
    drain(rspool, expect=3)
    assert entries(rspool, "done")[0].startswith("fine.")
    nope = record(rspool, "failed", "nope", "failure.json")
    assert nope["kind"] == "composition-not-found" and nope["attempts"] == 1
    assert nope["reason"].startswith("Could not find composition with ID Nope. Available compositions: ")
    assert "TitleCard" in nope["reason"]
    throws = record(rspool, "failed", "throws", "failure.json")
    assert throws["kind"] == "component-error"
    assert "Intentional failure: bad data" in throws["reason"] and "src/Failing.tsx:" in throws["reason"]
    badprops = record(rspool, "failed", "badprops", "failure.json")
    assert badprops["kind"] == "invalid-props"
    assert badprops["reason"].startswith("Invalid props for DataRecap: props.items:")  # its schema, in the page
    # The full Node log of the attempt is kept beside the record.
    (entry,) = [e for e in entries(rspool, "failed") if e.startswith("throws.")]
    assert "Intentional failure" in (rspool.failed / entry / "run-0001.log").read_text()
    assert leftovers(rspool) == []


def test_timeout_cancels_mid_render_and_retries_cleanly(rspool: SpoolLayout, bundle_cache: Path) -> None:
    # The retry must be due after the drain's next look: with FAST's 0.05 s backoff a
    # loaded machine let that look come later than the due time, and the drain took the
    # second attempt too.
    write_spool_config(
        rspool,
        {"remotion_project": str(REMOTION), "cache_dir": str(bundle_cache), "slots": 1, "lease_seconds": 30,
         "backoff_base_seconds": 600, "backoff_cap_seconds": 600},
    )  # fmt: skip
    slow = {
        "composition": "TitleCard",
        "props": {"title": "Slow", "seconds": 20},
        "timeout": 4,
        "max_attempts": 2,
    }
    drop(rspool, "slow.yaml", slow)
    drain(rspool)
    (entry,) = entries(rspool, "retry")
    run = json.loads((rspool.retry / entry / "run-0001.json").read_text())
    assert run["outcome"] == "retry" and run["error"]["kind"] == "timeout"
    assert leftovers(rspool) == []
    assert leaked_worker_tmpdirs() == []  # the worker's TMPDIR went with it


def test_sigkilled_worker_mid_render_is_retried_without_leftovers(
    rspool: SpoolLayout, bundle_cache: Path, tmp_path: Path
) -> None:
    with rendering(rspool, bundle_cache, tmp_path, "victim"):
        status = json.loads(subprocess.run(spoolrender_cmd("status", "--json", "--spool", str(rspool.root)),
                                           capture_output=True, check=True).stdout)  # fmt: skip
        (running,) = status["running"]
        assert running["id"] == "victim" and running["progress"] > 0 and running["eta_seconds"] is not None
        assert running["stage"] in ("rendering", "encoding") and not running["stale"]
        (name,) = entries(rspool, "running")
        hb = read_heartbeat(rspool.running / name)
        assert hb is not None and hb.pgid is not None
        os.kill(hb.pgid, signal.SIGKILL)  # the Node worker itself (its group leader)
        wait_for(lambda: len(entries(rspool, "done")) == 1, timeout=180)
    result = record(rspool, "done", "victim", "result.json")
    assert [r["outcome"] for r in result["runs"]] == ["retry", "publishing"]
    assert result["runs"][0]["error"]["kind"] == "worker-died"
    assert "the Remotion worker died (signal 9)" in result["runs"][0]["error"]["message"]
    assert probe(Path(result["output"]))["streams"][0]["nb_read_frames"] == "120"
    assert leftovers(rspool) == []
    assert leaked_worker_tmpdirs() == []


def test_drain_reuses_the_cached_bundle(rspool: SpoolLayout) -> None:
    drop(rspool, "one.yaml", tiny())
    drain(rspool)
    drop(rspool, "two.yaml", tiny())
    second = drain(rspool)
    assert len(entries(rspool, "done")) == 2
    assert "bundling" not in second  # a cron-started drain must not rebundle


def test_bundle_cache_builds_once_and_never_caches_a_failure(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    shutil.copytree(REMOTION / "src", project / "src")
    for name in ("package.json", "package-lock.json"):
        shutil.copy(REMOTION / name, project / name)
    link_node_modules(project, REMOTION / "node_modules")
    cache = tmp_path / "cache"
    index = project / "src" / "index.ts"
    good = index.read_text()
    index.write_text(good + "\nconst broken = ;\n")
    with pytest.raises(RenderError, match="bundling the Remotion project failed") as err:
        ensure_bundle(project, cache)
    assert err.value.transient
    assert [p.name for p in (cache / "bundles").iterdir() if not p.name.startswith(".")] == []
    assert not list((cache / "bundles").glob(".*.building"))

    index.write_text(good)
    script = (
        "import logging, sys; from pathlib import Path; logging.basicConfig(level=logging.INFO);"
        "from spoolrender.renderers.remotion.bundle_cache import ensure_bundle;"
        "print(ensure_bundle(Path(sys.argv[1]), Path(sys.argv[2])))"
    )
    procs = [
        subprocess.Popen([sys.executable, "-c", script, str(project), str(cache)], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]  # fmt: skip
    outs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    paths = {out.strip() for out, _ in outs}
    assert len(paths) == 1  # both got the same bundle...
    assert sum(err.count("bundling") for _, err in outs) == 1  # ...built once
    assert (Path(paths.pop()) / "index.html").is_file()


def test_chromium_killed_mid_render_is_retried_cleanly(rspool: SpoolLayout, bundle_cache: Path, tmp_path: Path) -> None:
    with rendering(rspool, bundle_cache, tmp_path, "crash") as runner:
        # Only this runner's browsers: never another runner's on the same machine.
        browsers = []
        for proc in psutil.Process(runner.pid).children(recursive=True):
            with contextlib.suppress(psutil.Error):
                argv = proc.cmdline()
                if argv and "chromium" in argv[0] and any("spoolrender-worker-" in a for a in argv):
                    browsers.append(proc)
        assert browsers, "no Chromium of a spoolrender worker found"
        for browser in browsers:
            browser.kill()
        wait_for(lambda: len(entries(rspool, "done")) == 1, timeout=180)
        # The live worker keeps only its current browser's profile: the killed one's went.
        (tmpdir,) = worker_tmpdirs(runner.pid)
        assert len(list(tmpdir.glob("puppeteer_dev_chrome_profile-*"))) == 1
    result = record(rspool, "done", "crash", "result.json")
    outcomes = [(r["outcome"], (r["error"] or {}).get("kind")) for r in result["runs"]]
    assert outcomes[0] == ("retry", "browser-crashed") and outcomes[-1] == ("publishing", None), outcomes
    assert probe(Path(result["output"]))["streams"][0]["nb_read_frames"] == "120"
    assert leftovers(rspool) == []
    assert leaked_worker_tmpdirs() == []
    assert worker_tmpdirs(runner.pid) == []  # nothing of the runner's workers is left


def test_a_later_drain_removes_what_a_killed_runners_workers_left(
    rspool: SpoolLayout, bundle_cache: Path, tmp_path: Path
) -> None:
    with rendering(rspool, bundle_cache, tmp_path, "orphan") as runner:
        (tmpdir,) = worker_tmpdirs(runner.pid)
        runner.kill()  # SIGKILL: no clean-up of its own
        runner.wait()
    assert tmpdir.exists()  # the worker dir (with Chromium's profile) outlived its runner
    drain(init_spool(tmp_path / "other-spool"))  # any drain on the host, even of an empty spool
    assert not tmpdir.exists()
    assert processes_in(tmpdir) == []


def test_a_job_that_exhausts_memory_is_not_retried_the_same_way(rspool: SpoolLayout, bundle_cache: Path) -> None:
    ensure_bundle(REMOTION, bundle_cache)  # bundled with a normal heap, once
    # Two threads where there are two cores: the first attempt renders at concurrency 2.
    write_spool_config(rspool, {"remotion_project": str(REMOTION), "cache_dir": str(bundle_cache), "slots": 1,
                                "threads_per_job": 2, "backoff_base_seconds": 0.1,
                                "backoff_cap_seconds": 0.2})  # fmt: skip
    drop(rspool, "hungry.yaml", {**tiny(frames=30), "max_attempts": 5})
    # A real V8 heap exhaustion: the worker gets 16 MB of heap, enough to start, not to render.
    env = {**os.environ, "NODE_OPTIONS": "--max-old-space-size=16"}
    for _ in range(3):  # a retry (due 0.2 s later) may wait in retry/ after a drain: drain again
        proc = subprocess.run(spoolrender_cmd("run", "--drain", "--spool", str(rspool.root)), env=env,
                              capture_output=True, timeout=300, check=False)  # fmt: skip
        if entries(rspool, "failed"):
            assert proc.returncode == 3
            break
    failure = record(rspool, "failed", "hungry", "failure.json")
    assert failure["kind"] == "out-of-memory"
    assert "JavaScript heap out of memory" in failure["reason"] and "not retried" in failure["reason"]
    (entry,) = entries(rspool, "failed")
    runs = [json.loads((rspool.failed / entry / f"run-{n:04d}.json").read_text()) for n in (1, 2)
            if (rspool.failed / entry / f"run-{n:04d}.json").exists()]  # fmt: skip
    # At most one retry, and that one at concurrency 1 (never twice the same way).
    assert all(r["error"]["kind"] == "out-of-memory" for r in runs) and len(runs) <= 2
    if (os.cpu_count() or 1) >= 2:
        assert len(runs) == 2
        assert runs[0]["outcome"] == "retry" and "the retry renders at concurrency 1" in runs[0]["error"]["message"]
        assert "concurrency 1" in (rspool.failed / entry / "run-0002.log").read_text()


def own_memory_cgroup() -> Path | None:
    """This process's cgroup-v1 memory directory, if we may make children in it."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            cgroup = Path("/sys/fs/cgroup/memory") / path.lstrip("/")
            if (cgroup / "memory.limit_in_bytes").is_file() and os.access(cgroup, os.W_OK):
                return cgroup
    return None


@pytest.mark.skipif(own_memory_cgroup() is None, reason="needs a writable cgroup-v1 memory controller (root)")
def test_chromium_killed_by_the_oom_killer_is_out_of_memory(
    rspool: SpoolLayout, bundle_cache: Path, tmp_path: Path
) -> None:
    ensure_bundle(REMOTION, bundle_cache)  # bundled outside the limit, once
    parent = own_memory_cgroup()
    assert parent is not None
    cgroup = parent / f"spoolrender-test-{os.getpid()}-{tmp_path.name}"
    cgroup.mkdir()
    try:
        # 400 MB: the worker and Chromium start (about 210 MB) with room to spare, and a
        # frame at scale 4 (5120x2880, about 700 MB of buffers) is far over: the kernel's OOM
        # killer ends Chromium at the first frame (the failure issue 12 saw at scale 16). A
        # limit just over what the render needs instead made it thrash for minutes (its code
        # pages evicted and read back, never quite out of memory) on a loaded machine.
        (cgroup / "memory.limit_in_bytes").write_text(str(400 * 1024 * 1024))
        write_spool_config(rspool, {"remotion_project": str(REMOTION), "cache_dir": str(bundle_cache), "slots": 1,
                                    "threads_per_job": 2, "backoff_base_seconds": 0.1,
                                    "backoff_cap_seconds": 0.2})  # fmt: skip
        drop(rspool, "big.yaml", {"composition": "TitleCard", "props": {"seconds": 2}, "settings": {"scale": 4},
                                  "max_attempts": 5})  # fmt: skip
        enter = f'echo $$ > {cgroup / "cgroup.procs"} && exec "$@"'
        for _ in range(3):  # a retry (due 0.2 s later) may wait in retry/ after a drain: drain again
            proc = subprocess.run(["sh", "-c", enter, "sh", *spoolrender_cmd("run", "--drain", "--spool",
                                   str(rspool.root))], capture_output=True, timeout=300, check=False)  # fmt: skip
            if entries(rspool, "failed"):
                assert proc.returncode == 3
                break
    finally:
        wait_for(lambda: not (cgroup / "cgroup.procs").read_text().strip(), timeout=60)
        control = dict(line.split() for line in (cgroup / "memory.oom_control").read_text().splitlines())
        cgroup.rmdir()
    assert int(control["oom_kill"]) >= 1  # the kernel's OOM killer did end processes of the render
    failure = record(rspool, "failed", "big", "failure.json")
    assert failure["kind"] == "out-of-memory", failure
    assert "not retried" in failure["reason"]
    (entry,) = entries(rspool, "failed")
    runs = [json.loads(p.read_text()) for p in sorted((rspool.failed / entry).glob("run-*.json"))]
    assert [r["error"]["kind"] for r in runs] == ["out-of-memory"] * len(runs) and len(runs) <= 2, runs
    # A crashed page or worker is told by the cgroup's count ("the kernel's OOM killer ended a
    # process of the render (oom_kill N -> M, its memory cgroup)"); or the frame's screenshot
    # fails first, which Remotion itself reports as out of memory. Which comes first varies
    # from run to run (both were seen here): either is out of memory.
    kernel = "the kernel's OOM killer ended a process of the render (oom_kill "
    remotion = "Google Chrome ran out of memory"
    for run in runs:
        message = run["error"]["message"]
        assert (kernel in message and "its memory cgroup" in message) or remotion in message, run


def test_a_job_in_chunks_is_rendered_by_the_spool_joined_and_published_once(
    rspool: SpoolLayout, bundle_cache: Path
) -> None:
    """The whole path of a split Remotion job through real runners: plan, chunk entries
    rendered on two slots, combineChunks, verification, one publish, nothing left."""
    write_spool_config(rspool, {"remotion_project": str(REMOTION), "cache_dir": str(bundle_cache), "slots": 2,
                                "lease_seconds": 30})  # fmt: skip
    drop(rspool, "long.yaml", {**tiny(frames=45, color="#0ea5e9", tone=True), "output": "long.mp4", "chunks": 4})
    deadline = time.monotonic() + 600
    while not entries(rspool, "done") and not entries(rspool, "failed") and time.monotonic() < deadline:
        drain(rspool)  # a drain ends when nothing is claimable; the woken job is the next drain's
    assert entries(rspool, "failed") == [], record(rspool, "failed", "long", "failure.json")
    result = record(rspool, "done", "long", "result.json")
    assert [run["outcome"] for run in result["runs"]] == ["split", "publishing"]
    video = probe(rspool.root / "output" / "long.mp4")
    assert video["streams"][0]["nb_read_frames"] == "45"
    assert abs(float(video["format"]["duration"]) - 1.5) < 0.15  # audio may run a few AAC packets over
    audio = subprocess.run(
        [str(FFPROBE), "-v", "error", "-select_streams", "a:0", "-show_entries", "stream=codec_name", "-of", "csv=p=0",
         str(rspool.root / "output" / "long.mp4")],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    assert audio == "aac"
    assert chunk_leftovers(rspool, rspool.root / "output") == [] and leftovers(rspool) == []
    assert [p.name for p in (rspool.root / "output").rglob("*") if p.is_file()] == ["long.mp4"]
