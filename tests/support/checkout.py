"""Where the tests find things in the checkout: the repository, the render programs of
tests/programs, the sample Remotion project; and the marks of a test that renders with it."""

from __future__ import annotations

from pathlib import Path

import pytest

PROGRAMS = Path(__file__).parents[1] / "programs"
RENDER_PROPS = PROGRAMS / "render_props.py"
REPO = Path(__file__).resolve().parents[2]
REMOTION = REPO / "remotion"  # the sample Remotion project (scripts/setup.sh installs its packages)
FFPROBE = REMOTION / "node_modules/@remotion/compositor-linux-x64-gnu/ffprobe"
# `pytestmark = REMOTION_MARKS` in a module that renders with Remotion: selected by `-m
# remotion`, and skipped (with what to run) where the sample project's npm packages or
# Debian's Chromium are missing.
REMOTION_MARKS = [
    pytest.mark.remotion,
    pytest.mark.skipif(
        not (REMOTION / "node_modules" / "@remotion" / "renderer").is_dir(),
        reason="remotion/node_modules missing: run scripts/setup.sh",
    ),
    pytest.mark.skipif(not Path("/usr/bin/chromium").exists(), reason="Debian chromium missing: run scripts/setup.sh"),
]
