"""A spool with real videos in it: rendered by Remotion's own ffmpeg through the command renderer."""

from __future__ import annotations

import subprocess
from pathlib import Path

from spoolrender.spool.layout import SpoolLayout, init_spool
from support.processes import spoolrender_cmd
from support.spool_jobs import FAST, command_job, drop, entries, write_spool_config

REMOTION = Path(__file__).resolve().parents[3] / "remotion"  # the repository's Remotion project
FFMPEG = next(iter(sorted((REMOTION / "node_modules" / "@remotion").glob("compositor-*/ffmpeg"))), None)


def clip_command(seconds: int = 3) -> list[str]:
    """A real video render: Remotion's ffmpeg encodes `seconds` of 320x240 H.264."""
    assert FFMPEG is not None
    source = f"nullsrc=s=320x240:d={seconds}:r=25,format=yuv420p"
    return [str(FFMPEG), "-v", "error", "-nostdin", "-f", "lavfi", "-i", source, "-c:v", "libx264", "-preset",
            "ultrafast", "-movflags", "+faststart", "-f", "mp4", "{output}"]  # fmt: skip


def video_spool(root: Path) -> SpoolLayout:
    """intro (a video), notes (a plain file) done; broken failed; waiting in incoming/."""
    layout = init_spool(root)
    commands = {**FAST["commands"], "clip": clip_command()}
    write_spool_config(layout, {"commands": commands, "remotion_project": str(REMOTION)})
    drop(layout, "intro.yaml", {"renderer": "command", "command": "clip", "output": "videos/intro.mp4"})
    drop(layout, "notes.yaml", {**command_job(content="just some bytes"), "output": "notes.bin"})
    drop(layout, "broken.yaml", command_job(exit=65, message="no"))
    drain = subprocess.run(spoolrender_cmd("run", "--drain", "--spool", str(layout.root)), capture_output=True,
                           timeout=120, check=False)  # fmt: skip
    assert drain.returncode == 3, drain.stderr
    assert len(entries(layout, "done")) == 2
    drop(layout, "waiting.yaml", {**command_job(), "not_before": "2099-01-01T00:00:00Z"})
    return layout


def published(layout: SpoolLayout) -> Path:
    """Where the intro job of :func:`video_spool` published its video."""
    return layout.root / "output" / "videos" / "intro.mp4"
