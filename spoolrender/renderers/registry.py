"""Which renderer serves which ``renderer:`` name of a job file."""

from __future__ import annotations

from spoolrender.config.spool_config import SpoolConfig
from spoolrender.renderers.base import Renderer
from spoolrender.renderers.command import CommandRenderer
from spoolrender.renderers.remotion.worker_tmp import remove_stale_worker_tmpdirs
from spoolrender.run.executor import RendererFactory
from spoolrender.runner.capacity import Capacity


def renderer_factory(config: SpoolConfig, capacity: Capacity) -> RendererFactory:
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
