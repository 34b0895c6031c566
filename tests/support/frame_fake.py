"""A FakeRenderer that also renders in chunks (and, if asked, gives render cache keys),
for split and cached runs without Remotion. A chunk's "video" is its frame numbers, one
line per frame (``frames`` in the job's props, default 90, at 30 fps), so a join that
loses, repeats or reorders a frame is seen in the output.

Only the render is replaced, as with :class:`spoolrender.testing.FakeRenderer`: the plan,
the chunk entries, the ledger, the wake-up of the waiting job, the join's publish and
the render cache's lookup, verification and store are the runner's own code.
"""

from __future__ import annotations

import threading

from spoolrender.errors import RenderCancelled, RenderError
from spoolrender.render_cache.keys import digest_of
from spoolrender.renderers.base import (
    CancelToken,
    ChunkPart,
    FrameSpan,
    JoinRequest,
    ProgressFn,
    RenderRequest,
    RenderResult,
)
from spoolrender.testing import FakeRenderer

FRAMES_FILE = "frames.txt"  # in a chunk's directory
FPS = 30.0


def frame_lines(first: int, last: int) -> str:
    return "".join(f"{frame}\n" for frame in range(first, last + 1))


class FrameFake(FakeRenderer):
    """Whole renders as FakeRenderer's scripts say; chunks and joins write frame numbers."""

    name = "frame-fake"

    def __init__(self, *, cached: bool = False) -> None:
        super().__init__()
        self._cached = cached  # give jobs a render cache key (what their render depends on)
        self._lock = threading.Lock()
        self.chunks: list[ChunkPart] = []  # every chunk rendered, in order
        self.joins: list[tuple[ChunkPart, ...]] = []
        self.failing: dict[int, str] = {}  # chunk index: the message of its permanent failure

    def cache_key(self, request: RenderRequest) -> str | None:
        if not self._cached:
            return None
        return digest_of(
            {
                "renderer": self.name,
                "composition": request.spec.composition,
                "props": request.props,
                "settings": request.settings,
                "suffix": request.spec.output.suffix,
            }
        )

    def split_refusal(self, request: RenderRequest) -> str | None:
        return None

    def frame_span(self, request: RenderRequest, cancel: CancelToken) -> FrameSpan:
        return FrameSpan(0, int(request.props.get("frames", 90)) - 1, FPS)

    def render(self, request: RenderRequest, progress: ProgressFn, cancel: CancelToken) -> RenderResult:
        chunk = request.chunk
        if chunk is None:
            return super().render(request, progress, cancel)
        if cancel.is_set():
            raise RenderCancelled(cancel.reason or "cancelled")
        with self._lock:
            self.chunks.append(chunk)
            failure = self.failing.get(chunk.index)
        if failure is not None:
            raise RenderError(failure, transient=False, kind="bad-frame")
        (request.output / FRAMES_FILE).write_text(frame_lines(chunk.first, chunk.last))
        progress(1.0, "rendering")
        return RenderResult(details={"fake_chunk": chunk.index})

    def verify(self, request: RenderRequest, result: RenderResult) -> None:
        chunk = request.chunk
        if chunk is None:
            super().verify(request, result)
            return
        try:
            text = (request.output / FRAMES_FILE).read_text()
        except OSError as exc:
            raise RenderError(f"chunk {chunk.index + 1}: {exc.strerror}", transient=True, kind="no-output") from exc
        if text != frame_lines(chunk.first, chunk.last):
            raise RenderError(f"chunk {chunk.index + 1}: not frames {chunk.first}-{chunk.last}", transient=True)

    def join(self, request: JoinRequest, progress: ProgressFn, cancel: CancelToken) -> RenderResult:
        with self._lock:
            self.joins.append(tuple(part for part, _ in request.parts))
        with open(request.output, "w", encoding="utf-8") as out:
            for _, directory in request.parts:
                out.write((directory / FRAMES_FILE).read_text())
        return RenderResult(details={"fake_join": len(request.parts)})

    def verify_join(self, request: JoinRequest, result: RenderResult) -> None:
        if request.output.read_text() != frame_lines(request.span.first, request.span.last):
            raise RenderError("the joined output is not every frame once, in order", transient=True)
