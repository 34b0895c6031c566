"""Renderers turn one validated job into one output file, behind :class:`Renderer`."""

from spoolrender.renderers.base import CancelToken, ProgressFn, Renderer, RenderRequest, RenderResult

__all__ = ["CancelToken", "ProgressFn", "RenderRequest", "RenderResult", "Renderer"]
