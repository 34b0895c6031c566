"""Renderer parts that need no Node, Chromium or ffprobe: the slot plan, the renderer
registry, the Remotion renderer's refusal of a project that cannot render (before any
worker starts), which jobs Remotion can split and join, and the still checks that read
the file's own header."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import pytest

from spoolrender.errors import RenderError
from spoolrender.renderers.base import ChunkPart, FrameSpan
from spoolrender.renderers.command import CommandRenderer
from spoolrender.renderers.registry import renderer_factory
from spoolrender.renderers.remotion.output_check import check_still
from spoolrender.renderers.remotion.renderer import RemotionRenderer
from spoolrender.renderers.remotion.splitting import frames_per_chunk, layout_problem, split_refusal
from spoolrender.renderers.remotion.worker_tmp import (
    OWNER_FILE,
    WORKER_TMP_PREFIX,
    WorkerTmp,
    remove_stale_worker_tmpdirs,
)
from spoolrender.runner.capacity import Capacity, plan_capacity
from spoolrender.testing import make_request, make_spool

NO_FFPROBE = "/nonexistent/ffprobe"  # a check that reached ffprobe would fail on it


def test_slots_set_in_the_config_share_the_cores(tmp_path: Path) -> None:
    config = make_spool(tmp_path / "spool", {"slots": 2, "threads_per_job": 64})
    capacity = plan_capacity(config)
    assert (capacity.slots, capacity.reason) == (2, "slots set in config")
    assert 1 <= capacity.threads_per_job <= max(1, capacity.cores // 2)
    with pytest.raises(ValueError, match="slots and threads_per_job must be >= 1"):
        Capacity(0, 1, 2, 1024, "none")


def test_the_registry_makes_the_renderer_a_job_names(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The factory clears dead workers' TMPDIRs first: in this test's own temp dir, not the host's.
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    config = make_spool(tmp_path / "spool", {"slots": 1})
    make = renderer_factory(config)
    assert isinstance(make("command"), CommandRenderer)
    remotion = make("remotion")
    assert isinstance(remotion, RemotionRenderer) and remotion.workers_started == 0  # started per job, lazily
    with pytest.raises(ValueError, match="unknown renderer 'blender'"):
        make("blender")


def test_a_dead_runners_worker_tmpdir_is_removed_and_a_live_ones_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    live = WorkerTmp()  # flocked by this process, as a runner holds its worker's
    dead = tmp_path / f"{WORKER_TMP_PREFIX}{os.getpid()}-dead"
    (dead / "puppeteer_dev_chrome_profile-x").mkdir(parents=True)
    (dead / OWNER_FILE).touch()  # its owner's lock went with its process
    unnamed = tmp_path / f"{WORKER_TMP_PREFIX}4194305-old"  # older, lockless: judged by its pid
    unnamed.mkdir()
    remove_stale_worker_tmpdirs()
    assert sorted(p.name for p in tmp_path.iterdir()) == [live.path.name]
    live.remove()
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("files", "problem"),
    [
        ({}, "is not a Remotion project: it has no package.json"),
        ({"package.json": "{}"}, "Remotion is not installed in {project}: its node_modules is missing; run `npm"),
        ({"package.json": "{}", "node_modules/.keep": ""}, "it has no remotion package"),
    ],
)
def test_a_project_that_cannot_render_fails_before_any_worker_starts(
    tmp_path: Path, files: dict[str, str], problem: str
) -> None:
    project = tmp_path / "project"
    for name, text in files.items():
        (project / name).parent.mkdir(parents=True, exist_ok=True)
        (project / name).write_text(text)
    project.mkdir(exist_ok=True)
    config = make_spool(tmp_path / "spool", {"remotion_project": str(project), "render_cache": True})
    request = make_request(config, {"composition": "Intro"}, tmp_path / "job")
    renderer = RemotionRenderer(config)
    with pytest.raises(RenderError) as raised:
        renderer.cache_key(request)
    assert problem.format(project=project.resolve()) in raised.value.message
    assert raised.value.transient is False
    assert renderer.workers_started == 0


def spec_of(tmp_path: Path, job: dict[str, Any]) -> Any:
    config = make_spool(tmp_path / "spool")
    return make_request(config, {"composition": "Intro", **job}, tmp_path / "job").spec


@pytest.mark.parametrize(
    ("job", "config_defaults", "version", "refusal"),
    [
        ({}, {}, "4.0.300", None),
        ({"still": {"frame": 3}, "output": "a.png"}, {}, "4.0.300", "a still is one frame"),
        ({}, {}, "4.0.100", "the project has Remotion 4.0.100, whose renderer cannot join chunks"),
        ({"settings": {"codec": "vp8"}}, {}, "4.0.300", "codec vp8 (setting codec) cannot be rendered in chunks"),
        ({}, {"codec": "prores"}, "4.0.300", "codec prores (the project's remotion.config.ts) cannot"),
        ({"settings": {"codec": "h264"}}, {"codec": "prores"}, "4.0.300", None),  # the job's own setting wins
        ({"settings": {"every_nth_frame": 2}}, {}, "4.0.300", "every_nth_frame 2 (setting every_nth_frame)"),
        ({"settings": {"audio_codec": "mp3"}}, {}, "4.0.300", "audio codec mp3 (setting audio_codec)"),
        ({"settings": {"muted": True}}, {"audioCodec": "mp3"}, "4.0.300", None),  # no audio to join
    ],
)
def test_which_jobs_remotion_can_split(
    tmp_path: Path, job: dict[str, Any], config_defaults: dict[str, Any], version: str, refusal: str | None
) -> None:
    spec = spec_of(tmp_path, job)
    got = split_refusal(spec, job.get("settings", {}), config_defaults, version)
    assert (got is None) == (refusal is None), got
    assert refusal is None or (got is not None and got.startswith(refusal)), got


def test_only_plans_of_equal_chunks_from_the_first_frame_join() -> None:
    span = FrameSpan(0, 89, 30.0)
    plan = tuple(ChunkPart(i, 3, 30 * i, 30 * i + 29) for i in range(3))
    assert layout_problem(plan, span) is None
    assert [frames_per_chunk(c, 0) for c in plan] == [30, 30, 30]
    short_last = (*plan[:2], ChunkPart(2, 3, 60, 80))
    assert layout_problem(short_last, span) == "the chunks end at frame 80, the video at 89"
    assert layout_problem(short_last, FrameSpan(0, 80, 30.0)) is None
    uneven = (ChunkPart(0, 2, 0, 9), ChunkPart(1, 2, 10, 89))
    assert layout_problem(uneven, span) == (
        "chunk 2 has 80 frames: every chunk but the last must have 10 (Remotion joins chunks of one length)"
    )
    assert layout_problem((), span) == "no chunks to join"
    with pytest.raises(RenderError, match=r"chunk 2 of 3 \(frames 31-60\) is not part of a plan Remotion can join"):
        frames_per_chunk(ChunkPart(1, 3, 31, 60), 0)


def webp_vp8x(width: int, height: int) -> bytes:
    head = b"RIFF" + (100).to_bytes(4, "little") + b"WEBP" + b"VP8X" + (10).to_bytes(4, "little") + b"\0" * 4
    return head + (width - 1).to_bytes(3, "little") + (height - 1).to_bytes(3, "little") + b"\0" * 34


def test_webp_and_pdf_stills_are_checked_by_their_own_headers(tmp_path: Path) -> None:
    still = tmp_path / "still.webp"
    still.write_bytes(webp_vp8x(320, 180))
    check_still(NO_FFPROBE, still, "webp", 320, 180)
    with pytest.raises(RenderError, match="the rendered still is 320x180, expected a 640x360 WebP image"):
        check_still(NO_FFPROBE, still, "webp", 640, 360)
    still.write_bytes(b"GIF89a" + b"\0" * 40)
    with pytest.raises(RenderError, match="not a WebP image"):
        check_still(NO_FFPROBE, still, "webp", 320, 180)
    pdf = tmp_path / "still.pdf"
    pdf.write_bytes(b"%PDF-1.4\n1 0 obj << /MediaBox [0 0 240 135] >>\n%%EOF\n")
    check_still(NO_FFPROBE, pdf, "pdf", 320, 180)  # 0.75 points per pixel
    with pytest.raises(RenderError, match="the rendered PDF page is 320x180 px, expected 100x100"):
        check_still(NO_FFPROBE, pdf, "pdf", 100, 100)
    pdf.write_bytes(b"%PDF-1.4\ntruncated")
    with pytest.raises(RenderError, match=r"not a complete PDF \(no %PDF- header or %%EOF trailer\)"):
        check_still(NO_FFPROBE, pdf, "pdf", 320, 180)
