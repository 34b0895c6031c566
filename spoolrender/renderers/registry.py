"""Which renderer serves which ``renderer:`` name of a job file."""

from __future__ import annotations

from spoolrender.config.spool_config import SpoolConfig
from spoolrender.renderers.base import Renderer, RendererFactory
from spoolrender.renderers.command import CommandRenderer
from spoolrender.renderers.remotion.worker_tmp import remove_stale_worker_tmpdirs


def renderer_factory(config: SpoolConfig) -> RendererFactory:
    # Every runner (a cron drain too) first clears what killed runners' workers left.
    remove_stale_worker_tmpdirs()

    def make(name: str) -> Renderer:
        if name == "command":
            return CommandRenderer(config)
        if name == "remotion":
            from spoolrender.renderers.remotion.renderer import RemotionRenderer

            return RemotionRenderer(config)
        raise ValueError(f"unknown renderer {name!r}")

    return make
