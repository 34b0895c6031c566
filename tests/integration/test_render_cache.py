"""The render cache through real runs: keys, hits by hard link, verification, LRU eviction,
purge, and identical jobs rendering once (real runner subprocesses, SIGKILL).

Renders are counted with the test command's ``marker`` prop: each completed render
appends one line to the marker file.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.browser.cdp import CHROMIUM, Chromium
from support.browser.server import running_server
from support.processes import spoolrender_cmd
from support.spool_jobs import command_job, drop, entries, write_spool_config
from support.waiting import wait_for

from spoolrender.config.spool_config import load_config
from spoolrender.jobfile import parse_job
from spoolrender.render_cache.entries import WAITING_STAGE, RenderCache, cache_root
from spoolrender.render_cache.in_flight import Holder, InFlight
from spoolrender.renderers.base import RenderRequest
from spoolrender.renderers.command import CommandRenderer
from spoolrender.renderers.remotion.renderer import RemotionRenderer
from spoolrender.runner.loop import Runner, RunSummary
from spoolrender.spool.clock import ManualClock
from spoolrender.spool.heartbeat import Heartbeat, LivenessTracker, read_heartbeat
from spoolrender.spool.layout import SpoolLayout

OUTPUT = "output"


def drain(layout: SpoolLayout) -> RunSummary:
    return Runner(load_config(layout.root, environ={}), drain=True).run()


def renders(marker: Path) -> int:
    return len(marker.read_text().splitlines()) if marker.exists() else 0


def result_of(layout: SpoolLayout, job_id: str) -> dict[str, Any]:
    (entry,) = [e for e in entries(layout, "done") if e.startswith(f"{job_id}.")]
    data: dict[str, Any] = json.loads((layout.done / entry / "result.json").read_text())
    return data


def cache_entries(layout: SpoolLayout) -> list[str]:
    path = cache_root(layout.root / OUTPUT) / "entries"
    return sorted(os.listdir(path)) if path.is_dir() else []


@pytest.fixture
def cached(spool: SpoolLayout) -> SpoolLayout:
    write_spool_config(spool, {"render_cache": True})
    return spool


# --- keys ------------------------------------------------------------------------------


def _request(layout: SpoolLayout, job: dict[str, Any], *, attempt: int = 1, job_id: str = "k") -> RenderRequest:
    config = load_config(layout.root, environ={})
    job_file = layout.root / f"{job_id}.yaml"
    job_file.write_text(yaml.safe_dump(job))
    spec = parse_job(job_file.read_bytes(), job_file.name, config)
    props, settings, _ = spec.settings_for_attempt(attempt)
    scratch = layout.root / "scratch"
    return RenderRequest(spec, job_file, scratch / f"output{spec.output.suffix}", scratch, scratch / "log", 1,
                         attempt, props, settings)  # fmt: skip


def test_command_key_is_stable_and_sees_props_program_and_files(spool: SpoolLayout, tmp_path: Path) -> None:
    script = tmp_path / "render.py"
    script.write_text("print('v1')\n")
    write_spool_config(spool, {"commands": {"cmd": [sys.executable, str(script), "{output}", "{props_file}"]}})
    renderer = CommandRenderer(load_config(spool.root, environ={}))
    job = {"renderer": "command", "command": "cmd", "props": {"title": "a", "n": 1}}
    key = renderer.cache_key(_request(spool, job))
    assert key is not None and len(key) == 64
    # The same inputs: the same key, whatever the job's id, output name, priority or attempt.
    same = {**job, "id": "other", "output": "x/y.mp4", "priority": 5, "props": {"n": 1, "title": "a"}}
    assert renderer.cache_key(_request(spool, same, attempt=2, job_id="other")) == key
    # A changed prop, another output kind, a changed file the argv names: another key.
    assert renderer.cache_key(_request(spool, {**job, "props": {"title": "b", "n": 1}})) != key
    assert renderer.cache_key(_request(spool, {**job, "output": "k.webm"})) != key
    # Another argv template (a flag added in spoolrender.yaml): another key.
    write_spool_config(spool, {"commands": {"cmd": [sys.executable, str(script), "-x", "{output}", "{props_file}"]}})
    assert CommandRenderer(load_config(spool.root, environ={})).cache_key(_request(spool, job)) != key
    write_spool_config(spool, {"commands": {"cmd": [sys.executable, str(script), "{output}", "{props_file}"]}})
    assert CommandRenderer(load_config(spool.root, environ={})).cache_key(_request(spool, job)) == key
    script.write_text("print('v2')\n")
    assert CommandRenderer(load_config(spool.root, environ={})).cache_key(_request(spool, job)) != key
    # A template that passes the job id makes the key per job.
    write_spool_config(spool, {"commands": {"cmd": [sys.executable, str(script), "{output}", "{job_id}"]}})
    renderer = CommandRenderer(load_config(spool.root, environ={}))
    assert renderer.cache_key(_request(spool, job)) != renderer.cache_key(_request(spool, job, job_id="k2"))


def _fake_project(root: Path, version: str = "4.0.300") -> Path:
    """A Remotion project as far as the key reads it (no render happens in this test)."""
    (root / "src").mkdir(parents=True)
    (root / "package.json").write_text('{"name": "p"}')
    (root / "src" / "Root.tsx").write_text("export const Root = () => null;\n")
    (root / "remotion.config.ts").write_text("// defaults\n")
    (root / "node_modules" / "remotion").mkdir(parents=True)
    (root / "node_modules" / "remotion" / "package.json").write_text(json.dumps({"version": version}))
    return root


def test_remotion_key_sees_every_input_and_builds_nothing(spool: SpoolLayout, tmp_path: Path) -> None:
    project = _fake_project(tmp_path / "project")
    bundles = tmp_path / "bundles"
    write_spool_config(spool, {"remotion_project": str(project), "cache_dir": str(bundles)})
    job: dict[str, Any] = {"composition": "Intro", "props": {"title": "Hi"}, "settings": {"crf": 20}}

    def key(job: dict[str, Any]) -> str | None:
        renderer = RemotionRenderer(load_config(spool.root, environ={}))
        found = renderer.cache_key(_request(spool, job))
        assert renderer.workers_started == 0
        return found

    first = key(job)
    assert first is not None and key(dict(job)) == first
    assert not bundles.exists()  # no bundle built, no worker or browser started
    changed = [
        {**job, "composition": "Outro"},
        {**job, "props": {"title": "Ho"}},
        {**job, "settings": {"crf": 21}},
        {**job, "settings": {"crf": 20, "codec": "h265"}, "output": "k.mp4"},
        {**job, "output": "k.webm", "settings": {"codec": "vp8"}},
        {**job, "still": {"frame": 3}, "output": "k.png", "settings": {}},
    ]
    keys = [key(j) for j in changed]
    assert first not in keys and len(set(keys)) == len(keys)
    (project / "src" / "Root.tsx").write_text("export const Root = () => 'changed';\n")
    after_source = key(job)
    (project / "remotion.config.ts").write_text("Config.setCrf(10);\n")
    after_config = key(job)
    (project / "node_modules" / "remotion" / "package.json").write_text(json.dumps({"version": "4.0.301"}))
    after_upgrade = key(job)
    assert len({first, after_source, after_config, after_upgrade}) == 4


# --- hits, verification ------------------------------------------------------------------


def test_hit_publishes_the_same_bytes_by_hard_link_and_says_so(cached: SpoolLayout, tmp_path: Path) -> None:
    marker = tmp_path / "renders"
    drop(cached, "first.yaml", {**command_job(content="frames", marker=str(marker)), "output": "a/first.mp4"})
    drain(cached)
    first = result_of(cached, "first")
    assert first["cache"] == "stored" and renders(marker) == 1
    drop(cached, "second.yaml", {**command_job(content="frames", marker=str(marker)), "output": "b/second.mp4"})
    drain(cached)
    assert renders(marker) == 1  # published from the cache, not rendered
    second = result_of(cached, "second")
    assert second["cache"] == "hit"
    assert second["cache_source"]["id"] == "first" and second["cache_source"]["uid"] == first["uid"]
    a, b = cached.root / OUTPUT / "a/first.mp4", cached.root / OUTPUT / "b/second.mp4"
    assert a.read_bytes() == b.read_bytes() == b"frames"
    assert os.stat(a).st_ino == os.stat(b).st_ino  # one inode: a hard link
    (key,) = cache_entries(cached)
    assert second["cache_key"] == first["cache_key"] == key
    assert (os.stat(b).st_mode & 0o777) == 0o444  # shared bytes are read-only
    assert os.listdir(cached.root / OUTPUT / ".spoolrender-tmp") == []
    show = subprocess.run(spoolrender_cmd("show", "second", "--spool", str(cached.root)),
                          capture_output=True, text=True, check=True).stdout  # fmt: skip
    assert "cache: hit, published from the render of job first" in show
    status = subprocess.run(spoolrender_cmd("status", "--spool", str(cached.root)),
                            capture_output=True, text=True, check=True).stdout  # fmt: skip
    assert "render cache: 1 entries" in status


@pytest.mark.parametrize("damage", ["rewritten", "truncated", "output-removed", "record-removed", "symlink"])
def test_a_damaged_entry_is_a_miss_and_is_replaced(cached: SpoolLayout, tmp_path: Path, damage: str) -> None:
    marker = tmp_path / "renders"
    drop(cached, "one.yaml", command_job(content="good bytes", marker=str(marker)))
    drain(cached)
    (key,) = cache_entries(cached)
    entry = cache_root(cached.root / OUTPUT) / "entries" / key
    published = cached.root / OUTPUT / "one.mp4"
    os.chmod(published, 0o644)
    if damage == "rewritten":  # same size, other bytes, in place (through the shared inode)
        published.write_bytes(b"evil bytes")
    elif damage == "truncated":
        os.truncate(entry / "output", 3)
    elif damage == "output-removed":
        (entry / "output").unlink()
    elif damage == "symlink":  # a symlink planted with the right name, to a file with the right bytes
        (tmp_path / "elsewhere").write_bytes(b"good bytes")
        (entry / "output").unlink()
        (entry / "output").symlink_to(tmp_path / "elsewhere")
    else:
        (entry / "entry.json").unlink()
    drop(cached, "two.yaml", command_job(content="good bytes", marker=str(marker)))
    drain(cached)
    assert renders(marker) == 2  # rendered again: the damaged entry was not used
    assert result_of(cached, "two")["cache"] == "stored"
    assert (cached.root / OUTPUT / "two.mp4").read_bytes() == b"good bytes"
    assert cache_entries(cached) == [key]  # the new render replaced it
    drop(cached, "three.yaml", command_job(content="good bytes", marker=str(marker)))
    drain(cached)
    assert renders(marker) == 2 and result_of(cached, "three")["cache"] == "hit"


def test_eviction_keeps_the_cache_under_its_size_least_recently_used_first(cached: SpoolLayout, tmp_path: Path) -> None:
    write_spool_config(cached, {"render_cache": True, "render_cache_max_bytes": 3000})
    marker = tmp_path / "renders"

    def job(name: str, tag: str) -> None:
        drop(cached, f"{name}.yaml", command_job(size=1000, tag=tag, marker=str(marker)))
        drain(cached)

    job("a1", "a")
    job("b1", "b")
    job("c1", "c")
    assert renders(marker) == 3 and len(cache_entries(cached)) == 3
    keys = {t: result_of(cached, f"{t}1")["cache_key"] for t in "abc"}
    cache = RenderCache(cached.root / OUTPUT, 3000)
    # Last uses a, b, c (oldest first, far apart); then a hit on "a" makes it the most
    # recently used, so "b" is now the least recent.
    for i, tag in enumerate("abc"):
        os.utime(cache.entry_path(keys[tag]), (1_000_000 + i, 1_000_000 + i))
    job("a2", "a")
    assert result_of(cached, "a2")["cache"] == "hit"
    job("d1", "d")  # 4000 bytes with "d": one entry must go
    assert result_of(cached, "d1")["cache"] == "stored"
    left = set(cache_entries(cached))
    assert keys["b"] not in left and {keys["a"], keys["c"]} <= left and len(left) == 3
    assert cache.usage() == (3, 3000)
    job("b2", "b")
    assert result_of(cached, "b2")["cache"] == "stored" and renders(marker) == 5  # evicted: rendered again


def test_a_symlink_in_place_of_the_cache_is_not_followed(cached: SpoolLayout, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (cached.root / OUTPUT).mkdir(exist_ok=True)
    cache_root(cached.root / OUTPUT).symlink_to(elsewhere)
    marker = tmp_path / "renders"
    for name in ("s1", "s2"):
        drop(cached, f"{name}.yaml", command_job(marker=str(marker)))
        drain(cached)
    assert renders(marker) == 2 and os.listdir(elsewhere) == []  # rendered, nothing written there
    result = result_of(cached, "s2")
    assert result["cache"] == "refused" and "is a symlink or not a directory" in result["cache_refused"]


def test_an_output_larger_than_the_cache_is_not_stored(cached: SpoolLayout, tmp_path: Path) -> None:
    write_spool_config(cached, {"render_cache": True, "render_cache_max_bytes": 100})
    drop(cached, "big.yaml", command_job(size=1000))
    drain(cached)
    assert result_of(cached, "big")["cache"] == "miss" and cache_entries(cached) == []


def test_purge_cache_empties_it_and_the_next_job_renders(cached: SpoolLayout, tmp_path: Path) -> None:
    marker = tmp_path / "renders"
    for name in ("p1", "p2"):
        drop(cached, f"{name}.yaml", command_job(tag=name, marker=str(marker)))
    drain(cached)
    assert len(cache_entries(cached)) == 2
    dry = subprocess.run(spoolrender_cmd("purge", "--cache", "--dry-run", "--spool", str(cached.root)),
                         capture_output=True, text=True, check=True)  # fmt: skip
    assert "would remove 2 render cache entries" in dry.stdout and len(cache_entries(cached)) == 2
    done = subprocess.run(spoolrender_cmd("purge", "--cache", "--spool", str(cached.root)),
                          capture_output=True, text=True, check=True)  # fmt: skip
    assert "removed 2 render cache entries" in done.stdout and cache_entries(cached) == []
    assert (cached.root / OUTPUT / "p1.mp4").read_bytes() == b"video bytes"  # outputs stay
    drop(cached, "p3.yaml", command_job(tag="p1", marker=str(marker)))
    drain(cached)
    assert renders(marker) == 3 and result_of(cached, "p3")["cache"] == "stored"


def test_purge_help_explains_the_cache() -> None:
    out = subprocess.run(spoolrender_cmd("purge", "--help"), capture_output=True, text=True, check=True).stdout
    assert "--cache" in out and "render cache" in out


def test_purge_without_cache_still_needs_a_duration(spool: SpoolLayout) -> None:
    bare = subprocess.run(spoolrender_cmd("purge", "--spool", str(spool.root)), capture_output=True, text=True)
    assert bare.returncode == 1 and "purge needs --older-than DURATION" in bare.stderr
    mixed = subprocess.run(spoolrender_cmd("purge", "--cache", "--state", "done", "--spool", str(spool.root)),
                           capture_output=True, text=True)  # fmt: skip
    assert mixed.returncode == 1 and "--state is for finished jobs" in mixed.stderr


def test_metrics_count_hits_misses_stores_evictions_and_bytes(cached: SpoolLayout, tmp_path: Path) -> None:
    write_spool_config(cached, {"render_cache": True, "render_cache_max_bytes": 1500})
    for name, tag in (("m1", "a"), ("m2", "a"), ("m3", "b")):
        drop(cached, f"{name}.yaml", command_job(size=1000, tag=tag))
    textfile = tmp_path / "spoolrender.prom"
    runner = Runner(load_config(cached.root, environ={}, overrides={"slots": 1}), drain=True,
                    metrics_textfile=textfile, runner_name="r1")  # fmt: skip
    assert runner.run().done == 3
    values = {
        line.split(" ")[0]: float(line.split(" ")[1])
        for line in textfile.read_text().splitlines()
        if line.startswith("spoolrender_render_cache_")
    }
    # m1 stored, m2 a hit, m3 stored and evicting m1's entry (2000 bytes > 1500).
    assert values['spoolrender_render_cache_hits_total{runner="r1"}'] == 1
    assert values['spoolrender_render_cache_misses_total{runner="r1"}'] == 2
    assert values['spoolrender_render_cache_stores_total{runner="r1"}'] == 2
    assert values['spoolrender_render_cache_evictions_total{runner="r1"}'] == 1
    assert values['spoolrender_render_cache_bytes{runner="r1"}'] == 1000


# --- on, off, opt-out --------------------------------------------------------------------


def test_cache_is_off_by_default(spool: SpoolLayout, tmp_path: Path) -> None:
    marker = tmp_path / "renders"
    for name in ("x1", "x2"):
        drop(spool, f"{name}.yaml", command_job(marker=str(marker)))
        drain(spool)
    assert renders(marker) == 2
    assert "cache" not in result_of(spool, "x2") and "cache" not in result_of(spool, "x2")["details"]
    assert not cache_root(spool.root / OUTPUT).exists()


def test_a_job_opts_out_or_in(cached: SpoolLayout, spool: SpoolLayout, tmp_path: Path) -> None:
    marker = tmp_path / "renders"
    drop(cached, "in1.yaml", command_job(marker=str(marker)))
    drain(cached)
    drop(cached, "out.yaml", {**command_job(marker=str(marker)), "cache": False})
    drain(cached)
    assert renders(marker) == 2 and "cache" not in result_of(cached, "out")
    # A spool with the cache off: a job that asks uses it.
    write_spool_config(cached, {})
    drop(cached, "in2.yaml", {**command_job(marker=str(marker)), "cache": True})
    drain(cached)
    assert renders(marker) == 2 and result_of(cached, "in2")["cache"] == "hit"


def test_a_cache_field_that_is_not_a_boolean_fails_the_job(spool: SpoolLayout) -> None:
    drop(spool, "bad.yaml", {**command_job(), "cache": "yes"})
    drain(spool)
    (entry,) = entries(spool, "failed")
    failure = json.loads((spool.failed / entry / "failure.json").read_text())
    assert failure["kind"] == "invalid-job" and "field 'cache': expected true or false" in failure["reason"]


# --- identical jobs at once: real runners --------------------------------------------------


def _runner(spool: SpoolLayout, log: Path, *extra: str) -> subprocess.Popen[bytes]:
    with open(log, "ab") as out:
        return subprocess.Popen(spoolrender_cmd("run", "--spool", str(spool.root), "-v", "--slots", "1", *extra),
                                stdout=out, stderr=subprocess.STDOUT)  # fmt: skip


def _stop(*procs: subprocess.Popen[bytes]) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _stage(layout: SpoolLayout, job_id: str) -> str | None:
    for name in entries(layout, "running"):
        if name.startswith(f"{job_id}."):
            hb = read_heartbeat(layout.running / name)
            return None if hb is None else hb.stage
    return None


def test_identical_jobs_on_two_runners_render_once(cached: SpoolLayout, tmp_path: Path) -> None:
    marker, release = tmp_path / "renders", tmp_path / "release"
    job = command_job(marker=str(marker), until_file=str(release), content="once")
    drop(cached, "twin1.yaml", job)
    drop(cached, "twin2.yaml", job)
    runners = [_runner(cached, tmp_path / f"runner{i}.log") for i in (1, 2)]
    try:
        # Both claimed: one renders (held by the until_file), the other waits for it.
        wait_for(lambda: WAITING_STAGE in (_stage(cached, "twin1"), _stage(cached, "twin2")), timeout=60)
        status = subprocess.run(spoolrender_cmd("status", "--spool", str(cached.root)),
                                capture_output=True, text=True, check=True).stdout  # fmt: skip
        assert " waiting " in status  # the waiter's progress column
        release.touch()
        wait_for(lambda: len(entries(cached, "done")) == 2, timeout=60)
    finally:
        _stop(*runners)
    assert renders(marker) == 1
    results = {r["cache"]: r for r in (result_of(cached, "twin1"), result_of(cached, "twin2"))}
    assert set(results) == {"stored", "hit"}
    hit = results["hit"]
    assert hit["cache_source"]["id"] == results["stored"]["id"] and hit["cache_waited_seconds"] > 0
    hit_log = (cached.done / next(e for e in entries(cached, "done") if e.startswith(f"{hit['id']}."))
               / "run-0001.log").read_text()  # fmt: skip
    assert f"waiting for job {results['stored']['id']}" in hit_log and "render cache hit" in hit_log
    assert (cached.root / OUTPUT / "twin1.mp4").read_bytes() == (cached.root / OUTPUT / "twin2.mp4").read_bytes()


def test_a_waiter_renders_itself_when_the_first_render_fails(cached: SpoolLayout, tmp_path: Path) -> None:
    release, marker = tmp_path / "release", tmp_path / "renders"
    # The holder fails for good (exit 65) once released; the waiter, same inputs but its
    # own fallback-free attempt, must then render (and fail the same way: same inputs).
    job = {**command_job(until_file=str(release), exit=65, marker=str(marker)), "max_attempts": 1}
    drop(cached, "f1.yaml", job)
    drop(cached, "f2.yaml", job)
    runners = [_runner(cached, tmp_path / f"runner{i}.log") for i in (1, 2)]
    try:
        wait_for(lambda: WAITING_STAGE in (_stage(cached, "f1"), _stage(cached, "f2")), timeout=60)
        release.touch()
        wait_for(lambda: len(entries(cached, "failed")) == 2, timeout=60)
    finally:
        _stop(*runners)
    logs = [(cached.failed / e / "run-0001.log").read_text() for e in entries(cached, "failed")]
    assert all("failing as asked" in text for text in logs)  # both rendered: the waiter too
    # The waiter saw the holder's claim released ("left no entry") or, when it looked between
    # the holder's decision and its release, the holder's run ended ("is gone"): either way
    # it rendered itself, and said why.
    reasons = ("left no entry (its render failed or was not stored); rendering here",
               "is gone (its run ended or its runner died); rendering here")  # fmt: skip
    assert any(reason in text for text in logs for reason in reasons), logs


def test_a_waiter_whose_holder_is_killed_takes_over(cached: SpoolLayout, tmp_path: Path) -> None:
    release, marker, pidfile = tmp_path / "release", tmp_path / "renders", tmp_path / "render.pid"
    job = command_job(until_file=str(release), marker=str(marker), pidfile=str(pidfile), content="survivor")
    drop(cached, "h1.yaml", job)
    holder = _runner(cached, tmp_path / "holder.log")
    waiter = None
    try:
        wait_for(pidfile.exists, timeout=60)
        holder_render = int(pidfile.read_text())
        pidfile.unlink()
        drop(cached, "h2.yaml", job)
        waiter = _runner(cached, tmp_path / "waiter.log")
        wait_for(lambda: _stage(cached, "h2") == WAITING_STAGE, timeout=60)
        holder.kill()  # SIGKILL: no release, its running/ entry and in-flight claim stay
        holder.wait()
        os.kill(holder_render, signal.SIGKILL)  # its orphaned render too (its own session)
        # Same host: the dead holder's lock is free, so the waiter takes over and renders.
        wait_for(pidfile.exists, timeout=60)
        release.touch()
        wait_for(lambda: len(entries(cached, "done")) == 2, timeout=90)
    finally:
        _stop(holder, *([waiter] if waiter else []))
    assert renders(marker) == 1
    assert result_of(cached, "h2")["cache"] == "stored"
    h2_log = cached.done / next(e for e in entries(cached, "done") if e.startswith("h2.")) / "run-0001.log"
    assert "which rendered the same inputs, is gone" in h2_log.read_text()
    # The killed job was recovered and retried: a hit on the waiter's render.
    h1 = result_of(cached, "h1")
    assert h1["cache"] == "hit" and h1["cache_source"]["id"] == "h2"
    assert [r["outcome"] for r in h1["runs"]][-1] == "publishing"


def test_a_waiter_obeys_cancel(cached: SpoolLayout, tmp_path: Path) -> None:
    release = tmp_path / "release"
    job = command_job(until_file=str(release))
    drop(cached, "c1.yaml", job)
    runners = [_runner(cached, tmp_path / f"runner{i}.log") for i in (1, 2)]
    try:
        drop(cached, "c2.yaml", job)
        wait_for(lambda: WAITING_STAGE in (_stage(cached, "c1"), _stage(cached, "c2")), timeout=60)
        waiting = "c1" if _stage(cached, "c1") == WAITING_STAGE else "c2"
        subprocess.run(spoolrender_cmd("cancel", waiting, "--spool", str(cached.root)), check=True,
                       capture_output=True)  # fmt: skip
        wait_for(lambda: len(entries(cached, "failed")) == 1, timeout=60)
        (entry,) = entries(cached, "failed")
        assert entry.startswith(f"{waiting}.")
        failure = json.loads((cached.failed / entry / "failure.json").read_text())
        assert failure["kind"] == "cancelled"
        release.touch()
        wait_for(lambda: len(entries(cached, "done")) == 1, timeout=60)
    finally:
        _stop(*runners)


def _holder_then_waiter(
    cached: SpoolLayout, tmp_path: Path, waiter_job: dict[str, Any], *waiter_args: str
) -> tuple[subprocess.Popen[bytes], subprocess.Popen[bytes], Path]:
    """Runner A rendering job ``w1`` (held until tmp_path/release exists), then runner B
    with the identical job ``w2`` waiting for it. Returns (A, B, the release file)."""
    release, pidfile = tmp_path / "release", tmp_path / "render.pid"
    job = command_job(until_file=str(release), pidfile=str(pidfile))
    drop(cached, "w1.yaml", job)
    holder = _runner(cached, tmp_path / "holder.log")
    wait_for(pidfile.exists, timeout=60)
    drop(cached, "w2.yaml", {**job, **waiter_job})
    waiter = _runner(cached, tmp_path / "waiter.log", *waiter_args)
    wait_for(lambda: _stage(cached, "w2") == WAITING_STAGE, timeout=60)
    return holder, waiter, release


def test_a_waiter_keeps_its_heartbeat_and_times_out(cached: SpoolLayout, tmp_path: Path) -> None:
    holder, waiter, release = _holder_then_waiter(cached, tmp_path, {"timeout": 3, "max_attempts": 1})
    try:
        (name,) = [n for n in entries(cached, "running") if n.startswith("w2.")]
        first = read_heartbeat(cached.running / name)
        assert first is not None
        wait_for(lambda: (hb := read_heartbeat(cached.running / name)) is not None and hb.counter > first.counter + 2)
        wait_for(lambda: len(entries(cached, "failed")) == 1, timeout=60)
        (entry,) = entries(cached, "failed")
        failure = json.loads((cached.failed / entry / "failure.json").read_text())
        assert entry.startswith("w2.") and failure["kind"] == "timeout"
        assert [n for n in entries(cached, "running") if n.startswith("w1.")]  # the holder renders on
        release.touch()
        wait_for(lambda: len(entries(cached, "done")) == 1, timeout=60)
    finally:
        _stop(holder, waiter)


def test_a_waiter_stopped_by_shutdown_is_requeued_without_using_an_attempt(cached: SpoolLayout, tmp_path: Path) -> None:
    holder, waiter, release = _holder_then_waiter(cached, tmp_path, {}, "--set", "grace_seconds=0.5")
    try:
        waiter.send_signal(signal.SIGTERM)
        assert waiter.wait(timeout=60) == 0
        (entry,) = entries(cached, "retry")
        runs = [json.loads(p.read_text()) for p in sorted((cached.retry / entry).glob("run-*.json"))]
        assert [r["outcome"] for r in runs] == ["requeue"] and runs[0]["attempt"] is None
        release.touch()
        # The holder's runner renders w1, then takes the requeued w2: a hit on w1's render.
        wait_for(lambda: len(entries(cached, "done")) == 2, timeout=60)
    finally:
        _stop(holder, waiter)
    assert result_of(cached, "w2")["cache"] == "hit" and result_of(cached, "w2")["attempts"] == 1


@pytest.mark.skipif(not os.access(CHROMIUM, os.X_OK), reason=f"{CHROMIUM} missing (scripts/setup.sh installs it)")
def test_the_job_page_says_a_job_was_a_hit(cached: SpoolLayout, tmp_path: Path) -> None:
    for name in ("src", "copy"):
        drop(cached, f"{name}.yaml", command_job(content="same"))
        drain(cached)
    with running_server(cached.root, tmp_path / "serve.log", "--poll", "0.25") as server, Chromium() as browser:
        page = browser.new_page(server.url + "job?id=copy")
        page.wait_for("document.body.dataset.ready === '1' && document.querySelector('#facts dd') !== null")
        facts = page.evaluate(
            "Object.fromEntries([...document.querySelectorAll('#facts dt')]"
            ".map(dt => [dt.textContent, dt.nextElementSibling.textContent]))"
        )
        assert facts["render cache"].startswith("hit: published from the render of job src")
        page = browser.new_page(server.url + "job?id=src")
        page.wait_for("document.body.dataset.ready === '1' && document.querySelector('#facts dd') !== null")
        assert "miss: rendered and stored" in page.evaluate("document.querySelector('#facts').textContent")
        assert page.errors() == []


def test_a_holder_on_another_host_is_live_while_its_heartbeat_moves(spool: SpoolLayout, tmp_path: Path) -> None:
    """The cross-host rule (no lock to probe, no shared clock): a holder whose heartbeat
    stays unchanged for the lease on the waiter's own monotonic clock is dead."""
    clock = ManualClock()
    flight = InFlight(tmp_path / "cache", spool, 10.0, LivenessTracker(clock))
    job = "j.aaaaaaaaaaaa.bbbbbbbbbbbb"
    (spool.running / job).mkdir()

    def beat(counter: int) -> None:
        hb = Heartbeat(host="another-host", pid=1, token="bbbbbbbbbbbb", run=1, counter=counter)
        (spool.running / job / "heartbeat").write_bytes(hb.to_json())

    holder = Holder(1, job, "bbbbbbbbbbbb", "another-host", 1, "j", "aaaaaaaaaaaa", 1)
    assert flight.try_hold("k", 1, holder) and not flight.try_hold("k", 1, holder)  # exactly one wins a number
    assert flight.current("k") == holder
    beat(1)
    for counter in range(2, 6):  # beating: live however long it takes
        clock.advance(8)
        beat(counter)
        assert flight.alive(holder)
    clock.advance(9.9)
    assert flight.alive(holder)  # silent for less than the lease
    clock.advance(0.2)
    assert not flight.alive(holder)  # silent for the lease: dead, a waiter takes over
    (spool.running / job / "heartbeat").unlink()
    shutil.rmtree(spool.running / job)
    assert not flight.alive(holder)  # its run left running/
    assert flight.clear_ended("k") == 1 and flight.current("k") is None
