"""What a Remotion job may render: the settings table, `still:` and the combination rules,
refused with a reason at parse time (before any render). Real renders: test_outputs.py."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from support.spool_jobs import write_spool_config

from spoolrender.config.spool_config import SpoolConfig, load_config
from spoolrender.errors import JobInvalid
from spoolrender.jobfile import parse_job
from spoolrender.jobfile.media import SETTINGS, remotion_options
from spoolrender.spool.layout import SpoolLayout


def parse(job: dict[str, Any], config: SpoolConfig) -> Any:
    return parse_job(yaml.safe_dump({"id": "j", "composition": "Main", **job}).encode(), "j.yaml", config)


def problems(job: dict[str, Any], config: SpoolConfig) -> list[str]:
    with pytest.raises(JobInvalid) as info:
        parse(job, config)
    return info.value.problems


@pytest.mark.parametrize(
    ("job", "output"),
    [
        ({}, "j.mp4"),
        ({"settings": {"codec": "h264-mkv"}}, "j.mkv"),
        ({"settings": {"codec": "vp9"}}, "j.webm"),
        ({"settings": {"codec": "prores", "prores_profile": "4444-xq"}}, "j.mov"),
        ({"settings": {"codec": "gif", "gif_loops": 0}}, "j.gif"),
        ({"settings": {"codec": "mp3"}}, "j.mp3"),
        ({"settings": {"codec": "aac"}}, "j.aac"),
        ({"settings": {"codec": "wav"}}, "j.wav"),
        ({"settings": {"codec": "mp3", "audio_codec": "pcm-16"}}, "j.wav"),
        ({"still": True}, "j.png"),
        ({"still": {"format": "jpeg"}}, "j.jpg"),
        ({"still": {"frame": 4, "format": "pdf"}}, "j.pdf"),
    ],
)
def test_default_output_name_follows_codec_or_still(job: dict[str, Any], output: str, config: SpoolConfig) -> None:
    assert str(parse(job, config).output) == output


@pytest.mark.parametrize(
    "job",
    [
        {"settings": {"codec": "h264", "x264_preset": "veryfast", "crf": 18, "pixel_format": "yuv444p",
                      "color_space": "bt709", "image_format": "jpeg", "jpeg_quality": 90, "audio_codec": "mp3",
                      "audio_bitrate": "320k", "frame_range": [0, 9], "every_nth_frame": 1, "gl": "angle"},
         "output": "x.mov"},
        {"settings": {"codec": "vp8", "pixel_format": "yuva420p", "video_bitrate": "2M", "muted": True}},
        {"settings": {"codec": "aac", "audio_bitrate": "128K"}, "output": "a.m4a"},
        {"still": {"frame": 0, "format": "jpeg"}, "settings": {"jpeg_quality": 50, "scale": 2, "gl": "egl"},
         "output": "s.jpeg"},
        {"still": True, "output": "shot.webp"},
        {"settings": {"frame_range": 5, "muted": False}},
    ],
)  # fmt: skip
def test_valid_combinations(job: dict[str, Any], config: SpoolConfig) -> None:
    parse(job, config)


@pytest.mark.parametrize(
    ("job", "reason"),
    [
        ({"still": True, "settings": {"codec": "h264"}},
         "field 'still': a still takes only scale, jpeg_quality, gl of the settings, not codec"),
        ({"still": {"format": "png"}, "output": "x.jpg"},
         "field 'still': output 'x.jpg' does not fit a png still: use a name ending in .png"),
        ({"still": {"format": "png"}, "settings": {"jpeg_quality": 80}},
         "field 'still': jpeg_quality is for jpeg stills, not png"),
        ({"output": "x.png"}, "output 'x.png' names an image: add `still:` to render one frame as an image"),
        ({"settings": {"codec": "h264", "prores_profile": "hq"}}, "prores_profile needs codec: prores, not h264"),
        ({"settings": {"prores_profile": "hq"}}, "prores_profile needs codec: prores in the job"),
        ({"settings": {"codec": "vp9", "gif_loops": 1}, "output": "x.webm"}, "gif_loops needs codec: gif, not vp9"),
        ({"settings": {"codec": "h265", "x264_preset": "fast"}}, "x264_preset needs codec: h264 or h264-mkv"),
        ({"settings": {"codec": "h264"}, "output": "x.webm"},
         "output 'x.webm' does not fit codec h264: use a name ending in .mp4 or .mkv or .mov"),
        ({"settings": {"codec": "mp3"}, "output": "x.mp4"}, "does not fit codec mp3: use a name ending in .mp3"),
        ({"settings": {"codec": "h264", "audio_codec": "pcm-16"}, "output": "x.mp4"},
         "does not fit codec h264 with audio codec pcm-16: use a name ending in .mkv or .mov"),
        ({"settings": {"codec": "vp8", "audio_codec": "aac"}, "output": "x.webm"},
         "codec vp8 cannot carry audio_codec aac (it takes: opus, pcm-16)"),
        ({"settings": {"codec": "wav", "crf": 20}}, "codec wav is audio only: crf concern video"),
        ({"settings": {"codec": "mp3", "muted": True}}, "codec mp3 is audio only: muted would leave nothing"),
        ({"settings": {"codec": "gif", "audio_bitrate": "64k"}}, "codec gif has no audio"),
        ({"settings": {"codec": "prores", "crf": 10}}, "codec prores has a fixed quality per profile"),
        ({"settings": {"crf": 20, "video_bitrate": "1M"}}, "crf and video_bitrate exclude each other"),
        ({"settings": {"image_format": "png", "jpeg_quality": 80}}, "jpeg_quality needs image_format: jpeg"),
        ({"settings": {"muted": True, "audio_codec": "aac"}}, "muted renders no audio"),
        ({"settings": {"codec": "h264", "pixel_format": "yuva420p"}}, "yuva420p (transparency) needs codec vp8 or vp9"),
        ({"settings": {"codec": "h264", "image_format": "none"}}, "image_format none is for audio-only codecs"),
        ({"settings": {"codec": "h264"}, "fallback": {"settings": {"codec": "gif"}}},
         "field 'fallback.settings': output 'j.mp4' does not fit codec gif"),
    ],
)  # fmt: skip
def test_invalid_combinations_get_a_reason(job: dict[str, Any], reason: str, config: SpoolConfig) -> None:
    found = problems(job, config)
    assert len(found) == 1, found
    assert reason in found[0], found


@pytest.mark.parametrize(
    ("key", "value", "reason"),
    [
        ("prores_profile", "ultra", "expected one of 4444-xq, 4444, hq, standard, light, proxy"),
        ("frame_range", [5, 2], "expected a frame number or [first, last]"),
        ("frame_range", [0, 1, 2], "expected a frame number or [first, last]"),
        ("frame_range", -1, "expected a frame number or [first, last]"),
        ("every_nth_frame", 0, "expected a whole number >= 1"),
        ("muted", "yes", "expected true or false"),
        ("audio_codec", "flac", "expected one of aac, mp3, opus, pcm-16"),
        ("audio_bitrate", 128, 'expected a rate such as "128k" or "2M", got int 128'),
        ("video_bitrate", "fast", "expected a rate such as"),
        ("video_bitrate", "0k", "expected a rate such as"),
        ("x264_preset", "turbo", "expected one of ultrafast"),
        ("jpeg_quality", 101, "expected a whole number 0-100"),
        ("image_format", "webp", "expected one of jpeg, png, none"),
        ("pixel_format", "rgb24", "expected one of yuv420p"),
        ("color_space", "srgb", "expected one of default, bt601, bt709, bt2020-ncl"),
        ("gif_loops", -1, "expected a whole number >= 0"),
        ("gl", "opengl", "expected one of angle, egl, swiftshader, swangle, vulkan, angle-egl"),
        ("env_variables", {"PATH": "/tmp"}, "unknown setting"),
        ("envVariables", {"PATH": "/tmp"}, "unknown setting"),
    ],
)
def test_invalid_setting_values(key: str, value: Any, reason: str, config: SpoolConfig) -> None:
    found = problems({"settings": {key: value}}, config)
    assert len(found) == 1, found
    assert found[0].startswith(f"field 'settings.{key}': {reason}"), found


@pytest.mark.parametrize(
    ("still", "reason"),
    [
        ({"frame": -1}, "frame: expected a whole number >= 0"),
        ({"frame": 1.5}, "frame: expected a whole number >= 0"),
        ({"format": "gif"}, "format: expected one of png, jpeg, webp, pdf"),
        ({"size": 2}, "'size' is unknown (known: frame, format)"),
        ("yes", "expected true or a mapping with frame and format"),
    ],
)
def test_invalid_still(still: Any, reason: str, config: SpoolConfig) -> None:
    found = problems({"still": still}, config)
    assert len(found) == 1, found
    assert found[0].startswith(f"field 'still': {reason}"), found


def test_still_only_for_remotion(spool: SpoolLayout) -> None:
    write_spool_config(spool, {"commands": {"x": ["true"]}})
    config = load_config(spool.root, environ={})
    job = {"renderer": "command", "command": "x", "still": True}
    with pytest.raises(JobInvalid) as info:
        parse_job(yaml.safe_dump(job).encode(), "j.yaml", config)
    assert info.value.problems == ["field 'still': only for renderer: remotion"]


def test_every_setting_maps_to_a_remotion_option() -> None:
    options = remotion_options({"prores_profile": "hq", "gif_loops": 2, "gl": "egl", "frame_range": [1, 2]})
    assert options == {"proResProfile": "hq", "numberOfGifLoops": 2, "chromiumOptions": {"gl": "egl"},
                       "frameRange": [1, 2]}  # fmt: skip
    # Snake case in the job file, Remotion's camelCase on the wire: one style each.
    assert all(key == key.lower() for key in SETTINGS)
