"""The render cache's entries: verified outputs by cache key, on the output filesystem.

Layout, under ``<output_root>/.spoolrender-cache/`` (the output root, not the spool: a hit
is published with ``link()``, and links cannot cross filesystems; every host that shares
the spool mounts this output root, so every host shares the cache):

- ``entries/<key>/output`` the rendered bytes and ``entries/<key>/entry.json`` their size,
  sha256, source job and render details. An entry appears whole or not at all: it is
  assembled in ``staging/`` and renamed into place in one step.
- ``staging/`` entries being stored, and entries being removed (renamed out first, so that
  a half-deleted directory is never taken for an entry).
- ``inflight/<key>/`` who renders a key now (render_cache_flight.py).

The cache is only ever a source of bytes that are checked before use: an entry is reused
only if its output has the recorded size and sha256, so a corrupt, truncated or missing
entry is a miss (and is removed), whatever happened to it (an edit in place of an output
that shares its inode, a power cut before its data reached the disk, an operator).

Outputs stored in or published from the cache share one inode (a hard link) and are
made read-only (mode 0444): a tool that rewrote one in place would change every output
linked to it. Deleting or replacing (rename over) a published output is fine.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import shutil
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from spoolrender import defaults
from spoolrender.durable import write_json_atomic
from spoolrender.layout import list_names, new_token
from spoolrender.renderers.cache_keys import sha256_file

log = logging.getLogger(__name__)

ENTRIES = "entries"
STAGING = "staging"
INFLIGHT = "inflight"
OUTPUT_NAME = "output"
META_NAME = "entry.json"
READ_ONLY = stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH
# What a run that used the cache records in its details, and result.json at its top level:
# cache (hit, miss or stored), cache_key, cache_source (the job that rendered a hit:
# id, uid, host, run, stored) and cache_waited_seconds (waiting for an identical job).
RESULT_FIELDS = ("cache", "cache_key", "cache_source", "cache_waited_seconds")
# The heartbeat stage of a job waiting for an identical job's render (status, show).
WAITING_STAGE = "waiting for an identical job"


def cache_root(output_root: Path) -> Path:
    return output_root / defaults.RENDER_CACHE_DIR


@dataclass(frozen=True)
class Entry:
    key: str
    path: Path  # entries/<key>
    bytes: int
    sha256: str
    source: dict[str, Any]  # the job that rendered it: id, uid, host, run, stored (wall time)
    details: dict[str, Any]  # the render's result details (frames, codec, ...)
    used: float = 0.0  # last use (the directory's mtime)

    @property
    def output(self) -> Path:
        return self.path / OUTPUT_NAME


@dataclass(frozen=True)
class Stored:
    """What :meth:`RenderCache.store` did: stored or not (and why not), what eviction removed."""

    stored: bool
    why_not: str | None = None
    evicted: list[str] = field(default_factory=list)
    total_bytes: int | None = None  # the cache's size after eviction, when it was measured


class RenderCache:
    """The entries of one output root's cache, bounded to ``max_bytes``."""

    def __init__(self, output_root: Path, max_bytes: int) -> None:
        self.root = cache_root(output_root)
        self.max_bytes = max_bytes

    @property
    def entries_dir(self) -> Path:
        return self.root / ENTRIES

    @property
    def staging_dir(self) -> Path:
        return self.root / STAGING

    def refusal(self) -> str | None:
        """Why the cache must not be used, or None. Its directories must be real ones: a
        symlink planted in their place (by whoever else can write to the output root)
        would lead entries, and what the cache deletes, outside it."""
        for path in (self.root, self.entries_dir, self.staging_dir, self.root / INFLIGHT):
            try:
                if not stat.S_ISDIR(os.lstat(path).st_mode):
                    return f"{path} is a symlink or not a directory"
            except FileNotFoundError:
                continue  # created when first needed
        return None

    def entry_path(self, key: str) -> Path:
        return self.entries_dir / key

    def read_entry(self, key: str) -> Entry | None:
        """The entry of ``key`` as recorded (not verified), or None when there is none."""
        path = self.entry_path(key)
        try:
            return self._load(key)
        except FileNotFoundError:
            if os.path.isdir(path):
                self.remove(key, "its entry.json is missing")
            return None
        except (OSError, ValueError, KeyError, TypeError) as exc:
            self.remove(key, f"its entry.json is unreadable ({exc})")
            return None

    def _load(self, key: str) -> Entry:
        path = self.entry_path(key)
        raw = json.loads((path / META_NAME).read_bytes())
        source, details = dict(raw.get("source") or {}), dict(raw.get("details") or {})
        return Entry(key, path, int(raw["bytes"]), str(raw["sha256"]), source, details, os.stat(path).st_mtime)

    def take(self, key: str, dest: Path) -> Entry | None:
        """Link the entry of ``key`` to ``dest`` if it is intact; None is a miss.

        The bytes are checked through ``dest`` after the link (the same inode), so what is
        verified is exactly what will be published. A corrupt or missing entry is removed.
        Raises OSError only for trouble with ``dest`` itself.
        """
        entry = self.read_entry(key)
        if entry is None:
            return None
        try:
            os.link(entry.output, dest)
        except FileNotFoundError:
            if os.path.isdir(entry.path):
                self.remove(key, "its output is missing")
            return None  # else evicted or purged meanwhile: a plain miss
        except OSError as exc:
            if exc.errno != errno.EXDEV:
                raise
            log.warning("render cache %s is on another filesystem than the scratch dir: not used", self.root)
            return None
        try:
            # lstat: link() does not follow symlinks, so a symlink planted as an entry's
            # output would be linked as a symlink; only a regular file is ever published.
            st = os.lstat(dest)
            regular = stat.S_ISREG(st.st_mode)
            intact = regular and st.st_size == entry.bytes and sha256_file(dest) == entry.sha256
        except OSError:
            os.unlink(dest)
            raise
        if not intact:
            os.unlink(dest)
            found = f"has {st.st_size} bytes or another sha256" if regular else "is not a regular file"
            self.remove(key, f"its output {found} (recorded: {entry.bytes} bytes)")
            return None
        # The directory's mtime is the entry's last use (LRU). Set by the filesystem's
        # clock where it has one (NFS's SET_TO_SERVER_TIME), so hosts' clocks need not agree.
        with contextlib.suppress(OSError):  # evicted right after our link: our copy stands
            os.utime(entry.path)
        return entry

    def store(self, key: str, output: Path, source: dict[str, Any], details: dict[str, Any]) -> Stored:
        """Store the verified render ``output`` (a scratch file) as the entry of ``key``.

        Called before the run's publish decision. A run that then loses its fence (another
        runner recovered the job) has still stored a correct entry: it is a verified
        render of exactly these inputs, whoever publishes the job, so it is harmless and
        no fencing is needed here.
        """
        size = output.stat().st_size
        if size > self.max_bytes:
            return Stored(False, f"{size} bytes is over render_cache_max_bytes ({self.max_bytes})")
        target = self.entry_path(key)
        if os.path.isdir(target):
            return Stored(False, "an identical render was stored meanwhile")
        digest = sha256_file(output)
        self.staging_dir.mkdir(parents=True, exist_ok=True)
        self.entries_dir.mkdir(exist_ok=True)
        staging = self.staging_dir / f"{key}.{new_token()}"
        staging.mkdir()
        mode = stat.S_IMODE(os.stat(output).st_mode)
        try:
            # Read-only: the bytes will be shared (one inode) by the entry and every
            # output published from it; mode 0444 keeps tools from rewriting them in place.
            os.chmod(output, READ_ONLY)
            os.link(output, staging / OUTPUT_NAME)
            meta = {"key": key, "bytes": size, "sha256": digest, "source": source, "details": details}
            # No fsyncs: an entry whose data a power cut lost fails verification and is a miss.
            write_json_atomic(staging / META_NAME, meta, durable=False)
            # rename() of a directory onto an existing non-empty one fails (ENOTEMPTY or
            # EEXIST): of two runners storing the same key, the first entry stays whole.
            os.rename(staging, target)
        except OSError as exc:
            shutil.rmtree(staging, ignore_errors=True)
            with contextlib.suppress(OSError):
                os.chmod(output, mode)  # not stored: the output is the run's own again
            if exc.errno in (errno.ENOTEMPTY, errno.EEXIST):
                return Stored(False, "an identical render was stored meanwhile")
            raise
        evicted, total = self.evict(keep=key)
        return Stored(True, None, evicted, total)

    def list_entries(self) -> list[Entry]:
        """Every readable entry, least recently used first."""
        found = []
        for key in list_names(self.entries_dir):
            try:
                found.append(self._load(key))
            except (OSError, ValueError, KeyError, TypeError):
                continue  # being stored or removed right now, or corrupt: its next lookup removes it
        return sorted(found, key=lambda e: (e.used, e.key))

    def evict(self, keep: str | None = None) -> tuple[list[str], int]:
        """Remove least recently used entries until the cache fits ``max_bytes``.

        Several runners may evict at once and together remove a little more than needed;
        that costs a re-render at worst, and needs no lock across hosts. Returns the keys
        removed and the size left. Also clears staging left by runners killed mid-store.
        """
        entries = self.list_entries()
        total = sum(e.bytes for e in entries)
        evicted = []
        for entry in entries:
            if total <= self.max_bytes:
                break
            if entry.key == keep:
                continue
            if self.remove(entry.key, "least recently used (cache over render_cache_max_bytes)"):
                evicted.append(entry.key)
            total -= entry.bytes
        self._clear_staging(defaults.RENDER_CACHE_STAGING_S)
        return evicted, total

    def _clear_staging(self, older_than: float) -> None:
        now = time.time()
        for name in list_names(self.staging_dir):
            path = self.staging_dir / name
            with contextlib.suppress(OSError):
                if now - os.lstat(path).st_mtime >= older_than:
                    shutil.rmtree(path, ignore_errors=True)

    def remove(self, key: str, why: str) -> bool:
        """Remove an entry; True if this call removed it. Renamed out of entries/ first, so
        that nobody ever reads a half-deleted entry; outputs linked to it keep their bytes."""
        self.staging_dir.mkdir(parents=True, exist_ok=True)
        gone = self.staging_dir / f".removed.{key}.{new_token()}"
        try:
            os.rename(self.entry_path(key), gone)
        except FileNotFoundError:
            return False  # removed by someone else meanwhile
        log.info("render cache: removed entry %s: %s", key[:16], why)
        shutil.rmtree(gone, ignore_errors=True)
        return True

    def usage(self) -> tuple[int, int]:
        """(entries, bytes) of the cache now."""
        entries = self.list_entries()
        return len(entries), sum(e.bytes for e in entries)

    def purge(self, older_than: float | None = None, *, dry_run: bool = False) -> list[Entry]:
        """Remove every entry (or those unused for ``older_than`` seconds); returns them.

        Safe while runners use the cache: a hit linked before the removal keeps its bytes,
        one that comes after is a miss and renders. Staging left behind goes too (the
        in-flight claims of ended runs: :meth:`InFlight.clear_ended`).
        """
        now = time.time()
        chosen = [e for e in self.list_entries() if older_than is None or now - e.used >= older_than]
        if dry_run:
            return chosen
        removed = [e for e in chosen if self.remove(e.key, "purged")]
        self._clear_staging(0.0 if older_than is None else defaults.RENDER_CACHE_STAGING_S)
        return removed


def describe_result(result: dict[str, Any]) -> str | None:
    """One line for `show` about a done job's use of the cache (None: it did not use it)."""
    outcome = result.get("cache")
    if outcome is None:
        return None
    if outcome == "hit":
        source = result.get("cache_source") or {}
        text = f"cache: hit, published from the render of job {source.get('id')} (uid {source.get('uid')})"
    elif outcome == "stored":
        text = "cache: miss, rendered and stored in the render cache"
    else:
        text = "cache: miss, rendered (not stored)"
    waited = result.get("cache_waited_seconds")
    return text + (f" after waiting {waited:.1f} s for an identical job" if waited else "")


def describe_usage(output_root: Path, max_bytes: int) -> str | None:
    """One line for `status` about the render cache's size (None when there is no cache)."""
    cache = RenderCache(output_root, max_bytes)
    try:
        if not cache.entries_dir.is_dir():
            return None
        count, size = cache.usage()
    except OSError as exc:  # status must show the spool whatever the output root's state
        return f"render cache: cannot read {cache.root}: {exc.strerror or exc}"
    return f"render cache: {count} entries, {size / 1024**2:.1f} MiB of {max_bytes / 1024**2:.0f} MiB"
