"""Renderers turn one validated job into one output file, behind :class:`Renderer`."""

from spoolrender.renderers.base import (
    CancelToken,
    ChunkPart,
    FrameSpan,
    JoinRequest,
    ProgressFn,
    Renderer,
    RenderRequest,
    RenderResult,
)

__all__ = [
    "CancelToken",
    "ChunkPart",
    "FrameSpan",
    "JoinRequest",
    "ProgressFn",
    "RenderRequest",
    "RenderResult",
    "Renderer",
]
