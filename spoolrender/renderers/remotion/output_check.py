"""Is a rendered file what the job asked for? Checked with the project's own ffprobe
(shipped in @remotion/compositor-*) before the file is published.

A video must have the codec and the number of frames rendered; an audio-only file an
audio stream as long as the frames rendered; a still an image of the composition's size
(a PDF, which ffprobe cannot read, a complete PDF whose page has that size).
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

from spoolrender.core.vocabulary import FailureKind
from spoolrender.errors import RenderError

FFPROBE_TIMEOUT_S = 120.0
# codec setting -> the codec_name ffprobe reports for the file's first video/audio stream.
VIDEO_CODEC_NAMES = {"h264": "h264", "h264-mkv": "h264", "h265": "hevc", "vp8": "vp8", "vp9": "vp9",
                     "prores": "prores", "gif": "gif"}  # fmt: skip
AUDIO_ONLY_CODECS = frozenset({"mp3", "aac", "wav"})
STILL_CODEC_NAMES = {"png": "png", "jpeg": "mjpeg", "webp": "webp"}
# Audio encoders pad the start and end (an MP3 frame is 1152 samples, AAC priming 1024),
# and a raw .aac stream's duration is estimated from its bit rate.
AUDIO_SLACK_S = 0.15
# Chromium writes a PDF page in points: 1 CSS pixel is 0.75 pt.
PDF_POINTS_PER_PIXEL = 0.75
_MEDIA_BOX = re.compile(rb"/MediaBox\s*\[\s*([-\d.]+)\s+([-\d.]+)\s+([-\d.]+)\s+([-\d.]+)\s*\]")


def _bad(text: str) -> RenderError:
    # Transient: a file that came out wrong once may come out right on a retry (a full
    # disk, a killed encoder); a job that always produces it fails after its attempts.
    return RenderError(text, transient=True, kind=FailureKind.VERIFY)


def probe(ffprobe: Path | str, path: Path, *entries: str) -> dict[str, Any]:
    """ffprobe's JSON of ``path``: its streams (and format) with ``entries``."""
    proc = subprocess.run(
        [str(ffprobe), "-v", "error", *entries, "-of", "json", str(path)],
        capture_output=True, check=False, timeout=FFPROBE_TIMEOUT_S,
    )  # fmt: skip
    try:
        data = json.loads(proc.stdout.decode() or "null")
    except ValueError:
        data = None
    if proc.returncode != 0 or not isinstance(data, dict):
        why = proc.stderr.decode(errors="replace").strip()[:200]
        raise _bad(f"the rendered file is not readable by ffprobe ({why or 'no output'})")
    return data


def _stream(data: dict[str, Any], kind: str) -> dict[str, Any] | None:
    return next((s for s in data.get("streams", []) if s.get("codec_type") == kind), None)


def check_video(ffprobe: Path | str, path: Path, codec: str | None, frames: int) -> None:
    data = probe(ffprobe, path, "-count_frames", "-show_entries", "stream=codec_type,codec_name,nb_read_frames")
    video = _stream(data, "video")
    if video is None:
        raise _bad("the rendered file has no video stream")
    want = VIDEO_CODEC_NAMES.get(codec or "")
    if want is not None and video.get("codec_name") != want:
        raise _bad(f"the rendered video is {video.get('codec_name')}, expected {want} (codec {codec})")
    try:
        counted = int(video.get("nb_read_frames"))  # type: ignore[arg-type]
    except (TypeError, ValueError) as exc:
        raise _bad("ffprobe could not count the rendered video's frames") from exc
    if counted != frames:
        raise _bad(f"the rendered video has {counted} frames, expected {frames}")


def check_audio(ffprobe: Path | str, path: Path, frames: int, fps: float) -> None:
    data = probe(ffprobe, path, "-show_entries", "stream=codec_type,codec_name:format=duration")
    if _stream(data, "audio") is None:
        raise _bad("the rendered audio file has no audio stream")
    if _stream(data, "video") is not None:
        raise _bad("the rendered audio file has a video stream")
    try:
        duration = float(data["format"]["duration"])
    except (KeyError, TypeError, ValueError) as exc:
        raise _bad("ffprobe could not read the rendered audio's duration") from exc
    expected = frames / fps
    if abs(duration - expected) > AUDIO_SLACK_S + 1 / fps:
        raise _bad(
            f"the rendered audio lasts {duration:.3f} s, expected {expected:.3f} s ({frames} frames at {fps:g} fps)"
        )


def check_still(ffprobe: Path | str, path: Path, fmt: str, width: int, height: int) -> None:
    if fmt == "pdf":
        _check_pdf(path, width, height)
        return
    if fmt == "webp":
        # Remotion's ffprobe has no WebP decoder (it reports 0x0): the header says the size.
        got = _webp_size(path.read_bytes()[:64])
        if got != (width, height):
            shown = "not a WebP image" if got is None else f"{got[0]}x{got[1]}"
            raise _bad(f"the rendered still is {shown}, expected a {width}x{height} WebP image")
        return
    data = probe(ffprobe, path, "-show_entries", "stream=codec_type,codec_name,width,height")
    image = _stream(data, "video")
    if image is None:
        raise _bad(f"the rendered still is not a readable {fmt} image")
    if image.get("codec_name") != STILL_CODEC_NAMES[fmt]:
        raise _bad(f"the rendered still is {image.get('codec_name')}, expected {fmt}")
    if (image.get("width"), image.get("height")) != (width, height):
        raise _bad(f"the rendered still is {image.get('width')}x{image.get('height')}, expected {width}x{height}")


def _webp_size(head: bytes) -> tuple[int, int] | None:
    """(width, height) from a WebP file's first chunk (RIFF container, VP8X/VP8L/VP8)."""
    if len(head) < 30 or head[:4] != b"RIFF" or head[8:12] != b"WEBP":
        return None
    chunk = head[12:16]
    if chunk == b"VP8X":  # extended: 24-bit canvas width-1 and height-1
        return int.from_bytes(head[24:27], "little") + 1, int.from_bytes(head[27:30], "little") + 1
    if chunk == b"VP8L" and head[20] == 0x2F:  # lossless: 14-bit width-1 and height-1
        bits = int.from_bytes(head[21:25], "little")
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    if chunk == b"VP8 " and head[23:26] == b"\x9d\x01\x2a":  # lossy key frame
        return int.from_bytes(head[26:28], "little") & 0x3FFF, int.from_bytes(head[28:30], "little") & 0x3FFF
    return None


def _check_pdf(path: Path, width: int, height: int) -> None:
    data = path.read_bytes()
    if not data.startswith(b"%PDF-") or b"%%EOF" not in data[-1024:]:
        raise _bad("the rendered still is not a complete PDF (no %PDF- header or %%EOF trailer)")
    box = _MEDIA_BOX.search(data)
    if box is None:
        raise _bad("the rendered PDF has no page size (MediaBox)")
    x0, y0, x1, y1 = (float(v) for v in box.groups())
    got = ((x1 - x0) / PDF_POINTS_PER_PIXEL, (y1 - y0) / PDF_POINTS_PER_PIXEL)
    if abs(got[0] - width) > 1 or abs(got[1] - height) > 1:
        raise _bad(f"the rendered PDF page is {got[0]:g}x{got[1]:g} px, expected {width}x{height}")
