"""Renderers turn one validated job into one output file, behind :class:`Renderer`.

- :mod:`.base`: the protocol (render, verify, cache_key, split_refusal, frame_span, join,
  verify_join), requests, results, the cancel token, :data:`~.base.RendererFactory`
- :mod:`.command`: the generic command renderer (an argv template of the spool config)
- :mod:`.remotion`: the Remotion renderer and its Node worker
- :mod:`.registry`: which renderer serves which ``renderer:`` name

May import: :mod:`spoolrender.jobfile` and below. A renderer knows nothing of the spool's
moves: it renders one request into one file.
"""

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
