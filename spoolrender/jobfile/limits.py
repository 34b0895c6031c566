"""The spool's cap on what one render may cost, checked once its size is known.

A job file names a composition; its size (width x height, frames) is known only after
the renderer has selected it with the job's props (``Tiny`` with ``frames: 1e9``), so the
renderer calls :func:`render_size_problem` then, before the first frame. Timeout and
attempts are capped when the file is validated (:mod:`spoolrender.jobfile.fields`).
"""

from __future__ import annotations

from spoolrender.config.spool_config import SpoolConfig


def render_size_problem(config: SpoolConfig, width: int, height: int, frames: int, scale: float) -> str | None:
    """Why a render of ``frames`` frames of ``width`` x ``height`` at ``scale`` is over the
    spool's caps (``max_job_frames``, ``max_job_frame_pixels``), or None if it is within them."""
    out_w, out_h = round(width * scale), round(height * scale)
    pixels = out_w * out_h
    limit = config.frame_pixel_limit
    if pixels > limit:
        scaled = f" (the composition's {width}x{height} at scale {scale:g})" if scale != 1 else ""
        source = (
            "max_job_frame_pixels"
            if config.max_job_frame_pixels is not None
            else f"max_job_frame_pixels, derived from memory_per_job_mb {config.memory_per_job_mb}"
        )
        return (
            f"a frame of {out_w}x{out_h} pixels{scaled} is {pixels:,} pixels, over this spool's "
            f"limit of {limit:,} ({source}); lower settings.scale or the composition's size"
        )
    if frames > config.max_job_frames:
        return (
            f"the render has {frames:,} frames, over this spool's limit of {config.max_job_frames:,} (max_job_frames)"
        )
    return None
