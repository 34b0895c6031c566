"""Is a chunk, or a joined video, what a split job needs? Checked with the project's own
ffprobe (shipped in @remotion/compositor-*), like :mod:`output_check` checks whole renders.

A chunk: its h264 video part has exactly the chunk's frames; its AAC audio part (unless
the job is muted) covers the chunk: Remotion renders it with up to two AAC packets of
extra audio either side, plus the encoder's priming, which the join cuts off.

A joined video: exactly the span's frames; every frame's timestamp one frame after the
previous one, so no frame is missing, doubled or shifted at a join; the audio packets
back to back (each starts where the previous one ends) and the audio as long as the video,
within :data:`AUDIO_SHORT_PACKETS` packets short and :data:`AUDIO_LONG_PACKETS` packets
and a frame long.
(ffprobe reads the timestamps as the container stores them; the joined audio is also
decoded and compared with a whole render's in the tests.)
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from fractions import Fraction
from pathlib import Path
from typing import Any

from spoolrender.core.vocabulary import FailureKind
from spoolrender.errors import ChunkPartInvalid, RenderError
from spoolrender.renderers.base import ChunkPart, FrameSpan
from spoolrender.renderers.remotion import output_check

AAC_PACKET_SAMPLES = 1024
# A chunk's audio part: Remotion's padding (2 packets either side) and the encoder's
# priming (2 packets) around the chunk, and a packet for rounding to packet borders.
CHUNK_AUDIO_EXTRA_PACKETS = 8
# The joined audio against the video. combineChunks() cuts each part at the AAC packet
# nearest to its frame boundary (half a packet either way), so the audio may end up to a
# packet early. It keeps the last part's tail: Remotion renders each chunk's audio to the
# AAC packet border two packets past the chunk's end, in whole video frames, and the
# encoder flushes a final packet; so the audio may run over the video by up to four
# packets and one frame. Measured here (48 kHz, 30 fps): joins 1.7 to 4.4 packets over
# (40-93 ms; the most when the last chunk is the shortest), whole renders of the same jobs
# 1.9 to 2.9. Beyond these bounds audio is missing or doubled somewhere.
AUDIO_SHORT_PACKETS = 1
AUDIO_LONG_PACKETS = 4
# How far a frame's timestamp may be from where the frame count puts it: less than a
# frame, so that a dropped, doubled or shifted frame is always caught.
FRAME_SLACK = Fraction(1, 4)


def _bad(text: str) -> RenderError:
    return RenderError(text, transient=True, kind=FailureKind.VERIFY)


def _time_base(stream: dict[str, Any]) -> Fraction:
    try:
        return Fraction(str(stream["time_base"]))
    except (KeyError, ValueError, ZeroDivisionError) as exc:
        raise _bad(f"ffprobe gave no time base for the {stream.get('codec_type')} stream") from exc


def check_chunk(ffprobe: Path | str, chunk: ChunkPart, fps: float, video: Path, audio: Path | None) -> None:
    """ChunkPartInvalid unless the chunk's video part (and audio part, if it has one) is complete."""
    name = f"chunk {chunk.index + 1} of {chunk.count} (frames {chunk.first}-{chunk.last})"
    try:
        output_check.check_video(ffprobe, video, "h264", chunk.frames)
    except RenderError as exc:
        raise ChunkPartInvalid(chunk.index, f"{name}: {exc.message}") from exc
    if audio is None:
        return
    data = output_check.probe(
        ffprobe, audio, "-count_packets", "-show_entries", "stream=codec_type,codec_name,sample_rate,nb_read_packets"
    )
    stream = next((s for s in data.get("streams", []) if s.get("codec_type") == "audio"), None)
    if stream is None or stream.get("codec_name") != "aac":
        raise ChunkPartInvalid(chunk.index, f"{name}: its audio part {audio.name} is not AAC audio")
    rate = int(stream.get("sample_rate") or 0)
    packets = int(stream.get("nb_read_packets") or 0)
    if rate <= 0:
        raise ChunkPartInvalid(chunk.index, f"{name}: its audio part has no sample rate")
    covered = packets * AAC_PACKET_SAMPLES / rate
    needed = chunk.frames / fps
    extra = CHUNK_AUDIO_EXTRA_PACKETS * AAC_PACKET_SAMPLES / rate
    if not needed <= covered <= needed + extra:
        raise ChunkPartInvalid(
            chunk.index,
            f"{name}: its audio part lasts {covered:.3f} s, expected {needed:.3f} s to {needed + extra:.3f} s",
        )


def check_joined(ffprobe: Path | str, path: Path, span: FrameSpan, audio: bool, joins: Sequence[int]) -> None:
    """RenderError unless ``path`` has the span's frames, no gap at any join (``joins``:
    the first frame of each chunk after the first, counted from the span's first frame)
    and, when ``audio``, back-to-back audio as long as the video."""
    data = output_check.probe(
        ffprobe, path, "-count_frames",
        "-show_entries", "stream=index,codec_type,codec_name,time_base,sample_rate,nb_read_frames"
        ":packet=stream_index,pts,duration",
    )  # fmt: skip
    streams = {s.get("index"): s for s in data.get("streams", [])}
    video = next((s for s in streams.values() if s.get("codec_type") == "video"), None)
    sound = next((s for s in streams.values() if s.get("codec_type") == "audio"), None)
    if video is None or video.get("codec_name") != "h264":
        raise _bad(f"the joined file has no h264 video stream ({video and video.get('codec_name')})")
    counted = int(video.get("nb_read_frames") or 0)
    if counted != span.frames:
        raise _bad(f"the joined video has {counted} frames, expected {span.frames}")
    packets: dict[Any, list[dict[str, Any]]] = {}
    for packet in data.get("packets", []):
        packets.setdefault(packet.get("stream_index"), []).append(packet)
    video_seconds = _check_frame_times(packets.get(video["index"], []), _time_base(video), span, joins)
    if not audio:
        if sound is not None:
            raise _bad("the joined file has an audio stream, but its chunks had none")
        return
    if sound is None or sound.get("codec_name") != "aac":
        raise _bad("the joined file has no AAC audio stream, but its chunks had audio")
    _check_audio(packets.get(sound["index"], []), _time_base(sound), int(sound.get("sample_rate") or 0), video_seconds,
                 span, joins)  # fmt: skip


def _at_join(frame: int, joins: Sequence[int]) -> str:
    """' (the join of chunks i and i+1)' when ``frame`` is the first frame of a chunk."""
    if frame in joins:
        i = list(joins).index(frame) + 1
        return f" (the join of chunks {i} and {i + 1})"
    return ""


def _check_frame_times(packets: list[dict[str, Any]], base: Fraction, span: FrameSpan, joins: Sequence[int]) -> float:
    """The video's duration in seconds; RenderError at the first frame out of step."""
    try:
        times = sorted(int(p["pts"]) for p in packets)
    except (KeyError, TypeError, ValueError) as exc:
        raise _bad("the joined video has frames without timestamps") from exc
    if len(times) != span.frames:
        raise _bad(f"the joined video has {len(times)} packets, expected {span.frames} frames")
    frame = 1 / Fraction(span.fps).limit_denominator(1001 * 1000)
    for k, pts in enumerate(times):
        at = (pts - times[0]) * base
        if abs(at - k * frame) > FRAME_SLACK * frame:
            raise _bad(
                f"gap in the joined video at frame {span.first + k}{_at_join(k, joins)}: it is shown at "
                f"{float(at):.4f} s, expected {float(k * frame):.4f} s"
            )
    return float(span.frames * frame)


def _check_audio(
    packets: list[dict[str, Any]], base: Fraction, rate: int, video_seconds: float, span: FrameSpan,
    joins: Sequence[int],
) -> None:  # fmt: skip
    try:
        timed = sorted((int(p["pts"]), int(p["duration"])) for p in packets)
    except (KeyError, TypeError, ValueError) as exc:
        raise _bad("the joined audio has packets without timestamps") from exc
    if not timed or rate <= 0:
        raise _bad("the joined audio stream is empty")
    # An MP4 stores each packet's duration as the distance to the next one, so a hole in
    # the audio shows up as a packet longer than AAC's 1024 samples (or one that does not
    # start where the previous one ended, in other containers).
    packet_ticks = Fraction(AAC_PACKET_SAMPLES, rate) / base
    for (pts, duration), (following, _) in itertools.pairwise(timed):
        if following != pts + duration or abs(duration - packet_ticks) > 1:
            at = float((pts - timed[0][0]) * base)
            near = min(joins, key=lambda j: abs(j / span.fps - at), default=None)
            where = f" (near the join at {near / span.fps:.3f} s)" if near is not None else ""
            lasts, should = float((following - pts) * base) * 1000, AAC_PACKET_SAMPLES / rate * 1000
            raise _bad(
                f"gap in the joined audio at {at:.4f} s{where}: the packet there lasts {lasts:.1f} ms, "
                f"an AAC packet {should:.1f} ms"
            )
    last_pts, last_duration = timed[-1]
    seconds = float((last_pts + last_duration - timed[0][0]) * base)
    packet = AAC_PACKET_SAMPLES / rate
    low = video_seconds - AUDIO_SHORT_PACKETS * packet
    high = video_seconds + AUDIO_LONG_PACKETS * packet + 1 / span.fps
    if not low <= seconds <= high:
        raise _bad(
            f"the joined audio lasts {seconds:.3f} s, the video {video_seconds:.3f} s "
            f"(expected {low:.3f} s to {high:.3f} s)"
        )
