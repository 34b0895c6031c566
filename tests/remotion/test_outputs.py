"""The outputs and options of Remotion jobs: stills, audio-only codecs, video options.

Real renders of the repo's Tiny composition (160x90, 30 fps, a few frames) through one
warm Remotion worker (RemotionRenderer, as a runner slot uses it), each output checked by
the renderer's own verify (the project's ffprobe) and by the test. Marked `remotion`.
"""

from __future__ import annotations

import itertools
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.checkout import FFPROBE, REMOTION, REMOTION_MARKS
from support.processes import spoolrender_cmd
from support.spool_jobs import drop, entries, write_spool_config

from spoolrender.config.spool_config import load_config
from spoolrender.errors import RenderError
from spoolrender.jobfile import parse_job
from spoolrender.renderers.base import CancelToken, RenderRequest, RenderResult
from spoolrender.renderers.remotion import output_check
from spoolrender.renderers.remotion.renderer import RemotionRenderer
from spoolrender.spool.layout import init_spool

WIDTH, HEIGHT, FPS = 160, 90, 30

pytestmark = REMOTION_MARKS


class Slot:
    """One runner slot's renderer, fed parsed job files; outputs go to a temp dir."""

    def __init__(self, root: Path, cache: Path) -> None:
        layout = init_spool(root / "spool")
        (layout.root / "spoolrender.yaml").write_text(
            yaml.safe_dump({"remotion_project": str(REMOTION), "cache_dir": str(cache)}), encoding="utf-8"
        )
        self.config = load_config(layout.root, environ={})
        self.renderer = RemotionRenderer(self.config)
        self.root = root
        self.cache = cache
        self._n = itertools.count()

    def render(self, job: dict[str, Any]) -> tuple[RenderRequest, RenderResult]:
        n = next(self._n)
        spec = parse_job(yaml.safe_dump({"id": f"job-{n}", "composition": "Tiny", **job}).encode(), "j.yaml",
                         self.config)  # fmt: skip
        work = self.root / f"work-{n}"
        work.mkdir()
        job_file = work / "job.yaml"
        job_file.write_text("{}", encoding="utf-8")
        props, settings, _ = spec.settings_for_attempt(1)
        request = RenderRequest(spec=spec, job_file=job_file, output=work / ("output" + spec.output.suffix),
                                work_dir=work, log=work / "run.log", threads=1, attempt=1, props=props,
                                settings=settings)  # fmt: skip
        result = self.renderer.render(request, lambda fraction, stage=None: None, CancelToken())
        self.renderer.verify(request, result)
        return request, result


@pytest.fixture(scope="module")
def slot(tmp_path_factory: pytest.TempPathFactory, sample_bundles: Path) -> Iterator[Slot]:
    s = Slot(tmp_path_factory.mktemp("outputs"), sample_bundles)
    yield s
    s.renderer.close()


def probe(path: Path) -> dict[str, Any]:
    entries = "stream=codec_type,codec_name,width,height,nb_read_frames,profile:format=duration"
    return output_check.probe(FFPROBE, path, "-count_frames", "-show_entries", entries)


def stream(path: Path, kind: str) -> dict[str, Any]:
    return next(s for s in probe(path)["streams"] if s["codec_type"] == kind)


# --- stills ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("still", "output", "settings", "codec_name", "size"),
    [
        ({"frame": 3}, "a.png", {}, "png", (WIDTH, HEIGHT)),
        ({"frame": 0, "format": "jpeg"}, "b.jpg", {"jpeg_quality": 40, "scale": 0.5}, "mjpeg", (80, 45)),
    ],
)
def test_still_images(
    slot: Slot, still: Any, output: str, settings: dict[str, Any], codec_name: str, size: tuple[int, int]
) -> None:
    request, result = slot.render({"still": still, "output": output, "settings": settings, "props": {"frames": 5}})
    assert result.details["frames"] == 1
    image = stream(request.output, "video")
    assert image["codec_name"] == codec_name
    assert (image["width"], image["height"]) == size
    # verify refuses the same file as another size or format.
    with pytest.raises(RenderError, match=f"is {size[0]}x{size[1]}, expected 320x180"):
        output_check.check_still(FFPROBE, request.output, str(result.details["still"]), 320, 180)
    with pytest.raises(RenderError, match=f"is {codec_name}, expected webp|not a WebP"):
        output_check.check_still(FFPROBE, request.output, "webp", *size)


def test_still_webp(slot: Slot) -> None:
    # ffprobe cannot decode WebP: verify read the size from its header.
    request, _ = slot.render({"still": True, "output": "c.webp", "props": {"frames": 2}})
    assert request.output.read_bytes()[8:12] == b"WEBP"
    with pytest.raises(RenderError, match="expected a 161x90 WebP image"):
        output_check.check_still(FFPROBE, request.output, "webp", 161, 90)


def test_still_pdf_has_the_composition_page_size(slot: Slot) -> None:
    request, result = slot.render({"still": {"frame": 2, "format": "pdf"}, "props": {"frames": 4}})
    assert request.spec.output.name == "job-" + request.spec.id.split("-")[1] + ".pdf"  # default name from format
    data = request.output.read_bytes()
    assert data.startswith(b"%PDF-")
    assert result.details["still"] == "pdf"


def test_still_frame_past_the_end_fails_for_good(slot: Slot) -> None:
    with pytest.raises(RenderError) as info:
        slot.render({"still": {"frame": 9}, "props": {"frames": 4}})
    assert info.value.kind == "invalid-settings"
    assert not info.value.transient
    assert "still frame 9 is past the composition's last frame 3" in info.value.message


# --- audio-only codecs -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("codec", "output", "settings", "codec_name"),
    [
        ("mp3", None, {"audio_bitrate": "64k"}, "mp3"),
        ("aac", "e.m4a", {}, "aac"),
        ("wav", None, {}, "pcm_s16le"),
    ],
)
def test_audio_only(slot: Slot, codec: str, output: str | None, settings: dict[str, Any], codec_name: str) -> None:
    job: dict[str, Any] = {"settings": {"codec": codec, **settings}, "props": {"frames": 15}}
    if output is not None:
        job["output"] = output
    request, result = slot.render(job)
    assert request.output.suffix == (Path(output).suffix if output else "." + codec)
    data = probe(request.output)
    assert [s["codec_type"] for s in data["streams"]] == ["audio"]
    assert data["streams"][0]["codec_name"] == codec_name
    assert abs(float(data["format"]["duration"]) - 0.5) < 0.2  # 15 frames at 30 fps
    assert result.details["codec"] == codec
    with pytest.raises(RenderError, match=r"expected 1.000 s \(30 frames at 30 fps\)"):
        output_check.check_audio(FFPROBE, request.output, 30, FPS)


# --- video options ---------------------------------------------------------------------


def test_h264_mkv_with_encoder_options(slot: Slot) -> None:
    settings = {"codec": "h264-mkv", "x264_preset": "ultrafast", "pixel_format": "yuv444p", "color_space": "bt709",
                "image_format": "jpeg", "jpeg_quality": 60, "muted": True}  # fmt: skip
    request, result = slot.render({"settings": settings, "props": {"frames": 4}})
    assert request.output.suffix == ".mkv"
    video = output_check.probe(FFPROBE, request.output, "-show_entries", "stream=codec_name,pix_fmt,color_space")
    assert video["streams"][0] == {"codec_name": "h264", "pix_fmt": "yuv444p", "color_space": "bt709"}
    assert result.details["frames"] == 4


def test_prores_profile_and_frame_range(slot: Slot) -> None:
    request, result = slot.render(
        {"settings": {"codec": "prores", "prores_profile": "proxy", "frame_range": [1, 3]}, "props": {"frames": 6}}
    )
    video = output_check.probe(FFPROBE, request.output, "-count_frames", "-show_entries",
                               "stream=codec_name,codec_tag_string,nb_read_frames")["streams"][0]  # fmt: skip
    assert (video["codec_name"], video["codec_tag_string"]) == ("prores", "apco")  # apco: ProRes 422 Proxy
    assert int(video["nb_read_frames"]) == 3 == result.details["frames"]


def test_gif_every_nth_frame_and_loops(slot: Slot) -> None:
    request, result = slot.render(
        {"settings": {"codec": "gif", "every_nth_frame": 2, "gif_loops": 3}, "props": {"frames": 6}}
    )
    assert int(stream(request.output, "video")["nb_read_frames"]) == 3 == result.details["frames"]
    data = request.output.read_bytes()
    # The NETSCAPE2.0 application extension holds the repeat count (little-endian).
    at = data.index(b"NETSCAPE2.0") + len(b"NETSCAPE2.0") + 2
    assert int.from_bytes(data[at : at + 2], "little") == 3


def test_vp9_bitrate_and_single_frame_range(slot: Slot) -> None:
    request, result = slot.render(
        {"settings": {"codec": "vp9", "video_bitrate": "200k", "frame_range": 2}, "output": "f.webm",
         "props": {"frames": 4}}
    )  # fmt: skip
    assert stream(request.output, "video")["codec_name"] == "vp9"
    assert result.details["frames"] == 1


def test_gl_backend_relaunches_the_browser(slot: Slot) -> None:
    _, before = slot.render({"still": True, "output": "g.png", "props": {"frames": 2}})
    _, after = slot.render(
        {"still": True, "output": "h.png", "settings": {"gl": "swiftshader"}, "props": {"frames": 2}}
    )
    launches = after.details["worker"]["browserLaunches"] - before.details["worker"]["browserLaunches"]
    assert launches == 1


def test_frame_range_past_the_end_fails_for_good(slot: Slot) -> None:
    with pytest.raises(RenderError) as info:
        slot.render({"settings": {"frame_range": [2, 8]}, "props": {"frames": 4}})
    assert (info.value.kind, info.value.transient) == ("invalid-settings", False)
    assert "frame_range ends at 8, past the composition's last frame 3" in info.value.message


# --- through a runner ------------------------------------------------------------------


def test_drain_publishes_a_still_and_an_audio_file_and_refuses_a_bad_combination(slot: Slot, tmp_path: Path) -> None:
    layout = init_spool(tmp_path / "spool")
    write_spool_config(layout, {"remotion_project": str(REMOTION), "cache_dir": str(slot.cache), "slots": 1})
    drop(layout, "poster.yaml", {"composition": "Tiny", "still": {"frame": 1}, "props": {"frames": 3}})
    drop(layout, "voice.yaml", {"composition": "Tiny", "settings": {"codec": "wav"}, "props": {"frames": 6}})
    drop(layout, "typo.yaml", {"composition": "Tiny", "settings": {"prores_profile": "hq"}})
    proc = subprocess.run(spoolrender_cmd("run", "--drain", "--spool", str(layout.root)), capture_output=True,
                          text=True, timeout=600, check=False)  # fmt: skip
    assert proc.returncode == 3, proc.stderr  # 3: a job failed for good (typo)
    out = layout.root / "output"
    output_check.check_still(FFPROBE, out / "poster.png", "png", WIDTH, HEIGHT)
    output_check.check_audio(FFPROBE, out / "voice.wav", 6, FPS)
    assert sorted(entries(layout, "done")) and not (out / "typo.mp4").exists()
    [failed] = [p for p in layout.failed.iterdir() if p.name.startswith("typo.")]
    failure = json.loads((failed / "failure.json").read_text(encoding="utf-8"))
    assert "prores_profile needs codec: prores" in json.dumps(failure)
