"""The oracle (issue 22): a project renders through spoolrender exactly as its own
``npx remotion render`` / ``npx remotion still`` renders it.

Each case writes one project shape of tests/support/conformance.py into a temp dir
(TypeScript and JavaScript starters, public/ assets, a <Still>, an audiogram whose
duration comes from calculateMetadata, an entry point nested as in a Next.js app with a
webpack override, the mixed-version install of ``scripts/setup.sh --test``), drains its
jobs through one ``spoolrender run --drain`` (one bundle, one warm worker for all of a
project's renders), renders the same compositions with the project's CLI and Debian's
Chromium, and compares: streams, sizes, frame counts, durations, audio sample counts, and
a PSNR of at least 60 dB for every frame and the audio (identical is inf).

Also Tailwind (``@remotion/tailwind-v4``'s enableTailwind as the config's webpack
override), a React Three Fiber scene (``@remotion/three``) and a Skia one
(``@remotion/skia``, CanvasKit), both with ``gl: swangle`` in remotion.config.ts, from one
tree that ``scripts/setup.sh --test`` installs at 4.0.527 (neither @remotion/tailwind-v4 nor
@remotion/three has a 4.0.529; @remotion/skia stops at 4.0.508). Each of those also checks
a pixel of the CLI's frame 0, so an unstyled card or a blank canvas fails though both
sides would agree. What ``gl: angle`` does (no context here): tests/integration/test_webgl_rule.py.
zod schemas: issue 22 item 2's tests.

Time: every CLI render bundles the project again (webpack's cache in the shared
node_modules keeps that short after the first run), so projects are tiny (a second of
video or less, at most 160x90). Measured 2026-12-01 on a 2-core host shared at load
40-95: the four cases took 547 + 1318 + 715 + 770 s of wall time but only about 340 s of
CPU (user + sys of everything they ran): a few minutes of an idle 2-core CI host.
Tailwind, React Three Fiber and Skia, measured 2026-12-02 at load 25-45: Tailwind 286 s
and R3F 958 s of wall time (with a first Skia run that the drain's timeout cut short: its
bundle, retried, outlasted spoolrender's 600 s bundle limit at load 45) about 206 s of CPU;
Skia alone at load 26-33: 583 s of wall time, 74 s of CPU. The bundles of three.js and
CanvasKit are most of it. Their tree's install (scripts/setup.sh
--test, empty npm cache): 51 s, 757 MB (@shopify/react-native-skia's native libraries 440).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from support.checkout import REMOTION_MARKS
from support.conformance import REMOTION_MODULES, SHAPES, Shape, differences, pixel_problem, run_cli
from support.processes import spoolrender_cmd
from support.spool_jobs import drop, entries, write_spool_config

from spoolrender.spool.layout import init_spool

pytestmark = [*REMOTION_MARKS, pytest.mark.slow]
DRAIN_TIMEOUT_S = 900.0  # a bundle and a few renders on a loaded host


def _param(shape: Shape) -> object:
    marks = []
    if shape.node_modules != REMOTION_MODULES:  # a tree of scripts/setup.sh --test's
        missing = not (shape.node_modules / ".spoolrender-installed").is_file()
        reason = f"{shape.node_modules.parent.name} missing: run scripts/setup.sh --test"
        marks.append(pytest.mark.skipif(missing, reason=reason))
    return pytest.param(shape, id=shape.name, marks=marks)


@pytest.mark.parametrize("shape", [_param(s) for s in SHAPES])
def test_spoolrender_renders_what_the_projects_own_cli_renders(shape: Shape, tmp_path: Path) -> None:
    project = shape.write(tmp_path)
    spool = init_spool(tmp_path / "spool")
    write_spool_config(spool, {"remotion_project": str(project), "cache_dir": str(tmp_path / "cache"), "slots": 1})
    for render in shape.renders:
        drop(spool, f"{Path(render.output).stem}.yaml", render.job())
    drained = subprocess.run(spoolrender_cmd("run", "--drain", "-v", "--spool", str(spool.root)),
                             capture_output=True, text=True, timeout=DRAIN_TIMEOUT_S, check=False)  # fmt: skip
    assert drained.returncode == 0, drained.stderr[-4000:]
    assert len(entries(spool, "done")) == len(shape.renders), drained.stderr[-4000:]

    cli = tmp_path / "cli"
    cli.mkdir()
    problems = []
    for render in shape.renders:
        run_cli(project, render, cli / render.output)
        problems += [f"{render.composition}: {p}" for p in [pixel_problem(cli / render.output, render)] if p]
        problems += [f"{render.composition}: {p}" for p in differences(cli / render.output, spool.root / "output" /
                                                                                   render.output)]  # fmt: skip
    assert problems == []
