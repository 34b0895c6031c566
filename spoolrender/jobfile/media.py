"""What a Remotion job renders: its `settings:` (codec, quality, frames...), its `still:`,
and whether those fit together and fit the output's file name.

One table (``SETTINGS``) names each setting in the job file's style (snake_case), the
Remotion option it becomes, and the check of its value; the settings table of docs/job-files.md
mirrors it. The rules that involve several fields run once every field is read
(:func:`media_problems`), so that a bad combination is refused with a reason before any
render instead of failing inside Remotion minutes later.

Codec-dependent rules use the job's own ``codec``. A job without one renders with its
project's remotion.config.ts codec (or Remotion's h264), which the job file cannot see,
so only the rules that hold for any codec apply to it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any, Final

# Values are Remotion's own (its docs and `npx remotion render --codec` use them).
VIDEO_CODECS: Final = ("h264", "h264-mkv", "h265", "vp8", "vp9", "prores", "gif")
AUDIO_ONLY_CODECS: Final = ("mp3", "aac", "wav")
CODECS: Final = VIDEO_CODECS + AUDIO_ONLY_CODECS
AUDIO_CODECS: Final = ("aac", "mp3", "opus", "pcm-16")
PRORES_PROFILES: Final = ("4444-xq", "4444", "hq", "standard", "light", "proxy")
X264_PRESETS: Final = ("ultrafast", "superfast", "veryfast", "faster", "fast", "medium", "slow", "slower",
                       "veryslow", "placebo")  # fmt: skip
IMAGE_FORMATS: Final = ("jpeg", "png", "none")
PIXEL_FORMATS: Final = ("yuv420p", "yuva420p", "yuv422p", "yuv444p", "yuv420p10le", "yuv422p10le",
                        "yuv444p10le", "yuva444p10le")  # fmt: skip
COLOR_SPACES: Final = ("default", "bt601", "bt709", "bt2020-ncl")
GL_BACKENDS: Final = ("angle", "egl", "swiftshader", "swangle", "vulkan", "angle-egl")
STILL_FORMATS: Final = ("png", "jpeg", "webp", "pdf")

# codec -> (the audio codec Remotion picks by default, {audio codec -> output suffixes}),
# from Remotion 4's defaultFileExtensionMap / supportedAudioCodecs. The first suffix of
# the default audio codec is the default output suffix.
CODEC_FILES: Final[dict[str, tuple[str | None, dict[str, tuple[str, ...]]]]] = {
    "h264": ("aac", {"aac": (".mp4", ".mkv", ".mov"), "mp3": (".mp4", ".mkv", ".mov"), "pcm-16": (".mkv", ".mov")}),
    "h264-mkv": ("pcm-16", {"pcm-16": (".mkv",), "mp3": (".mkv",)}),
    "h265": ("aac", {"aac": (".mp4", ".mkv", ".hevc"), "pcm-16": (".mkv",)}),
    "vp8": ("opus", {"opus": (".webm",), "pcm-16": (".mkv",)}),
    "vp9": ("opus", {"opus": (".webm",), "pcm-16": (".mkv",)}),
    "prores": ("pcm-16", {"aac": (".mov", ".mkv", ".mxf"), "pcm-16": (".mov", ".mkv", ".mxf")}),
    "gif": (None, {}),
    "mp3": ("mp3", {"mp3": (".mp3",), "pcm-16": (".wav",)}),
    "aac": ("aac", {"aac": (".aac", ".m4a", ".m4b", ".3gp", ".mpg", ".mpeg"), "pcm-16": (".wav",)}),
    "wav": ("pcm-16", {"pcm-16": (".wav",)}),
}
STILL_SUFFIXES: Final = {"png": (".png",), "jpeg": (".jpg", ".jpeg"), "webp": (".webp",), "pdf": (".pdf",)}
DEFAULT_STILL_FORMAT: Final = "png"


def _shown(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 60 else text[:57] + '...'}"


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _one_of(choices: tuple[str, ...]) -> Callable[[Any], str | None]:
    def check(value: Any) -> str | None:
        return None if value in choices else f"expected one of {', '.join(choices)}, got {_shown(value)}"

    return check


def _whole_in(low: int, high: int | None) -> Callable[[Any], str | None]:
    def check(value: Any) -> str | None:
        if _whole(value) and value >= low and (high is None or value <= high):
            return None
        bound = f"{low}-{high}" if high is not None else f">= {low}"
        return f"expected a whole number {bound}, got {_shown(value)}"

    return check


def _scale(value: Any) -> str | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 16:
        return f"expected a number in (0, 16], got {_shown(value)}"
    return None


def _bitrate(value: Any) -> str | None:
    # Remotion passes it to ffmpeg's -b: a string such as "128k" or "2M", never a bare number.
    ok = isinstance(value, str) and len(value) > 1 and value[-1] in "kKM" and value[:-1].isdigit()
    return None if ok and int(value[:-1]) > 0 else f'expected a rate such as "128k" or "2M", got {_shown(value)}'


def _bool(value: Any) -> str | None:
    return None if isinstance(value, bool) else f"expected true or false, got {_shown(value)}"


def _frame_range(value: Any) -> str | None:
    if _whole(value) and value >= 0:
        return None
    pair = isinstance(value, list) and len(value) == 2 and all(_whole(v) and v >= 0 for v in value)
    if pair and value[0] <= value[1]:
        return None
    return f"expected a frame number or [first, last] (whole numbers, first <= last), got {_shown(value)}"


@dataclass(frozen=True)
class Setting:
    remotion: str  # the renderMedia()/renderStill() option (chromiumOptions.<key> for the browser's)
    check: Callable[[Any], str | None]
    meaning: str  # for the docs' table (docs/job-files.md) and reasons


SETTINGS: Final[dict[str, Setting]] = {
    "codec": Setting("codec", _one_of(CODECS), "video or audio-only codec"),
    "scale": Setting("scale", _scale, "size factor"),
    "crf": Setting("crf", _whole_in(0, 63), "constant rate factor (quality)"),
    "prores_profile": Setting("proResProfile", _one_of(PRORES_PROFILES), "ProRes profile (codec prores)"),
    "frame_range": Setting("frameRange", _frame_range, "one frame or [first, last]"),
    "every_nth_frame": Setting("everyNthFrame", _whole_in(1, None), "render every nth frame"),
    "muted": Setting("muted", _bool, "no audio track"),
    "audio_codec": Setting("audioCodec", _one_of(AUDIO_CODECS), "audio codec of the file"),
    "audio_bitrate": Setting("audioBitrate", _bitrate, "audio bit rate"),
    "video_bitrate": Setting("videoBitrate", _bitrate, "video bit rate (instead of crf)"),
    "x264_preset": Setting("x264Preset", _one_of(X264_PRESETS), "x264 speed/size preset (h264)"),
    "jpeg_quality": Setting("jpegQuality", _whole_in(0, 100), "JPEG quality of frames or stills"),
    "image_format": Setting("imageFormat", _one_of(IMAGE_FORMATS), "format of the captured frames"),
    "pixel_format": Setting("pixelFormat", _one_of(PIXEL_FORMATS), "pixel format of the video"),
    "color_space": Setting("colorSpace", _one_of(COLOR_SPACES), "colour space of the video"),
    "gif_loops": Setting("numberOfGifLoops", _whole_in(0, None), "GIF repeats (0: plays once)"),
    "gl": Setting("chromiumOptions.gl", _one_of(GL_BACKENDS), "Chromium's OpenGL backend"),
}
# The settings a still takes; the others concern video or audio encoding.
STILL_SETTINGS: Final = ("scale", "jpeg_quality", "gl")
# The settings that only a video codec (not an audio-only one) takes.
VIDEO_ONLY: Final = ("crf", "prores_profile", "every_nth_frame", "video_bitrate", "x264_preset", "image_format",
                     "pixel_format", "color_space", "gif_loops", "jpeg_quality")  # fmt: skip
AUDIO_SETTINGS: Final = ("muted", "audio_codec", "audio_bitrate")


def setting_problem(key: Any, value: Any) -> str | None:
    """Why ``value`` is not a valid value of setting ``key``, or None."""
    setting = SETTINGS.get(key)
    if setting is None:
        return f"unknown setting (known: {', '.join(SETTINGS)})"
    return setting.check(value)


def remotion_options(settings: Mapping[str, Any]) -> dict[str, Any]:
    """The job's settings under Remotion's option names (``gl`` under ``chromiumOptions``)."""
    options: dict[str, Any] = {}
    for key, value in settings.items():
        name = SETTINGS[key].remotion
        if name.startswith("chromiumOptions."):
            options.setdefault("chromiumOptions", {})[name.split(".", 1)[1]] = value
        else:
            options[name] = value
    return options


def check_still(value: Any) -> tuple[dict[str, Any] | None, list[str]]:
    """``still:`` -> ({frame, format (None: from the output's suffix)}, problems).
    ``still: true`` is frame 0; absent, null or false is no still."""
    if value is None or value is False:
        return None, []
    if value is True:
        return {"frame": 0, "format": None}, []
    if not isinstance(value, dict):
        return None, [f"expected true or a mapping with frame and format, got {_shown(value)}"]
    problems = [f"'{str(k)[:60]}' is unknown (known: frame, format)" for k in value if k not in ("frame", "format")]
    frame = value.get("frame", 0)
    if not _whole(frame) or frame < 0:
        problems.append(f"frame: expected a whole number >= 0, got {_shown(frame)}")
    fmt = value.get("format")
    if fmt is not None and fmt not in STILL_FORMATS:
        problems.append(f"format: expected one of {', '.join(STILL_FORMATS)}, got {_shown(fmt)}")
    return {"frame": frame, "format": fmt}, problems


def still_format_of(output: PurePosixPath) -> str | None:
    return next((fmt for fmt, suffixes in STILL_SUFFIXES.items() if output.suffix.lower() in suffixes), None)


def default_suffix(settings: Mapping[str, Any], still: Mapping[str, Any] | None) -> str | None:
    """The output suffix of a job without ``output:``; None: the spool's default."""
    if still is not None:
        return STILL_SUFFIXES[still["format"] or DEFAULT_STILL_FORMAT][0]
    codec = settings.get("codec")
    if codec is None:
        return None
    audio_default, files = CODEC_FILES[codec]
    audio = settings.get("audio_codec", audio_default)
    if audio is None or audio not in files:
        return "." + codec if audio is None else None  # gif; or a pair refused by combination_problems
    return files[audio][0]


def combination_problems(
    settings: Mapping[str, Any], still: Mapping[str, Any] | None, output: PurePosixPath
) -> list[str]:
    """Why these (valid) settings, still and output cannot render together; [] if they can."""
    if still is not None:
        return _still_problems(settings, still, output)
    problems: list[str] = []
    if still_format_of(output) is not None:
        problems.append(f"output {str(output)!r} names an image: add `still:` to render one frame as an image")
    codec = settings.get("codec")
    if "crf" in settings and "video_bitrate" in settings:
        problems.append("crf and video_bitrate exclude each other: set one")
    if settings.get("jpeg_quality") is not None and settings.get("image_format") not in (None, "jpeg"):
        problems.append("jpeg_quality needs image_format: jpeg")
    if settings.get("muted") is True and ("audio_codec" in settings or "audio_bitrate" in settings):
        problems.append("muted renders no audio: drop audio_codec and audio_bitrate")
    if codec is None:
        needs = {"prores_profile": "prores", "gif_loops": "gif", "x264_preset": "h264 or h264-mkv"}
        problems += [f"{key} needs codec: {c} in the job" for key, c in needs.items() if key in settings]
        return problems
    problems += _codec_problems(codec, settings)
    audio_default, files = CODEC_FILES[codec]
    audio = settings.get("audio_codec", audio_default)
    if codec == "gif":
        suffixes: tuple[str, ...] = (".gif",)
    elif audio not in files:
        problems.append(f"codec {codec} cannot carry audio_codec {audio} (it takes: {', '.join(files)})")
        return problems
    else:
        suffixes = files[audio]
    if output.suffix.lower() not in suffixes:
        problems.append(
            f"output {str(output)!r} does not fit codec {codec}"
            + (f" with audio codec {audio}" if "audio_codec" in settings else "")
            + f": use a name ending in {' or '.join(suffixes)}"
        )
    return problems


def _codec_problems(codec: str, settings: Mapping[str, Any]) -> list[str]:
    problems: list[str] = []
    if codec in AUDIO_ONLY_CODECS:
        video = [key for key in VIDEO_ONLY if key in settings]
        if video:
            problems.append(f"codec {codec} is audio only: {', '.join(video)} concern video")
        if settings.get("muted") is True:
            problems.append(f"codec {codec} is audio only: muted would leave nothing to render")
        return problems
    if "prores_profile" in settings and codec != "prores":
        problems.append(f"prores_profile needs codec: prores, not {codec}")
    if "gif_loops" in settings and codec != "gif":
        problems.append(f"gif_loops needs codec: gif, not {codec}")
    if "x264_preset" in settings and codec not in ("h264", "h264-mkv"):
        problems.append(f"x264_preset needs codec: h264 or h264-mkv, not {codec}")
    if codec == "prores" and ("crf" in settings or "video_bitrate" in settings):
        problems.append("codec prores has a fixed quality per profile: drop crf and video_bitrate")
    if codec == "gif" and any(key in settings for key in AUDIO_SETTINGS):
        problems.append("codec gif has no audio: drop muted, audio_codec and audio_bitrate")
    if settings.get("image_format") == "none":
        problems.append(f"image_format none is for audio-only codecs, not {codec}")
    if settings.get("pixel_format") == "yuva420p" and codec not in ("vp8", "vp9"):
        problems.append(f"pixel_format yuva420p (transparency) needs codec vp8 or vp9, not {codec}")
    return problems


def _still_problems(settings: Mapping[str, Any], still: Mapping[str, Any], output: PurePosixPath) -> list[str]:
    problems: list[str] = []
    others = [key for key in settings if key not in STILL_SETTINGS]
    if others:
        problems.append(f"a still takes only {', '.join(STILL_SETTINGS)} of the settings, not {', '.join(others)}")
    fmt = still["format"] or still_format_of(output) or DEFAULT_STILL_FORMAT
    if output.suffix.lower() not in STILL_SUFFIXES[fmt]:
        problems.append(f"output {str(output)!r} does not fit a {fmt} still: use a name ending in "
                        f"{' or '.join(STILL_SUFFIXES[fmt])}")  # fmt: skip
    if "jpeg_quality" in settings and fmt != "jpeg":
        problems.append(f"jpeg_quality is for jpeg stills, not {fmt}")
    return problems
