"""Split Remotion jobs: which jobs can be split, the chunk plan Remotion can join, and
what a chunk's directory holds.

Chunks are rendered and joined the way Remotion Lambda does it (the worker's chunks.mjs
and join.mjs say how): each chunk is an h264 MPEG-TS video part and a separately rendered
AAC audio part aligned on AAC packet borders, and Remotion's own ``combineChunks()`` joins
them without re-encoding. That is seamless only for h264 video with AAC (or no) audio,
only for chunks of more than 4 frames, and only when every chunk but the last has the same
number of frames F and chunk i starts at ``first + i * F`` (``combineChunks()`` cuts the
audio of part i at ``i * F / fps``; the last chunk may be shorter). :func:`layout_problem`
holds a plan to that.

A chunk's directory (``RenderRequest.output`` of a chunk) holds ``video.ts``,
``audio.aac`` (none when the job is muted) and ``chunk.json``, written last, which says
which frames of which plan the parts are, so that a part of another plan is never joined.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from spoolrender.core.vocabulary import FailureKind
from spoolrender.errors import ChunkPartInvalid, RenderError
from spoolrender.jobfile import JobSpec
from spoolrender.jobfile.media import remotion_options
from spoolrender.renderers.base import ChunkPart, FrameSpan, JoinRequest, RenderRequest

CHUNK_VIDEO = "video.ts"
CHUNK_AUDIO = "audio.aac"
CHUNK_MANIFEST = "chunk.json"
# Remotion's canConcatAudioSeamlessly(): chunks of 4 frames or fewer are not joined seamlessly.
MIN_CHUNK_FRAMES = 5
# combineChunks() is public from this version of @remotion/renderer on.
COMBINE_CHUNKS_SINCE = (4, 0, 279)
# The bundle's copy of the project's remotion.config.ts render defaults (worker/config.mjs).
RENDER_DEFAULTS_FILE = ".spoolrender-render-defaults.json"
CONFIG_SOURCE = "the project's remotion.config.ts"


def render_defaults(bundle: Path) -> dict[str, Any]:
    """The renderMedia() options the project's remotion.config.ts sets, from its bundle."""
    try:
        data = json.loads((bundle / RENDER_DEFAULTS_FILE).read_bytes())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise RenderError(
            f"the bundle's render defaults are unreadable: {exc}", transient=True, kind=FailureKind.BUNDLE
        ) from exc
    media = data.get("renderMedia") if isinstance(data, dict) else None
    return media if isinstance(media, dict) else {}


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", text)[:3])


def split_refusal(spec: JobSpec, settings: Mapping[str, Any], defaults: Mapping[str, Any], version: str) -> str | None:
    """Why this job cannot be rendered in chunks and joined seamlessly, or None.

    ``settings``: the job's settings; ``defaults``: the renderMedia() options of the
    project's remotion.config.ts, which apply where the job sets nothing (as in a render).
    """
    if spec.still is not None:
        return "a still is one frame: it cannot be split into chunks"
    if _version(version) < COMBINE_CHUNKS_SINCE:
        since = ".".join(map(str, COMBINE_CHUNKS_SINCE))
        return f"the project has Remotion {version}, whose renderer cannot join chunks (combineChunks() needs {since})"
    own = remotion_options(settings)

    def effective(job_key: str, option: str) -> tuple[Any, str]:
        if option in own:
            return own[option], f"setting {job_key}"
        return defaults.get(option), CONFIG_SOURCE

    codec, source = effective("codec", "codec")
    if codec not in (None, "h264"):
        return (
            f"codec {codec} ({source}) cannot be rendered in chunks: Remotion joins chunks seamlessly only for h264 "
            "(other codecs would be re-encoded at the joins)"
        )
    nth, source = effective("every_nth_frame", "everyNthFrame")
    if nth not in (None, 1):
        return f"every_nth_frame {nth} ({source}) cannot be rendered in chunks: only every frame joins seamlessly"
    muted, _ = effective("muted", "muted")
    audio_codec, source = effective("audio_codec", "audioCodec")
    if not muted and audio_codec not in (None, "aac"):
        return (
            f"audio codec {audio_codec} ({source}) cannot be rendered in chunks: Remotion joins audio seamlessly "
            "only for aac"
        )
    return None


def composition_start(settings: Mapping[str, Any]) -> int:
    """The first frame the whole job renders before its props are known: frame_range's."""
    frame_range = settings.get("frame_range")
    if frame_range is None:
        return 0
    return int(frame_range[0] if isinstance(frame_range, list) else frame_range)


def frames_per_chunk(chunk: ChunkPart, start: int) -> int:
    """F of the plan ``chunk`` belongs to (chunk i starts at ``start + i * F``)."""
    offset = chunk.first - start
    if chunk.index == 0:
        if offset == 0:
            return chunk.frames
    elif offset > 0 and offset % chunk.index == 0:
        per_chunk = offset // chunk.index
        last = chunk.index == chunk.count - 1
        if chunk.frames == per_chunk or (last and chunk.frames < per_chunk):
            return per_chunk
    raise RenderError(
        f"chunk {chunk.index + 1} of {chunk.count} (frames {chunk.first}-{chunk.last}) is not part of a plan Remotion "
        f"can join: chunk i must start at frame {start} + i * F, every chunk but the last F frames long",
        transient=False,
        kind=FailureKind.CHUNK_PLAN,
    )


def chunk_message(request: RenderRequest) -> dict[str, Any]:
    """The render request's ``chunk`` field for the worker (see chunks.mjs)."""
    chunk = request.chunk
    assert chunk is not None
    if request.spec.still is not None:
        raise RenderError("a still cannot be rendered in chunks", transient=False, kind=FailureKind.INVALID_SETTINGS)
    if not request.output.is_dir() or any(request.output.iterdir()):
        raise RenderError(f"a chunk renders into an empty directory: {request.output} is not one", transient=True,
                          kind=FailureKind.CHUNK_PLAN)  # fmt: skip
    start = composition_start(request.settings)
    per_chunk = frames_per_chunk(chunk, start)
    if per_chunk < MIN_CHUNK_FRAMES:
        raise RenderError(
            f"chunks of {per_chunk} frames cannot be joined seamlessly (Remotion needs at least {MIN_CHUNK_FRAMES})",
            transient=False,
            kind=FailureKind.CHUNK_PLAN,
        )
    return {
        "first": chunk.first,
        "last": chunk.last,
        "compositionStart": start,
        "framesPerChunk": per_chunk,
        "audioLocation": str(request.output / CHUNK_AUDIO),
    }


def write_manifest(request: RenderRequest, fps: float, audio: bool) -> None:
    """Say what the chunk directory holds (written after both parts, so its presence
    means the render finished). The runner makes the directory durable when it keeps it."""
    chunk = request.chunk
    assert chunk is not None
    manifest = {
        "index": chunk.index,
        "count": chunk.count,
        "first": chunk.first,
        "last": chunk.last,
        "fps": fps,
        "composition_start": composition_start(request.settings),
        "audio": audio,
    }
    (request.output / CHUNK_MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")


def read_manifest(directory: Path, chunk: ChunkPart) -> dict[str, Any]:
    """The manifest of the chunk in ``directory``; ChunkPartInvalid unless it is ``chunk``'s."""
    name = f"chunk {chunk.index + 1} of {chunk.count} (frames {chunk.first}-{chunk.last})"
    try:
        manifest = json.loads((directory / CHUNK_MANIFEST).read_bytes())
    except FileNotFoundError as exc:
        raise ChunkPartInvalid(chunk.index, f"{name} is missing: {directory / CHUNK_MANIFEST} does not exist") from exc
    except (OSError, ValueError) as exc:
        raise ChunkPartInvalid(chunk.index, f"{name} is corrupt: its {CHUNK_MANIFEST} is unreadable ({exc})") from exc
    want = {"index": chunk.index, "count": chunk.count, "first": chunk.first, "last": chunk.last}
    if not isinstance(manifest, dict) or any(manifest.get(k) != v for k, v in want.items()):
        raise ChunkPartInvalid(chunk.index, f"{name}: {directory} holds another chunk ({manifest!r:.200})")
    for part in (CHUNK_VIDEO, *((CHUNK_AUDIO,) if manifest.get("audio") else ())):
        path = directory / part
        if not path.is_file() or path.stat().st_size == 0:
            raise ChunkPartInvalid(chunk.index, f"{name} is missing its {part} ({path})")
    return manifest


def layout_problem(parts: tuple[ChunkPart, ...], span: FrameSpan) -> str | None:
    """Why these chunks are not a plan ``combineChunks()`` joins into ``span``, or None."""
    if not parts:
        return "no chunks to join"
    per_chunk = parts[0].frames
    expected_first = span.first
    for i, chunk in enumerate(parts):
        if chunk.index != i or chunk.count != len(parts):
            return f"the chunks are not numbered 1..{len(parts)} in order"
        if chunk.first != expected_first:
            return f"chunk {i + 1} starts at frame {chunk.first}, expected {expected_first}"
        last = i == len(parts) - 1
        if (not last and chunk.frames != per_chunk) or chunk.frames > per_chunk:
            return (
                f"chunk {i + 1} has {chunk.frames} frames: every chunk but the last must have {per_chunk} "
                "(Remotion joins chunks of one length)"
            )
        expected_first = chunk.last + 1
    if expected_first != span.last + 1:
        return f"the chunks end at frame {expected_first - 1}, the video at {span.last}"
    if per_chunk < MIN_CHUNK_FRAMES:
        return f"chunks of {per_chunk} frames cannot be joined seamlessly (Remotion needs at least {MIN_CHUNK_FRAMES})"
    return None


def join_message(request: JoinRequest, job_id: str) -> tuple[dict[str, Any], bool]:
    """The worker's join request for ``request`` (see join.mjs), and whether it has audio;
    RenderError if the plan cannot be joined, ChunkPartInvalid naming a bad chunk."""
    chunks = tuple(chunk for chunk, _ in request.parts)
    problem = layout_problem(chunks, request.span)
    if problem is not None:
        raise RenderError(f"cannot join the chunks: {problem}", transient=False, kind=FailureKind.CHUNK_PLAN)
    manifests = [read_manifest(directory, chunk) for chunk, directory in request.parts]
    audio = bool(manifests[0].get("audio"))
    for (chunk, _), manifest in zip(request.parts, manifests, strict=True):
        start, fps = manifest.get("composition_start"), manifest.get("fps")
        if start != request.span.first or fps != request.span.fps:
            shown = f"{fps:g}" if isinstance(fps, int | float) else repr(fps)
            raise ChunkPartInvalid(
                chunk.index,
                f"chunk {chunk.index + 1} was rendered for a video from frame {start} at {shown} fps, this one is "
                f"from frame {request.span.first} at {request.span.fps:g} fps: render it again",
            )
        if bool(manifest.get("audio")) != audio:
            raise ChunkPartInvalid(
                chunk.index,
                f"chunk {chunk.index + 1} {'has' if manifest.get('audio') else 'lacks'} audio, chunk 1 does not "
                "(rendered with other settings): render it again",
            )
    message = {
        "type": "join",
        "jobId": job_id,
        "outputLocation": str(request.output),
        "fps": request.span.fps,
        "framesPerChunk": chunks[0].frames,
        "first": request.span.first,
        "last": request.span.last,
        "parts": [
            {"video": str(directory / CHUNK_VIDEO), "audio": str(directory / CHUNK_AUDIO) if audio else None}
            for _, directory in request.parts
        ],
    }
    return message, audio
