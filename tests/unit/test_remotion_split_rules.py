"""Which Remotion jobs can be split, and which chunk plans Remotion can join (no render:
the rules only; tests/remotion/test_remotion_chunks.py renders and joins for real)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from spoolrender.config.spool_config import SpoolConfig
from spoolrender.errors import RenderError
from spoolrender.jobfile import parse_job
from spoolrender.renderers.base import ChunkPart, FrameSpan
from spoolrender.renderers.remotion.splitting import (
    composition_start,
    frames_per_chunk,
    layout_problem,
    render_defaults,
    split_refusal,
)

VERSION = "4.0.529"


def refusal(config: SpoolConfig, job: dict[str, Any], defaults: dict[str, Any] | None = None,
            version: str = VERSION) -> str | None:  # fmt: skip
    spec = parse_job(yaml.safe_dump({"id": "long", "composition": "TitleCard", **job}).encode(), "j.yaml", config)
    return split_refusal(spec, spec.settings, defaults or {}, version)


@pytest.mark.parametrize(
    "job",
    [
        {},
        {"settings": {"codec": "h264", "crf": 20, "x264_preset": "fast", "frame_range": [10, 400]}},
        {"settings": {"muted": True}},
        {"settings": {"audio_codec": "aac", "audio_bitrate": "128k", "scale": 0.5}},
        {"settings": {"every_nth_frame": 1, "image_format": "png", "pixel_format": "yuv420p"}},
    ],
)
def test_h264_with_aac_or_no_audio_can_be_split(config: SpoolConfig, job: dict[str, Any]) -> None:
    assert refusal(config, job) is None


@pytest.mark.parametrize(
    ("job", "reason"),
    [
        ({"still": True, "output": "a.png"}, "a still is one frame"),
        ({"settings": {"codec": "h265"}}, "codec h265 (setting codec) cannot be rendered in chunks"),
        ({"settings": {"codec": "vp9"}, "output": "a.webm"}, "codec vp9 (setting codec)"),
        ({"settings": {"codec": "prores"}, "output": "a.mov"}, "codec prores (setting codec)"),
        ({"settings": {"codec": "gif"}, "output": "a.gif"}, "codec gif (setting codec)"),
        ({"settings": {"codec": "h264-mkv"}, "output": "a.mkv"}, "codec h264-mkv (setting codec)"),
        ({"settings": {"codec": "aac"}, "output": "a.aac"}, "codec aac (setting codec)"),
        ({"settings": {"every_nth_frame": 2}}, "every_nth_frame 2 (setting every_nth_frame)"),
        ({"settings": {"audio_codec": "mp3"}}, "audio codec mp3 (setting audio_codec)"),
        ({"settings": {"codec": "h264", "audio_codec": "pcm-16"}, "output": "a.mkv"}, "audio codec pcm-16"),
    ],
)
def test_jobs_remotion_cannot_join_are_refused_naming_the_setting(
    config: SpoolConfig, job: dict[str, Any], reason: str
) -> None:
    assert reason in (refusal(config, job) or "")


def test_project_config_decides_what_the_job_leaves_out(config: SpoolConfig) -> None:
    reason = refusal(config, {}, {"codec": "prores"})
    assert reason is not None and "codec prores (the project's remotion.config.ts)" in reason
    assert "every_nth_frame 3 (the project's remotion.config.ts)" in (refusal(config, {}, {"everyNthFrame": 3}) or "")
    # The job's own setting wins over the config's.
    assert refusal(config, {"settings": {"codec": "h264"}}, {"codec": "prores"}) is None
    # Audio that is muted is never joined: its codec does not matter.
    assert refusal(config, {}, {"audioCodec": "mp3", "muted": True}) is None


def test_remotion_without_combine_chunks_is_refused(config: SpoolConfig) -> None:
    assert "Remotion 4.0.278, whose renderer cannot join chunks" in (refusal(config, {}, version="4.0.278") or "")
    assert refusal(config, {}, version="4.0.279") is None


def test_render_defaults_come_from_the_bundle(tmp_path: Path) -> None:
    assert render_defaults(tmp_path) == {}
    (tmp_path / ".spoolrender-render-defaults.json").write_text('{"renderMedia": {"codec": "vp8"}}', encoding="utf-8")
    assert render_defaults(tmp_path) == {"codec": "vp8"}
    (tmp_path / ".spoolrender-render-defaults.json").write_text("{", encoding="utf-8")
    with pytest.raises(RenderError, match="render defaults are unreadable"):
        render_defaults(tmp_path)


def chunks(*ranges: tuple[int, int]) -> tuple[ChunkPart, ...]:
    return tuple(ChunkPart(i, len(ranges), a, b) for i, (a, b) in enumerate(ranges))


def test_even_plans_with_a_shorter_last_chunk_can_be_joined() -> None:
    assert layout_problem(chunks((0, 149), (150, 299), (300, 449), (450, 599)), FrameSpan(0, 599, 30)) is None
    assert layout_problem(chunks((10, 19), (20, 29), (30, 31)), FrameSpan(10, 31, 30)) is None
    assert layout_problem(chunks((0, 6)), FrameSpan(0, 6, 25)) is None


@pytest.mark.parametrize(
    ("parts", "span", "problem"),
    [
        (chunks((0, 9), (10, 18), (19, 27)), FrameSpan(0, 27, 30), "chunk 2 has 9 frames: every chunk but the last"),
        (chunks((0, 9), (10, 24)), FrameSpan(0, 24, 30), "chunk 2 has 15 frames"),
        (chunks((0, 9), (11, 20)), FrameSpan(0, 20, 30), "chunk 2 starts at frame 11, expected 10"),
        (chunks((0, 9), (10, 19)), FrameSpan(0, 29, 30), "the chunks end at frame 19, the video at 29"),
        (chunks((5, 14)), FrameSpan(0, 14, 30), "chunk 1 starts at frame 5, expected 0"),
        (chunks((0, 3), (4, 7)), FrameSpan(0, 7, 30), "chunks of 4 frames cannot be joined seamlessly"),
        ((), FrameSpan(0, 7, 30), "no chunks to join"),
        ((ChunkPart(1, 2, 10, 19), ChunkPart(0, 2, 0, 9)), FrameSpan(0, 19, 30), "not numbered 1..2 in order"),
    ],
)
def test_plans_remotion_would_join_out_of_step_are_refused(
    parts: tuple[ChunkPart, ...], span: FrameSpan, problem: str
) -> None:
    assert problem in (layout_problem(parts, span) or "")


def test_a_chunk_knows_the_chunk_length_of_its_plan() -> None:
    assert frames_per_chunk(ChunkPart(0, 4, 0, 149), 0) == 150
    assert frames_per_chunk(ChunkPart(2, 4, 310, 459), 10) == 150
    assert frames_per_chunk(ChunkPart(3, 4, 460, 470), 10) == 150  # the last, shorter
    for chunk, start in [(ChunkPart(1, 3, 10, 24), 0), (ChunkPart(1, 3, 15, 29), 1), (ChunkPart(0, 2, 3, 9), 0)]:
        with pytest.raises(RenderError, match="is not part of a plan Remotion can join") as info:
            frames_per_chunk(chunk, start)
        assert (info.value.kind, info.value.transient) == ("chunk-plan", False)


def test_composition_start_is_the_frame_range_start() -> None:
    assert composition_start({}) == 0
    assert composition_start({"frame_range": [30, 90]}) == 30
    assert composition_start({"frame_range": 7}) == 7
