"""Remotion projects written by the tests (tests/remotion/): their files and node_modules, the
spool that renders them, a drain and its records, and ffprobe/ffmpeg reads of the outputs."""

from __future__ import annotations

import json
import struct
import subprocess
import wave
import zlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from spoolrender.spool.layout import SpoolLayout
from support.checkout import REMOTION, REPO
from support.node_modules import link_node_modules
from support.processes import spoolrender_cmd
from support.spool_jobs import entries, write_spool_config

OTHER_VERSION = "4.0.527"
OTHER = REPO / ".cache" / f"remotion-{OTHER_VERSION}"
COMPOSITOR = REMOTION / "node_modules/@remotion/compositor-linux-x64-gnu"


def png(rgb: tuple[int, int, int], size: int = 8) -> bytes:
    """A solid-colour PNG (zlib and struct: no imaging library needed)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    raw = b"".join(b"\0" + bytes(rgb) * size for _ in range(size))
    header = struct.pack(">IIBBBBB", size, size, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")


def tone(path: Path, seconds: float = 1.0, rate: int = 22050) -> None:
    """A square-wave WAV file."""
    with wave.open(str(path), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(rate)
        period = rate // 440
        samples = (8000 if (i % period) < period // 2 else -8000 for i in range(int(rate * seconds)))
        out.writeframes(b"".join(struct.pack("<h", s) for s in samples))


def make_project(root: Path, files: Mapping[str, str | bytes], node_modules: Path | None, deps: dict[str, str]) -> Path:
    root.mkdir(parents=True)
    (root / "package.json").write_text(json.dumps({"name": root.name, "private": True, "dependencies": deps}))
    for rel, content in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
    if node_modules is not None:
        link_node_modules(root, node_modules)
    return root


def remotion_deps(version: str) -> dict[str, str]:
    return {"remotion": version, "@remotion/cli": version, "react": "19.2.0", "react-dom": "19.2.0"}


def project_spool(spool: SpoolLayout, project: Path, cache: Path) -> SpoolLayout:
    write_spool_config(spool, {"remotion_project": str(project), "cache_dir": str(cache), "slots": 1})
    return spool


def drain(layout: SpoolLayout, expect: int = 0, timeout: float = 600) -> str:
    proc = subprocess.run(
        spoolrender_cmd("run", "--drain", "-v", "--spool", str(layout.root)),
        capture_output=True, text=True, timeout=timeout, check=False,
    )  # fmt: skip
    assert proc.returncode == expect, proc.stderr
    return proc.stderr


def record(layout: SpoolLayout, state: str, prefix: str, filename: str) -> dict[str, Any]:
    (entry,) = [e for e in entries(layout, state) if e.startswith(prefix + ".")]
    data: dict[str, Any] = json.loads((layout.state_dir(state) / entry / filename).read_text())
    return data


def probe(path: Path) -> dict[str, Any]:
    out = subprocess.run(
        [str(COMPOSITOR / "ffprobe"), "-v", "error", "-show_entries",
         "stream=codec_type,width,height:format=duration", "-of", "json", str(path)],
        capture_output=True, check=True,
    ).stdout  # fmt: skip
    data: dict[str, Any] = json.loads(out)
    return data


def first_frame(path: Path, width: int, height: int) -> bytes:
    """The first frame as raw RGB bytes (width * height * 3)."""
    out = subprocess.run(
        # Remotion's ffmpeg has no rawvideo muxer: raw frames go through image2pipe.
        [str(COMPOSITOR / "ffmpeg"), "-v", "error", "-i", str(path), "-frames:v", "1", "-f", "image2pipe",
         "-c:v", "rawvideo", "-pix_fmt", "rgb24", "-"],
        capture_output=True, check=True,
    ).stdout  # fmt: skip
    assert len(out) == width * height * 3
    return out


def pixel(frame: bytes, width: int, x: int, y: int) -> tuple[int, int, int]:
    i = (y * width + x) * 3
    return frame[i], frame[i + 1], frame[i + 2]


def near(actual: tuple[int, int, int], expected: tuple[int, int, int]) -> bool:
    # h264 with yuv420p shifts colours a little; a missing style is off by ~255.
    return all(abs(a - e) <= 48 for a, e in zip(actual, expected, strict=True))
