"""A poster image per published video: one frame, extracted once, cached beside the job's records.

The frame comes from the ffmpeg that Remotion ships in its compositor package (the one
Remotion itself renders with; no Debian ffmpeg is needed), fed the very file
:func:`.outputs.open_output` verified (by descriptor, so no path is opened twice). The
JPEG goes to ``done/<job>/poster.jpg`` by a rename, so a reader never sees half of one;
a server that may not write there (another user) still answers, without caching.
"""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import threading
from pathlib import Path

from spoolrender.config.spool_config import SpoolConfig
from spoolrender.serve.outputs import Published, open_output
from spoolrender.serve.readmodel import ApiError
from spoolrender.spool.layout import new_token

log = logging.getLogger(__name__)

POSTER_NAME = "poster.jpg"
MAX_POSTER_BYTES = 4 * 1024 * 1024
FFMPEG_SECONDS = 60.0
POSTER_WIDTH = 640
# Extraction decodes video: a few at a time, whatever the number of clients asking.
_EXTRACTING = threading.BoundedSemaphore(2)
_job_locks: dict[Path, threading.Lock] = {}
_job_locks_lock = threading.Lock()


def find_ffmpeg(config: SpoolConfig) -> Path | None:
    """Remotion's ffmpeg in the configured project (``node_modules/@remotion/compositor-*``)."""
    modules = config.remotion_project / "node_modules" / "@remotion"
    for candidate in sorted(modules.glob("compositor-*/ffmpeg")):
        if os.access(candidate, os.X_OK):
            return candidate
    return None


def _cached(job_dir: Path) -> bytes | None:
    try:
        fd = os.open(job_dir / POSTER_NAME, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as fh:
        data = fh.read(MAX_POSTER_BYTES + 1)
    return data if 0 < len(data) <= MAX_POSTER_BYTES else None


def _extract(ffmpeg: Path, video_fd: int, at_seconds: float) -> bytes:
    # The verified descriptor is handed over as /dev/fd/N: ffmpeg reads (and seeks in)
    # exactly the file that was checked, whatever happens to the path meanwhile.
    argv = [
        str(ffmpeg), "-v", "error", "-nostdin", "-ss", f"{at_seconds:g}", "-i", f"/dev/fd/{video_fd}",
        "-frames:v", "1", "-vf", f"scale='min({POSTER_WIDTH},iw)':-2", "-f", "image2pipe", "-c:v", "mjpeg", "-",
    ]  # fmt: skip
    try:
        done = subprocess.run(argv, pass_fds=(video_fd,), capture_output=True, timeout=FFMPEG_SECONDS, check=False)
    except subprocess.TimeoutExpired as exc:
        raise ApiError(503, f"extracting the poster frame took over {FFMPEG_SECONDS:g} s") from exc
    if done.returncode != 0:
        reason = done.stderr.decode(errors="replace").strip().splitlines()[-1:] or ["no message"]
        raise ApiError(422, f"no poster: ffmpeg cannot read the video ({reason[0][:200]})")
    return done.stdout


def _store(job_dir: Path, data: bytes) -> None:
    temp = job_dir / f".{POSTER_NAME}.{new_token()[:8]}"
    try:
        # Written aside, then renamed in: a concurrent reader gets the whole poster or none.
        with open(temp, "xb") as fh:
            fh.write(data)
        os.replace(temp, job_dir / POSTER_NAME)
    except OSError as exc:
        log.info("poster of %s not cached: %s", job_dir.name, exc.strerror or exc)
        with contextlib.suppress(OSError):
            os.unlink(temp)


def poster(config: SpoolConfig, published: Published) -> bytes:
    """The poster JPEG of a published video (from the cache, or extracted now)."""
    if not published.is_video:
        raise ApiError(404, f"job {published.job_id!r} published a {published.suffix or 'suffix-less'} file: no poster")
    cached = _cached(published.job_dir)
    if cached is not None:
        return cached
    ffmpeg = find_ffmpeg(config)
    if ffmpeg is None:
        raise ApiError(
            404,
            f"no poster: Remotion's ffmpeg was not found under {config.remotion_project}/node_modules/@remotion "
            "(install the Remotion project: scripts/setup.sh)",
        )
    with _job_locks_lock:
        lock = _job_locks.setdefault(published.job_dir, threading.Lock())
    with lock:  # one extraction per job: the others wait and take the cached one
        cached = _cached(published.job_dir)
        if cached is not None:
            return cached
        video_fd, _ = open_output(config, published)
        try:
            with _EXTRACTING:
                # One second in (the first frame is often black); a shorter video: its first.
                data = _extract(ffmpeg, video_fd, 1.0) or _extract(ffmpeg, video_fd, 0.0)
        finally:
            os.close(video_fd)
        if not data:
            raise ApiError(422, f"no poster: the video of job {published.job_id!r} has no frame")
        _store(published.job_dir, data)
    with _job_locks_lock:
        _job_locks.pop(published.job_dir, None)
    return data
