"""Remotion projects that are not this repository's, in the shapes users have them.

Each test writes its project into a temp dir (remotion/ stays the sample project):
the default layout with public/ assets and audio, a remotion.config.ts that moves the
entry point and the public dir, overrides webpack (an alias, a CSS pre-loader, a raw-text
rule) and sets a render default, a starter-shaped project on another Remotion 4 version
(installed by `scripts/setup.sh --test`), and projects that lack packages.

The projects' node_modules are symlinks to installed trees (remotion/node_modules, or
.cache/remotion-<version>/node_modules), as a monorepo or a shared install would have
them: Remotion is resolved from the project directory either way. The renders are real
(Node, Chromium, ffmpeg); outputs are checked with ffprobe and by the colour of pixels.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import time
import zipfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.checkout import REMOTION, REMOTION_MARKS, REPO
from support.dist import build_dist, build_traces
from support.processes import spoolrender_cmd
from support.remotion_projects import (
    OTHER,
    OTHER_VERSION,
    drain,
    first_frame,
    make_project,
    near,
    pixel,
    png,
    probe,
    project_spool,
    record,
    remotion_deps,
    tone,
)
from support.spool_jobs import drop, entries

from spoolrender.spool.layout import SpoolLayout

pytestmark = REMOTION_MARKS


@pytest.fixture
def bundle_cache(tmp_path: Path) -> Path:
    """A test's own bundle cache. Not the module's: no two tests bundle the same project (the
    bundle key holds each source file's mtime, and every test writes its project anew), so a
    shared cache saved nothing, and as a module fixture it kept all seven tests, several
    minutes each, on one pytest-xdist worker (tests/conftest.py's groups): the run's long pole."""
    path = tmp_path / "bundle-cache"
    path.mkdir()
    return path


RED, GREEN, BLUE, YELLOW = (255, 0, 0), (0, 255, 0), (0, 0, 255), (255, 255, 0)

DEFAULT_LAYOUT: dict[str, str | bytes] = {
    "src/index.ts": "import {registerRoot} from 'remotion';\nimport {Root} from './Root';\nregisterRoot(Root);\n",
    "src/Root.tsx": """
import {AbsoluteFill, Audio, Composition, Img, staticFile} from 'remotion';
const Picture = () => (
  <AbsoluteFill><Img src={staticFile('red.png')} style={{width: '100%', height: '100%'}} /></AbsoluteFill>
);
const Sound = () => (
  <AbsoluteFill style={{background: 'white'}}><Audio src={staticFile('tone.wav')} /></AbsoluteFill>
);
export const Root = () => (
  <>
    <Composition id="Picture" component={Picture} width={64} height={64} fps={30} durationInFrames={3} />
    <Composition id="Sound" component={Sound} width={64} height={64} fps={30} durationInFrames={15} />
  </>
);
""",
    "public/red.png": png(RED),
}


def test_default_layout_with_public_assets_and_audio(tmp_path: Path, spool: SpoolLayout, bundle_cache: Path) -> None:
    project = make_project(tmp_path / "hello", DEFAULT_LAYOUT, REMOTION / "node_modules", remotion_deps("4.0.529"))
    tone(project / "public" / "tone.wav")
    project_spool(spool, project, bundle_cache)
    drop(spool, "picture.yaml", {"composition": "Picture", "output": "picture.mp4"})
    drop(spool, "sound.yaml", {"composition": "Sound", "output": "sound.mp4"})
    drain(spool)
    out = spool.root / "output"
    # public/red.png reached the frame through staticFile().
    assert near(pixel(first_frame(out / "picture.mp4", 64, 64), 64, 32, 32), RED)
    sound = probe(out / "sound.mp4")
    assert sorted(s["codec_type"] for s in sound["streams"]) == ["audio", "video"]
    assert abs(float(sound["format"]["duration"]) - 0.5) < 0.1
    # Nothing was added to the user's project.
    assert sorted(p.name for p in project.iterdir()) == ["node_modules", "package.json", "public", "src"]


CONFIGURED: dict[str, str | bytes] = {
    # Remotion's CLI loads a .ts config only next to a tsconfig.json.
    "tsconfig.json": json.dumps(
        {
            "compilerOptions": {
                "jsx": "react-jsx",
                "module": "es2022",
                "target": "es2022",
                "moduleResolution": "bundler",
                "skipLibCheck": True,
            }
        }
    ),
    "remotion.config.ts": """
import path from 'node:path';
import {Config} from '@remotion/cli/config';

Config.setEntryPoint('./video/main.tsx');
Config.setPublicDir('./assets');
Config.setScale(0.5);
Config.overrideWebpackConfig((config) => ({
  ...config,
  resolve: {...config.resolve, alias: {...(config.resolve?.alias ?? {}), '@brand': path.resolve('brand')}},
  module: {
    ...config.module,
    rules: [
      ...(config.module?.rules ?? []),
      {test: /\\.css$/, enforce: 'pre', use: [path.resolve('loaders/brand-css-loader.cjs')]},
      {test: /\\.txt$/, type: 'asset/source'},
    ],
  },
}));
""",
    # What the webpack override adds: without it, none of these resolve or apply.
    "loaders/brand-css-loader.cjs": "module.exports = (source) => source.replace(/BRAND_BLUE/g, 'rgb(0, 0, 255)');\n",
    "brand/colors.ts": "export const brandRed = 'rgb(255, 0, 0)';\n",
    "video/accent.txt": "rgb(0, 255, 0)",
    "video/frame.css": ".top-left { background: BRAND_BLUE; }\n",
    "video/main.tsx": """
import {AbsoluteFill, Composition, Img, registerRoot, staticFile} from 'remotion';
import {brandRed} from '@brand/colors';
import accent from './accent.txt';
import './frame.css';
const quarter = {position: 'absolute', width: '50%', height: '50%'} as const;
const Brand = () => (
  <AbsoluteFill style={{background: 'black'}}>
    <div className="top-left" style={{...quarter, left: 0, top: 0}} />
    <div style={{...quarter, right: 0, top: 0, background: brandRed}} />
    <div style={{...quarter, left: 0, bottom: 0, background: accent}} />
    <Img src={staticFile('yellow.png')} style={{...quarter, right: 0, bottom: 0}} />
  </AbsoluteFill>
);
registerRoot(() => <Composition id="Brand" component={Brand} width={200} height={100} fps={30} durationInFrames={3} />);
""",
    "assets/yellow.png": png(YELLOW),
    # The default entry point, which the config replaces: it has no Brand composition.
    "src/index.ts": "import {registerRoot} from 'remotion';\nregisterRoot(() => null);\n",
}


def quadrants(path: Path, width: int, height: int) -> list[tuple[int, int, int]]:
    frame = first_frame(path, width, height)
    return [pixel(frame, width, x * width // 4, y * height // 4) for y in (1, 3) for x in (1, 3)]


def test_remotion_config_sets_entry_point_webpack_public_dir_and_render_defaults(
    tmp_path: Path, spool: SpoolLayout, bundle_cache: Path
) -> None:
    project = make_project(tmp_path / "configured", CONFIGURED, REMOTION / "node_modules", remotion_deps("4.0.529"))
    project_spool(spool, project, bundle_cache)
    drop(spool, "half.yaml", {"composition": "Brand", "output": "half.mp4"})
    drop(spool, "full.yaml", {"composition": "Brand", "output": "full.mp4", "settings": {"scale": 1}})
    drain(spool)
    out = spool.root / "output"
    # Config.setScale(0.5) is a render default; the job's own setting wins over it.
    assert [(s["width"], s["height"]) for s in probe(out / "half.mp4")["streams"]] == [(100, 50)]
    assert [(s["width"], s["height"]) for s in probe(out / "full.mp4")["streams"]] == [(200, 100)]
    # CSS through the override's pre-loader, the @brand alias, the .txt rule, assets/.
    colours = quadrants(out / "full.mp4", 200, 100)
    assert all(near(c, e) for c, e in zip(colours, [BLUE, RED, GREEN, YELLOW], strict=True)), colours

    # The config file is part of the bundle key: a change rebundles and takes effect.
    config = project / "remotion.config.ts"
    config.write_text(config.read_text().replace("setScale(0.5)", "setScale(0.4)"))
    drop(spool, "quarter.yaml", {"composition": "Brand", "output": "quarter.mp4"})
    assert "bundling" in drain(spool)
    assert [(s["width"], s["height"]) for s in probe(out / "quarter.mp4")["streams"]] == [(80, 40)]


STARTER = {
    "src/index.ts": "import {registerRoot} from 'remotion';\nimport {Root} from './Root';\nregisterRoot(Root);\n",
    "src/Root.tsx": """
import {AbsoluteFill, Composition} from 'remotion';
const Hello = () => <AbsoluteFill style={{background: 'rgb(0, 255, 0)'}} />;
export const Root = () => (
  <Composition id="HelloWorld" component={Hello} width={64} height={64} fps={30} durationInFrames={5} />
);
""",
}


@pytest.mark.skipif(
    not (OTHER / "node_modules" / ".spoolrender-installed").is_file(),
    reason=f"Remotion {OTHER_VERSION} missing: run scripts/setup.sh --test",
)
def test_project_on_another_remotion_version(tmp_path: Path, spool: SpoolLayout, bundle_cache: Path) -> None:
    # Shaped like Remotion's starters: remotion and @remotion/cli listed, nothing else.
    project = make_project(tmp_path / "starter", STARTER, OTHER / "node_modules", remotion_deps(OTHER_VERSION))
    project_spool(spool, project, bundle_cache)
    drop(spool, "hello.yaml", {"composition": "HelloWorld", "output": "hello.mp4"})
    drain(spool)
    assert near(pixel(first_frame(spool.root / "output" / "hello.mp4", 64, 64), 64, 32, 32), GREEN)
    (entry,) = entries(spool, "done")
    log = (spool.done / entry / "run-0001.log").read_text()
    assert f'"remotionVersion": "{OTHER_VERSION}"' in log  # the project's version, not remotion/'s


MIXED = REPO / ".cache" / "remotion-mixed"


@pytest.mark.skipif(
    not (MIXED / "node_modules" / ".spoolrender-installed").is_file(),
    reason="mixed Remotion versions missing: run scripts/setup.sh --test",
)
def test_mixed_remotion_versions_render_with_the_clis_warning(
    tmp_path: Path, spool: SpoolLayout, bundle_cache: Path
) -> None:
    # remotion 4.0.541 with @remotion/* 4.0.529, as npm installs a starter today: the
    # project's own `remotion render` warns and renders, so spoolrender does too.
    deps = {"remotion": "^4.0.0", "@remotion/cli": "^4.0.0", "react": "19.2.0", "react-dom": "19.2.0"}
    project = make_project(tmp_path / "mixed", STARTER, MIXED / "node_modules", deps)
    project_spool(spool, project, bundle_cache)
    drop(spool, "mixed.yaml", {"composition": "HelloWorld", "output": "mixed.mp4"})
    # A long-running runner: its beacon tells `status` what its runs went ahead despite.
    runner = subprocess.Popen(spoolrender_cmd("run", "--spool", str(spool.root)), stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        status = wait_for_runner_warning(spool, runner)
        text = subprocess.run(spoolrender_cmd("status", "--spool", str(spool.root)), capture_output=True,
                              text=True, check=True).stdout  # fmt: skip
    finally:
        runner.terminate()
        runner.wait(timeout=120)
    assert near(pixel(first_frame(spool.root / "output" / "mixed.mp4", 64, 64), 64, 32, 32), GREEN)
    (warning,) = record(spool, "done", "mixed", "run-0001.json")["details"]["warnings"]
    installed = sorted(
        p.parent.name for p in (MIXED / "node_modules/@remotion").glob("*/package.json")
        if not p.parent.name.startswith("compositor-")
    )  # fmt: skip
    assert warning.startswith("Version mismatch (Remotion's CLI warns the same and renders): remotion 4.0.541; ")
    # The fix names every Remotion package at a version installed (so it exists), never 4.0.541.
    fix = " ".join(f"@remotion/{name}@4.0.529" for name in installed) + " remotion@4.0.529"
    assert warning.endswith(f"run `npm install --save-exact {fix}`"), warning
    shown = subprocess.run(spoolrender_cmd("show", "mixed", "--spool", str(spool.root)), capture_output=True,
                           text=True, check=True).stdout  # fmt: skip
    assert f"    warning: {warning}" in shown
    (told,) = status["runners"][0]["warnings"]
    assert told == {"message": warning, "job": "mixed"}
    assert f"WARNING host {status['runners'][0]['host']}: {warning} (job mixed)" in text


def wait_for_runner_warning(spool: SpoolLayout, runner: subprocess.Popen[bytes], timeout: float = 900) -> Any:
    """`status --json` once a runner's beacon has a warning (rendering takes minutes here).

    The runner records a run's warnings when the run ends: until the job is in done/ or failed/
    (a directory listing), no `status` process is started: each is a Python start (0.15 s of
    CPU, 1-2 s of wall time at load), and one every 0.5 s through a render of minutes took
    CPU from every other worker."""
    deadline = time.monotonic() + timeout
    while (
        time.monotonic() < deadline and runner.poll() is None and not entries(spool, "done") + entries(spool, "failed")
    ):
        time.sleep(0.2)  # a poll interval, not a wait for a condition
    while time.monotonic() < deadline and runner.poll() is None:
        status = json.loads(subprocess.run(spoolrender_cmd("status", "--json", "--spool", str(spool.root)),
                                           capture_output=True, check=True).stdout)  # fmt: skip
        if any(r.get("warnings") for r in status["runners"]):
            return status
        time.sleep(0.5)  # a poll interval, not a wait for a condition
    raise AssertionError(f"no runner warning in status within {timeout} s (runner exit {runner.poll()})")


WEBGL = {
    **STARTER,
    "src/Root.tsx": """
import {useEffect, useState} from 'react';
import {AbsoluteFill, cancelRender, Composition, continueRender, delayRender} from 'remotion';
// As Three.js does: no context, no scene.
const Scene = () => {
  const gl = document.createElement('canvas').getContext('webgl');
  if (!gl) throw new Error('Error creating WebGL context.');
  return <AbsoluteFill style={{background: 'rgb(0, 255, 0)'}} />;
};
// A font stylesheet from a host that cannot be reached (port 9: refused at once).
const Fetching = () => {
  const [handle] = useState(() => delayRender('font'));
  useEffect(() => {
    fetch('http://127.0.0.1:9/fonts.css').then(() => continueRender(handle), (err) => cancelRender(err));
  }, [handle]);
  return <AbsoluteFill style={{background: 'white'}} />;
};
export const Root = () => (
  <>
    <Composition id="Scene" component={Scene} width={64} height={64} fps={30} durationInFrames={2} />
    <Composition id="Fetching" component={Fetching} width={64} height={64} fps={30} durationInFrames={2} />
  </>
);
""",
}


def test_a_missing_webgl_context_fails_for_good_naming_swangle_and_a_failed_fetch_its_url(
    tmp_path: Path, spool: SpoolLayout, bundle_cache: Path
) -> None:
    # Skia's and Three's starters set gl: angle, which has no WebGL context on this
    # headless host (the CLI fails the same way); swangle renders.
    project = make_project(tmp_path / "webgl", WEBGL, REMOTION / "node_modules", remotion_deps("4.0.529"))
    project_spool(spool, project, bundle_cache)
    for gl in ("angle", "swangle"):
        job = {"composition": "Scene", "output": f"{gl}.png", "still": True, "settings": {"gl": gl}}
        drop(spool, f"{gl}.yaml", job)
    # Beside them (the same bundle): a failed fetch names what it asked for.
    drop(spool, "fetch.yaml", {"composition": "Fetching", "output": "fetch.png", "still": True, "max_attempts": 1})
    drain(spool, expect=3)
    fetched = failure(spool, "fetch")["reason"]
    assert "Failed to fetch" in fetched and "http://127.0.0.1:9/fonts.css" in fetched, fetched
    angle = failure(spool, "angle")
    assert angle["kind"] == "no-webgl" and angle["attempts"] == 1, angle
    assert angle["reason"].startswith("No WebGL context with gl: angle on this host (Error creating WebGL context.")
    assert angle["reason"].endswith("set `settings: {gl: swangle}` in the job file")
    assert (spool.root / "output" / "swangle.png").is_file()


def failure(spool: SpoolLayout, prefix: str) -> dict[str, Any]:
    return record(spool, "failed", prefix, "failure.json")


def test_projects_without_remotion_packages_fail_for_good_with_the_install_command(
    tmp_path: Path, spool: SpoolLayout, bundle_cache: Path
) -> None:
    # No node_modules at all: the first job fails permanently, the drain says so (exit 3).
    bare = make_project(tmp_path / "bare", STARTER, None, remotion_deps("4.0.529"))
    (bare / "package-lock.json").write_text("{}")
    project_spool(spool, bare, bundle_cache)
    drop(spool, "first.yaml", {"composition": "HelloWorld"})
    drain(spool, expect=3)
    first = failure(spool, "first")
    assert first["kind"] == "setup" and first["attempts"] == 1
    assert first["reason"] == f"Remotion is not installed in {bare}: its node_modules is missing; run `npm ci` there"

    # remotion installed, but neither the renderer nor the bundler (nor the CLI).
    partial = make_project(tmp_path / "partial", STARTER, None, {"remotion": "4.0.529"})
    (partial / "node_modules").mkdir()
    for name in ("remotion", "react", "react-dom"):
        (partial / "node_modules" / name).symlink_to(REMOTION / "node_modules" / name)
    project_spool(spool, partial, bundle_cache)
    drop(spool, "second.yaml", {"composition": "HelloWorld"})
    drain(spool, expect=3)
    second = failure(spool, "second")
    assert second["kind"] == "setup" and second["attempts"] == 1
    assert second["reason"] == (
        f"@remotion/renderer and @remotion/bundler are not installed in the Remotion project {partial} "
        "(Remotion 4.0.529): run `npm install --save-exact @remotion/renderer@4.0.529 @remotion/bundler@4.0.529` there"
    )

    # A remotion.config.ts but no @remotion/cli to read it: refused, not silently ignored.
    no_cli = make_project(tmp_path / "no-cli", {**STARTER, "remotion.config.ts": "export {};\n"}, None, {})
    (no_cli / "node_modules" / "@remotion").mkdir(parents=True)
    for name in ("remotion", "react", "react-dom", "@remotion/renderer", "@remotion/bundler"):
        (no_cli / "node_modules" / name).symlink_to(REMOTION / "node_modules" / name)
    project_spool(spool, no_cli, bundle_cache)
    drop(spool, "third.yaml", {"composition": "HelloWorld"})
    drain(spool, expect=3)
    third = failure(spool, "third")
    assert third["kind"] == "setup" and third["attempts"] == 1
    assert third["reason"] == (
        f"{no_cli} has a remotion.config.ts, which only Remotion's CLI reads: run "
        "`npm install --save-exact @remotion/cli@4.0.529` there so that spoolrender bundles and renders with it"
    )
    assert entries(spool, "retry") == []


WORKER_FILES = {p.name for p in (REPO / "spoolrender" / "renderers" / "remotion" / "worker").glob("*.mjs")}


@pytest.mark.slow
def test_the_wheel_renders_a_users_project_outside_the_repository(tmp_path: Path, bundle_cache: Path) -> None:
    """`python -m build`, then a fresh venv outside the repository with only the wheel
    installed (pip fetches its dependencies), rendering from a project made in a temp dir."""
    dist = tmp_path / "dist"
    traces = build_traces()
    build_dist(dist)
    assert build_traces() == traces  # built from a copy: a concurrent build shares nothing
    (wheel,) = dist.glob("spoolrender-*.whl")
    (sdist,) = dist.glob("spoolrender-*.tar.gz")
    with zipfile.ZipFile(wheel) as whl:
        assert {
            Path(n).name for n in whl.namelist() if n.startswith("spoolrender/renderers/remotion/worker/")
        } == WORKER_FILES
    with tarfile.open(sdist) as tar:
        assert {Path(n).name for n in tar.getnames() if "/spoolrender/renderers/remotion/worker/" in n} == WORKER_FILES

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    subprocess.run([str(venv / "bin/pip"), "install", "-q", str(wheel)], check=True, capture_output=True,
                   timeout=600)  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    where = subprocess.run([str(venv / "bin/python"), "-c", "import spoolrender; print(spoolrender.__file__)"],
                           cwd=tmp_path, env=env, capture_output=True, text=True, check=True).stdout  # fmt: skip
    assert where.startswith(str(venv))  # the installed copy, not the repository's

    project = make_project(tmp_path / "my-video", STARTER, REMOTION / "node_modules", remotion_deps("4.0.529"))
    spool = tmp_path / "spool"
    cli = str(venv / "bin/spoolrender")
    subprocess.run([cli, "init", str(spool)], cwd=tmp_path, env=env, check=True, capture_output=True)
    config = {"remotion_project": str(project), "cache_dir": str(bundle_cache), "slots": 1}
    (spool / "spoolrender.yaml").write_text(yaml.safe_dump(config))
    job = tmp_path / "hello.yaml"
    job.write_text(yaml.safe_dump({"composition": "HelloWorld", "output": "hello.mp4"}))
    subprocess.run([cli, "submit", "--spool", str(spool), str(job)], cwd=tmp_path, env=env, check=True,
                   capture_output=True)  # fmt: skip
    drained = subprocess.run([cli, "run", "--drain", "--spool", str(spool)], cwd=tmp_path, env=env,
                             capture_output=True, text=True, timeout=600, check=False)  # fmt: skip
    assert drained.returncode == 0, drained.stderr
    assert near(pixel(first_frame(spool / "output" / "hello.mp4", 64, 64), 64, 32, 32), GREEN)
