"""Split Remotion jobs, rendered for real: chunks rendered, verified and joined by the
Remotion renderer, as a split job's runs use it (frame_span, render of each chunk, verify,
join, verify_join), compared with a whole render of the same job.

The repo's Tiny composition (160x90, 30 fps) with its tone (`tone: true`: a looped 440 Hz
sine from remotion/public), so that the joined audio can be checked sample by sample.
Marked `remotion`; the renders are tiny and shared by the tests of this module.
"""

from __future__ import annotations

import itertools
import json
import shutil
import subprocess
import wave
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.checkout import FFPROBE, REMOTION, REMOTION_MARKS, REPO
from support.node_modules import link_node_modules

from spoolrender.config.spool_config import load_config
from spoolrender.errors import ChunkPartInvalid, RenderCancelled, RenderError
from spoolrender.jobfile import parse_job
from spoolrender.renderers.base import CancelToken, ChunkPart, FrameSpan, JoinRequest, RenderRequest, RenderResult
from spoolrender.renderers.remotion import join_check, output_check
from spoolrender.renderers.remotion.renderer import RemotionRenderer
from spoolrender.renderers.remotion.splitting import CHUNK_AUDIO, CHUNK_MANIFEST, CHUNK_VIDEO
from spoolrender.spool.layout import init_spool

OTHER_VERSION = "4.0.527"  # installed by scripts/setup.sh --test (see tests/remotion/test_projects.py)
OTHER = REPO / ".cache" / f"remotion-{OTHER_VERSION}"
FFMPEG = FFPROBE.parent / "ffmpeg"
FPS = 30
FRAMES = 45  # four chunks: three of 12 frames, the last of 9
PROPS = {"frames": FRAMES, "color": "#0ea5e9", "tone": True}

pytestmark = REMOTION_MARKS


def ignore_progress(fraction: float | None, stage: str | None = None) -> None:
    pass


class Slot:
    """One runner slot's renderer; each request gets its own work directory."""

    def __init__(self, root: Path, project: Path = REMOTION) -> None:
        layout = init_spool(root / "spool")
        (layout.root / "spoolrender.yaml").write_text(
            yaml.safe_dump({"remotion_project": str(project), "cache_dir": str(root / "cache")}), encoding="utf-8"
        )
        self.config = load_config(layout.root, environ={})
        self.renderer = RemotionRenderer(self.config)
        self.root = root
        self._n = itertools.count()

    def request(self, job: dict[str, Any], chunk: ChunkPart | None = None) -> RenderRequest:
        n = next(self._n)
        document = {"id": f"job-{n}", "composition": "Tiny", "props": PROPS, **job}
        spec = parse_job(yaml.safe_dump(document).encode(), "j.yaml", self.config)
        work = self.root / f"work-{n}"
        work.mkdir()
        job_file = work / "job.yaml"
        job_file.write_text("{}", encoding="utf-8")
        props, settings, _ = spec.settings_for_attempt(1)
        output = work / "chunk" if chunk is not None else work / ("output" + spec.output.suffix)
        if chunk is not None:
            output.mkdir()  # a chunk renders into an existing, empty directory
        return RenderRequest(spec=spec, job_file=job_file, output=output, work_dir=work, log=work / "run.log",
                             threads=1, attempt=1, props=props, settings=settings, chunk=chunk)  # fmt: skip

    def render(self, request: RenderRequest) -> RenderResult:
        result = self.renderer.render(request, ignore_progress, CancelToken())
        self.renderer.verify(request, result)
        return result

    def join_request(self, job: RenderRequest, parts: list[tuple[ChunkPart, Path]], span: FrameSpan) -> JoinRequest:
        work = self.root / f"join-{next(self._n)}"
        work.mkdir()
        return JoinRequest(spec=job.spec, parts=tuple(parts), span=span, output=work / "joined.mp4", work_dir=work,
                           log=work / "run.log", threads=1, props=job.props, settings=job.settings)  # fmt: skip


@dataclass(frozen=True)
class Split:
    job: RenderRequest
    span: FrameSpan
    parts: list[tuple[ChunkPart, Path]]
    join: JoinRequest
    joined: RenderResult
    whole: Path


def plan(span: FrameSpan, count: int) -> list[ChunkPart]:
    """Chunks as Remotion Lambda plans them: F = ceil(frames / count), the last shorter."""
    per_chunk = -(-span.frames // count)
    firsts = range(span.first, span.last + 1, per_chunk)
    return [ChunkPart(i, len(firsts), a, min(a + per_chunk - 1, span.last)) for i, a in enumerate(firsts)]


def split_render(slot: Slot, job: dict[str, Any], count: int) -> Split:
    parent = slot.request(job)
    span = slot.renderer.frame_span(parent, CancelToken())
    parts = []
    for chunk in plan(span, count):
        request = slot.request(job, chunk)
        slot.render(request)
        parts.append((chunk, request.output))
    join = slot.join_request(parent, parts, span)
    joined = slot.renderer.join(join, ignore_progress, CancelToken())
    slot.renderer.verify_join(join, joined)
    whole = slot.request(job)
    slot.render(whole)
    return Split(parent, span, parts, join, joined, whole.output)


@pytest.fixture(scope="module")
def slot(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Slot]:
    s = Slot(tmp_path_factory.mktemp("chunks"))
    yield s
    s.renderer.close()


@pytest.fixture(scope="module")
def split(slot: Slot) -> Split:
    return split_render(slot, {}, 4)


def streams(path: Path) -> dict[str, dict[str, Any]]:
    data = output_check.probe(FFPROBE, path, "-count_frames", "-show_entries",
                              "stream=codec_type,codec_name,nb_read_frames,duration")  # fmt: skip
    return {s["codec_type"]: s for s in data["streams"]}


def samples(path: Path, tmp: Path) -> list[int]:
    """The file's audio as 48 kHz mono 16-bit samples (decoded by Remotion's ffmpeg)."""
    out = tmp / (path.stem + "-audio.wav")
    subprocess.run([str(FFMPEG), "-v", "error", "-y", "-i", str(path), "-vn", "-ac", "1", "-ar", "48000",
                    "-c:a", "pcm_s16le", str(out)], check=True, timeout=120)  # fmt: skip
    with wave.open(str(out)) as fh:
        raw = fh.readframes(fh.getnframes())
    return [int.from_bytes(raw[i : i + 2], "little", signed=True) for i in range(0, len(raw), 2)]


# --- the plan and the chunks -------------------------------------------------------------


def test_frame_span_counts_props_and_frame_range(slot: Slot) -> None:
    assert slot.renderer.frame_span(slot.request({}), CancelToken()) == FrameSpan(0, FRAMES - 1, FPS)
    # calculateMetadata with the job's props, then the job's frame_range.
    ranged = slot.request({"props": {"frames": 90}, "settings": {"frame_range": [10, 69]}})
    assert slot.renderer.frame_span(ranged, CancelToken()) == FrameSpan(10, 69, FPS)
    with pytest.raises(RenderError) as info:
        slot.renderer.frame_span(slot.request({"settings": {"frame_range": [0, 99]}}), CancelToken())
    assert (info.value.kind, info.value.transient) == ("invalid-settings", False)
    assert "frame_range ends at 99, past the composition's last frame 44" in info.value.message


def test_each_chunk_holds_its_frames_and_aligned_audio(split: Split) -> None:
    assert [(c.first, c.last) for c, _ in split.parts] == [(0, 11), (12, 23), (24, 35), (36, 44)]
    for chunk, directory in split.parts:
        assert sorted(p.name for p in directory.iterdir()) == sorted([CHUNK_AUDIO, CHUNK_MANIFEST, CHUNK_VIDEO])
        video = streams(directory / CHUNK_VIDEO)["video"]
        assert (video["codec_name"], int(video["nb_read_frames"])) == ("h264", chunk.frames)
        assert streams(directory / CHUNK_AUDIO)["audio"]["codec_name"] == "aac"
        manifest = json.loads((directory / CHUNK_MANIFEST).read_text(encoding="utf-8"))
        assert (manifest["first"], manifest["last"], manifest["audio"]) == (chunk.first, chunk.last, True)


# --- the join ----------------------------------------------------------------------------


def test_joined_video_matches_a_whole_render(split: Split, tmp_path: Path) -> None:
    joined, whole = streams(split.join.output), streams(split.whole)
    assert int(joined["video"]["nb_read_frames"]) == FRAMES == int(whole["video"]["nb_read_frames"])
    assert float(joined["video"]["duration"]) == float(whole["video"]["duration"]) == FRAMES / FPS
    assert joined["audio"]["codec_name"] == "aac"
    packet = 1024 / 48000
    assert abs(float(joined["audio"]["duration"]) - float(whole["audio"]["duration"])) <= 3 * packet
    assert split.joined.details["chunks"] == 4 and split.joined.details["audio"] is True
    # No gap, click or shift at the joins (0.4, 0.8 and 1.2 s).
    assert_same_audio(split, tmp_path)


def assert_same_audio(split: Split, tmp: Path) -> None:
    """The joined audio is the whole render's, sample for sample, as far as the video
    lasts (AAC decodes identically because each chunk's audio was encoded on the packet
    borders of the whole): a gap, click or shift at a join would differ."""
    ours, theirs = samples(split.join.output, tmp), samples(split.whole, tmp)
    n = int(split.span.frames / FPS * 48000)
    assert len(ours) >= n - 1024 and len(theirs) >= n
    assert max(abs(a - b) for a, b in zip(ours[:n], theirs[:n], strict=False)) <= 64
    assert max(abs(a) for a in ours[: n // 2]) > 4000  # the tone is really there


def test_frame_range_is_split_from_its_first_frame(slot: Slot, tmp_path: Path) -> None:
    ranged = split_render(slot, {"props": {**PROPS, "frames": 40}, "settings": {"frame_range": [7, 26]}}, 2)
    assert [(c.first, c.last) for c, _ in ranged.parts] == [(7, 16), (17, 26)]
    assert int(streams(ranged.join.output)["video"]["nb_read_frames"]) == 20
    assert_same_audio(ranged, tmp_path)


def test_another_slot_verifies_a_join_with_its_own_worker(slot: Slot, split: Split) -> None:
    other = RemotionRenderer(slot.config)
    try:
        other.verify_join(split.join, split.joined)  # starts this slot's worker for its ffprobe
        assert other.workers_started == 1
    finally:
        other.close()


def test_muted_job_joins_without_audio(slot: Slot) -> None:
    muted = split_render(slot, {"props": {**PROPS, "frames": 10}, "settings": {"muted": True}}, 2)
    for _, directory in muted.parts:
        assert not (directory / CHUNK_AUDIO).exists()
    assert set(streams(muted.join.output)) == {"video"}
    assert int(streams(muted.join.output)["video"]["nb_read_frames"]) == 10
    assert muted.joined.details["audio"] is False


# --- what fails ------------------------------------------------------------------------


def copy_parts(split: Split, tmp: Path) -> list[tuple[ChunkPart, Path]]:
    parts = []
    for chunk, directory in split.parts:
        copy = tmp / f"chunk-{chunk.index}"
        shutil.copytree(directory, copy)
        parts.append((chunk, copy))
    return parts


def test_corrupt_chunk_fails_its_verify_and_the_join(slot: Slot, split: Split, tmp_path: Path) -> None:
    parts = copy_parts(split, tmp_path)
    chunk, directory = parts[1]
    video = directory / CHUNK_VIDEO
    video.write_bytes(video.read_bytes()[: video.stat().st_size // 2])  # a half-copied part
    request = replace(slot.request({}), output=directory, chunk=chunk)
    with pytest.raises(ChunkPartInvalid) as info:
        slot.renderer.verify(request, RenderResult())
    assert info.value.index == 1 and "chunk 2 of 4 (frames 12-23)" in info.value.message
    # The join of a truncated part does not verify: frames are missing at the join.
    join = slot.join_request(split.job, parts, split.span)
    with pytest.raises(RenderError, match=r"frames, expected 45|gap in the joined video"):
        slot.renderer.verify_join(join, slot.renderer.join(join, ignore_progress, CancelToken()))


def test_missing_or_foreign_chunk_parts_are_named(slot: Slot, split: Split, tmp_path: Path) -> None:
    parts = copy_parts(split, tmp_path)
    (parts[2][1] / CHUNK_AUDIO).unlink()
    with pytest.raises(ChunkPartInvalid, match=r"chunk 3 of 4 \(frames 24-35\) is missing its audio.aac") as info:
        slot.renderer.join(slot.join_request(split.job, parts, split.span), ignore_progress, CancelToken())
    assert info.value.index == 2
    # Chunk 1's directory offered as chunk 2: its manifest says which chunk it holds.
    swapped = [parts[0], (parts[1][0], parts[0][1]), *parts[2:]]
    with pytest.raises(ChunkPartInvalid, match="holds another chunk") as info:
        slot.renderer.join(slot.join_request(split.job, swapped, split.span), ignore_progress, CancelToken())
    assert info.value.index == 1
    # A chunk of the same frames rendered for another video (another frame_range start).
    shutil.copy(split.parts[2][1] / CHUNK_AUDIO, parts[2][1] / CHUNK_AUDIO)
    manifest_path = parts[3][1] / CHUNK_MANIFEST
    manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    manifest_path.write_text(json.dumps({**manifest, "composition_start": 3}), encoding="utf-8")
    with pytest.raises(ChunkPartInvalid, match="chunk 4 was rendered for a video from frame 3 at 30 fps") as info:
        slot.renderer.join(slot.join_request(split.job, parts, split.span), ignore_progress, CancelToken())
    assert info.value.index == 3
    shutil.rmtree(parts[0][1])
    with pytest.raises(ChunkPartInvalid, match=r"chunk 1 of 4 .* is missing"):
        slot.renderer.join(slot.join_request(split.job, parts, split.span), ignore_progress, CancelToken())


def test_cancelled_chunk_leaves_its_directory_empty(slot: Slot) -> None:
    cancel = CancelToken()
    seen: list[float | None] = []

    def progress(fraction: float | None, stage: str | None = None) -> None:
        seen.append(fraction)
        if fraction:  # frames are being rendered: stop now
            cancel.cancel("user")

    request = slot.request({"props": {**PROPS, "frames": 600}}, ChunkPart(0, 2, 0, 299))
    with pytest.raises(RenderCancelled, match="user"):
        slot.renderer.render(request, progress, cancel)
    assert seen and list(request.output.iterdir()) == []  # no part, no manifest
    # A request made after the cancel is not started at all; the slot's worker renders
    # the next chunk as usual.
    with pytest.raises(RenderCancelled):
        slot.renderer.frame_span(slot.request({}), cancel)
    again = slot.request({"props": {**PROPS, "frames": 10}}, ChunkPart(0, 2, 0, 4))
    slot.render(again)
    assert json.loads((again.output / CHUNK_MANIFEST).read_text(encoding="utf-8"))["last"] == 4


def test_chunk_of_four_frames_is_refused_before_rendering(slot: Slot) -> None:
    with pytest.raises(RenderError) as info:
        slot.render(slot.request({}, ChunkPart(0, 12, 0, 3)))
    assert (info.value.kind, info.value.transient) == ("chunk-plan", False)
    assert "chunks of 4 frames cannot be joined seamlessly" in info.value.message


def test_codec_the_job_file_did_not_set_is_refused_by_the_worker(slot: Slot) -> None:
    # split_refusal refuses it first; a chunk that comes anyway fails for good.
    with pytest.raises(RenderError) as info:
        slot.render(slot.request({"settings": {"codec": "vp8"}, "output": "x.webm"}, ChunkPart(0, 3, 0, 14)))
    assert (info.value.kind, info.value.transient) == ("invalid-settings", False)
    assert "codec vp8 cannot be rendered in chunks" in info.value.message


def test_verify_join_finds_a_gap_in_the_timestamps(split: Split, tmp_path: Path) -> None:
    joins = [12, 24, 36]
    # Every packet from the second join (frame 24, 0.8 s) on shifted by one frame (512
    # ticks of 1/15360 s), audio from 0.5 s on by one AAC packet: what a lost chunk tail
    # or a doubled frame looks like.
    video_gap = tmp_path / "video-gap.mp4"
    shift = "if(gte(DTS\\,12288)\\,{0}+512\\,{0})"
    subprocess.run([str(FFMPEG), "-v", "error", "-y", "-i", str(split.join.output), "-c", "copy", "-bsf:v",
                    f"setts=pts={shift.format('PTS')}:dts={shift.format('DTS')}", str(video_gap)],
                   check=True, timeout=60)  # fmt: skip
    with pytest.raises(RenderError, match="gap in the joined video at frame 2"):
        join_check.check_joined(FFPROBE, video_gap, split.span, True, joins)
    audio_gap = tmp_path / "audio-gap.mp4"
    subprocess.run([str(FFMPEG), "-v", "error", "-y", "-i", str(split.join.output), "-c", "copy", "-bsf:a",
                    "setts=ts=if(gte(TS\\,24000)\\,TS+1024\\,TS)", str(audio_gap)], check=True, timeout=60)  # fmt: skip
    with pytest.raises(RenderError, match=r"gap in the joined audio at 0\.4.* s \(near the join at 0\.400 s\)"):
        join_check.check_joined(FFPROBE, audio_gap, split.span, True, joins)
    with pytest.raises(RenderError, match="has an audio stream, but its chunks had none"):
        join_check.check_joined(FFPROBE, split.join.output, split.span, False, joins)


STARTER_WITH_SOUND = {
    "src/index.ts": "import {registerRoot} from 'remotion';\nimport {Root} from './Root';\nregisterRoot(Root);\n",
    "src/Root.tsx": """
import {AbsoluteFill, Audio, Composition, staticFile} from 'remotion';
const Sound = () => (
  <AbsoluteFill style={{background: 'green'}}><Audio src={staticFile('tone.wav')} loop /></AbsoluteFill>
);
export const Root = () => (
  <Composition id="Sound" component={Sound} width={64} height={64} fps={30} durationInFrames={20} />
);
""",
}


@pytest.mark.skipif(
    not (OTHER / "node_modules" / ".spoolrender-installed").is_file(),
    reason=f"Remotion {OTHER_VERSION} missing: run scripts/setup.sh --test",
)
def test_a_users_project_joins_with_its_own_remotion(tmp_path: Path) -> None:
    # Shaped like Remotion's starters (remotion and @remotion/cli listed), another version.
    project = tmp_path / "starter"
    for rel, text in STARTER_WITH_SOUND.items():
        (project / rel).parent.mkdir(parents=True, exist_ok=True)
        (project / rel).write_text(text, encoding="utf-8")
    (project / "public").mkdir()
    shutil.copy(REMOTION / "public" / "tone.wav", project / "public" / "tone.wav")
    deps = {"remotion": OTHER_VERSION, "@remotion/cli": OTHER_VERSION, "react": "19.2.0", "react-dom": "19.2.0"}
    (project / "package.json").write_text(json.dumps({"name": "starter", "private": True, "dependencies": deps}))
    link_node_modules(project, OTHER / "node_modules")
    slot = Slot(tmp_path / "slot", project)
    try:
        result = split_render(slot, {"composition": "Sound", "props": {}}, 2)
    finally:
        slot.renderer.close()
    assert [(c.first, c.last) for c, _ in result.parts] == [(0, 9), (10, 19)]
    assert int(streams(result.join.output)["video"]["nb_read_frames"]) == 20
    assert streams(result.join.output)["audio"]["codec_name"] == "aac"
    logs = "".join(p.read_text(encoding="utf-8") for p in (tmp_path / "slot").glob("*/run.log"))
    assert f'"remotionVersion": "{OTHER_VERSION}"' in logs  # its worker loaded the project's Remotion
