"""Render cache keys: a digest of canonical JSON, and file contents hashed once per version.

A key must change whenever anything the output depends on changes, and must be the same
on every host that would render the same bytes: so it is built from values (canonical JSON:
sorted keys, no spaces, no NaN) and file *contents*, never from paths of scratch files,
job ids or times.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from pathlib import Path
from typing import Any

# Bump when what goes into a key changes: old entries then never match. 2: a command's
# chunked templates, and cached commands no longer see $SPOOLRENDER_JOB_ID/_ATTEMPT/_THREADS.
KEY_VERSION = 2
_CHUNK = 1 << 20


def digest_of(parts: dict[str, Any]) -> str:
    """The sha256 hex digest of ``parts`` as canonical JSON."""
    text = json.dumps({"key_version": KEY_VERSION, **parts}, sort_keys=True, separators=(",", ":"),
                      ensure_ascii=False, allow_nan=False)  # fmt: skip
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


class FileDigests:
    """sha256 of files, remembered per (device, inode, size, mtime): a command's program is
    read once per version, not once per job (a Python interpreter is ~6 MB)."""

    def __init__(self) -> None:
        self._known: dict[tuple[str, int, int, int, int], str] = {}
        self._lock = threading.Lock()  # safe to share between slots

    def of(self, path: Path) -> str:
        st = os.stat(path)
        identity = (str(path), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
        with self._lock:
            known = self._known.get(identity)
        if known is None:
            known = sha256_file(path)
            with self._lock:
                self._known[identity] = known
        return known


def stat_identity(path: Path) -> list[Any]:
    """Path, size and mtime of a file that is too big to read per job (a browser), or
    ``[path, None, None]`` when it is missing (the render itself will say so)."""
    try:
        st = os.stat(path)
    except OSError:
        return [str(path), None, None]
    return [str(path), st.st_size, st.st_mtime_ns]
