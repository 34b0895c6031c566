"""Whether a job is split, and into which frame ranges."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from spoolrender import defaults
from spoolrender.jobfile import JobSpec
from spoolrender.renderers.base import ChunkPart, FrameSpan


@dataclass(frozen=True)
class ChunkPlan:
    """The frame ranges of a split job, fixed once written (a re-plan reuses it)."""

    span: FrameSpan
    parts: tuple[ChunkPart, ...]
    created: float  # wall time of the split decision's run (for the ETA)

    def __post_init__(self) -> None:
        if len(self.parts) < 2:
            raise ValueError("a plan has at least two chunks")
        expected = self.span.first
        size = self.parts[0].frames
        for i, part in enumerate(self.parts):
            if part.index != i or part.count != len(self.parts) or part.first != expected:
                raise ValueError(f"chunk {i} does not follow on: {part}")
            if part.frames < defaults.MIN_CHUNK_FRAMES:
                raise ValueError(f"chunk {i} has fewer than {defaults.MIN_CHUNK_FRAMES} frames")
            if part.frames > size or (part.frames < size and i < len(self.parts) - 1):
                raise ValueError(f"chunk {i} is not {size} frames long (only the last may be shorter)")
            expected = part.last + 1
        if expected != self.span.last + 1:
            raise ValueError("the chunks do not cover the span")

    @property
    def count(self) -> int:
        return len(self.parts)

    def to_json(self) -> bytes:
        doc = {
            "span": {"first": self.span.first, "last": self.span.last, "fps": self.span.fps},
            "parts": [[p.first, p.last] for p in self.parts],
            "created": self.created,
        }
        return (json.dumps(doc, indent=2) + "\n").encode()

    @classmethod
    def from_json(cls, data: bytes) -> ChunkPlan:
        doc: dict[str, Any] = json.loads(data)
        span = FrameSpan(int(doc["span"]["first"]), int(doc["span"]["last"]), float(doc["span"]["fps"]))
        ranges = doc["parts"]
        parts = tuple(ChunkPart(i, len(ranges), int(a), int(b)) for i, (a, b) in enumerate(ranges))
        return cls(span, parts, float(doc["created"]))


def explicit_split(spec: JobSpec) -> bool:
    """The job itself asks to be split (``chunks: N`` with N > 1, or ``chunk_frames``)."""
    return (spec.chunks is not None and spec.chunks > 1) or spec.chunk_frames is not None


def automatic_split(spec: JobSpec, split_seconds: float | None) -> bool:
    """The spool's ``split_seconds`` may split this job (it says nothing itself)."""
    return split_seconds is not None and spec.chunks is None and spec.chunk_frames is None


def plan_parts(span: FrameSpan, *, chunks: int | None = None, chunk_frames: int | None = None) -> tuple[ChunkPart, ...]:
    """``span`` in ``chunks`` ranges (or ranges of at most ``chunk_frames``), never shorter
    than MIN_CHUNK_FRAMES and never more than MAX_CHUNKS; () when that leaves fewer than two
    (the job is then rendered whole).

    Every chunk but the last has the same length and the last is no longer: the layout of
    Remotion Lambda, which Remotion's ``combineChunks`` assumes when it cuts each chunk's
    audio at ``index * frames_per_chunk / fps`` (chunks differing by one frame joined with
    audio shifted from the second chunk on: measured, see renderers/remotion/splitting.py).
    """
    if (chunks is None) == (chunk_frames is None):
        raise ValueError("give chunks or chunk_frames")
    wanted = chunks if chunks is not None else math.ceil(span.frames / (chunk_frames or 1))
    count = min(wanted, span.frames // defaults.MIN_CHUNK_FRAMES, defaults.MAX_CHUNKS)
    while count >= 2:
        # The fewest frames per chunk that make ``count`` chunks; rounding up may need fewer
        # chunks, and the last one may then be too short to join: try one chunk fewer.
        size = math.ceil(span.frames / count)
        actual = math.ceil(span.frames / size)
        if actual >= 2 and span.frames - (actual - 1) * size >= defaults.MIN_CHUNK_FRAMES:
            return tuple(
                ChunkPart(i, actual, span.first + i * size, min(span.first + (i + 1) * size - 1, span.last))
                for i in range(actual)
            )
        count -= 1
    return ()
