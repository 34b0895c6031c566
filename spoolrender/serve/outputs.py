"""Serving the videos done jobs published: which file, opened how, and byte ranges.

Only a file a done job published is ever served, and only the very file: the job's
``result.json`` names it (a path under the output root, never a path from a request),
every directory on the way is opened without following symlinks (a link planted in the
output root after publishing leads nowhere), and the file's inode must be the one the
job's run record noted when it was rendered, with the size it had (a file put in its
place later is not it).
"""

from __future__ import annotations

import errno
import json
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from spoolrender import defaults
from spoolrender.config.spool_config import SpoolConfig
from spoolrender.serve.readmodel import ApiError, find_entries

# By suffix; anything else is sent as a download (application/octet-stream, attachment).
MEDIA_TYPES = {
    ".mp4": "video/mp4",
    ".m4v": "video/mp4",
    ".webm": "video/webm",
    ".mov": "video/quicktime",
    ".mkv": "video/x-matroska",
    ".gif": "image/gif",
    ".png": "image/png",
    ".jpg": "image/jpeg",
    ".jpeg": "image/jpeg",
    ".webp": "image/webp",
    ".mp3": "audio/mpeg",
    ".m4a": "audio/mp4",
    ".aac": "audio/aac",
    ".wav": "audio/wav",
    ".ogg": "audio/ogg",
}
VIDEO_SUFFIXES = frozenset(s for s, t in MEDIA_TYPES.items() if t.startswith("video/"))
RANGE = re.compile(r"[ \t]*([0-9]*)[ \t]*-[ \t]*([0-9]*)[ \t]*")
MAX_RANGE_DIGITS = 30  # a number this long is past any file: unsatisfiable, not an error


@dataclass(frozen=True)
class Published:
    """The output a done job published."""

    job_id: str
    job_dir: Path  # done/<id>.<uid>: where its records (and a cached poster) live
    rel: PurePosixPath  # under the output root
    inode: int | None  # as rendered (None: older records did not say)
    size: int | None  # as rendered

    @property
    def suffix(self) -> str:
        return self.rel.suffix.lower()

    @property
    def media_type(self) -> str:
        return MEDIA_TYPES.get(self.suffix, "application/octet-stream")

    @property
    def is_video(self) -> bool:
        return self.suffix in VIDEO_SUFFIXES


def output_urls(job_id: str, output: str | None, *, posters: bool) -> dict[str, str | None]:
    """``output_url`` and ``poster_url`` (a video, and ``posters`` can be made) of a done job
    whose result names ``output``."""
    if not output:
        return {"output_url": None, "poster_url": None}
    video = posters and PurePosixPath(output).suffix.lower() in VIDEO_SUFFIXES
    return {"output_url": f"/jobs/{job_id}/output", "poster_url": f"/jobs/{job_id}/poster" if video else None}


def _relative(output_root: Path, output: str) -> PurePosixPath | None:
    path = PurePosixPath(output)
    if path.is_absolute():
        try:
            path = path.relative_to(PurePosixPath(output_root))
        except ValueError:
            return None  # not under this host's output root: nothing of ours to serve
    if not path.parts or any(part in ("", ".", "..") for part in path.parts):
        return None
    return path


def _publish_record(result: dict[str, Any]) -> dict[str, Any]:
    """The ``publish`` part of the run that rendered the output (relative path, inode)."""
    for run in reversed(result.get("runs") or []):
        publish = run.get("publish") if isinstance(run, dict) else None
        if isinstance(publish, dict):
            return publish
    return {}


def published_output(config: SpoolConfig, job_id: str) -> Published:
    """The output of the newest done entry of ``job_id``; a 404 if there is none."""
    for where in find_entries(config, job_id):
        if where.state != "done":
            continue
        try:
            with open(where.path / defaults.RESULT_FILENAME, "rb") as fh:
                result = json.loads(fh.read())
        except (OSError, ValueError):
            continue
        if not isinstance(result, dict):
            continue
        publish = _publish_record(result)
        # The run record's path is relative to the output root, so it holds on a host that
        # mounts the output root elsewhere; result.json's absolute path is the fallback.
        rel = None
        for output in (publish.get("output"), result.get("output")):
            if rel is None and isinstance(output, str):
                rel = _relative(config.output_root, output)
        if rel is not None:
            inode, size = publish.get("inode"), publish.get("bytes")
            return Published(
                job_id,
                where.path,
                rel,
                inode if isinstance(inode, int) else None,
                size if isinstance(size, int) else None,
            )
    raise ApiError(404, f"job {job_id!r} has no published output (only done jobs have one)")


def open_output(config: SpoolConfig, published: Published) -> tuple[int, os.stat_result]:
    """An open descriptor of exactly the published file, and its stat; else a 404."""
    gone = ApiError(404, f"the output of job {published.job_id!r} is no longer where it was published")
    try:
        fd = os.open(config.output_root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise ApiError(503, f"the output root cannot be opened: {exc.strerror}") from exc
    try:
        # One component at a time, relative to the last, never following a symlink: the
        # path cannot be bent anywhere else by a link planted after publishing.
        for part in published.rel.parts[:-1]:
            next_fd = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            os.close(fd)
            fd = next_fd
        file_fd = os.open(published.rel.name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=fd)
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ELOOP, errno.ENOTDIR, errno.EACCES):
            raise gone from exc
        raise ApiError(503, f"the output of job {published.job_id!r} cannot be opened: {exc.strerror}") from exc
    finally:
        os.close(fd)
    st = os.fstat(file_fd)
    if (
        not stat.S_ISREG(st.st_mode)
        or (published.inode is not None and st.st_ino != published.inode)
        or (published.size is not None and st.st_size != published.size)
    ):
        os.close(file_fd)
        raise gone  # replaced (rerun of another job, or by hand) since this job published it
    return file_fd, st


def parse_range(header: str | None, size: int) -> tuple[int, int] | None:
    """The inclusive byte range a ``Range`` header asks of a ``size``-byte file.

    None: send the whole file (no header, another unit, or several ranges: answering
    those with the whole file is allowed, and one range is all a video element asks).
    An ApiError 416 when the range is malformed or starts past the end.
    """
    if header is None:
        return None
    unit, sep, spec = header.partition("=")
    if not sep or unit.strip().lower() != "bytes":
        return None
    if "," in spec:
        return None
    m = RANGE.fullmatch(spec)
    if m is None or not (m.group(1) or m.group(2)):
        raise ApiError(416, "malformed Range header: expected bytes=START-END, bytes=START- or bytes=-SUFFIX")
    first, last = m.group(1), m.group(2)
    if len(first) > MAX_RANGE_DIGITS or len(last) > MAX_RANGE_DIGITS:
        # Absurdly long numbers: a start that long is past the end, an end that long is "to the end".
        first = first if len(first) <= MAX_RANGE_DIGITS else str(size)
        last = last if len(last) <= MAX_RANGE_DIGITS else str(max(size - 1, 0))
    if not first:  # the last N bytes
        length = int(last)
        if length == 0 or size == 0:
            raise ApiError(416, "the requested range is empty")
        return max(0, size - length), size - 1
    start = int(first)
    end = int(last) if last else size - 1
    if end < start:
        raise ApiError(416, "malformed Range header: the end is before the start")
    if start >= size:
        raise ApiError(416, f"the range starts past the end of the file ({size} bytes)")
    return start, min(end, size - 1)
