"""The render cache's entries: verified outputs by cache key, on the output filesystem.

Layout, under ``<output_root>/.spoolrender-cache/`` (the output root, not the spool: a hit
is published with ``link()``, and links cannot cross filesystems; every host that shares
the spool mounts this output root, so every host shares the cache):

- ``entries/<key>/output`` the rendered bytes and ``entries/<key>/entry.json`` their size,
  sha256, source job and render details. An entry appears whole or not at all: it is
  assembled in ``staging/`` and renamed into place in one step, and only once the run
  that rendered it has decided to publish it (every check of the run passed).
- ``staging/`` entries being stored, and entries being removed (renamed out first, so that
  a half-deleted directory is never taken for an entry).
- ``inflight/<key>/`` who renders a key now (render_cache/in_flight.py).

The cache is only ever a source of bytes that are checked before use: an entry is reused
only if its output has the recorded size and sha256, so a corrupt, truncated or missing
entry is a miss (and is removed), whatever happened to it (an edit in place of an output
that shares its inode, a power cut before its data reached the disk, an operator).

Outputs stored in or published from the cache share one inode (a hard link) and are
made read-only (mode 0444): a tool that rewrote one in place would change every output
linked to it. Deleting or replacing (rename over) a published output is fine.

Whoever else can write to the output root must not be able to put bytes into the cache:
every directory and entry file must be the runner's alone (spoolrender.spool.trusted_dirs), and
a hit is never published from an inode that is not.
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
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from spoolrender import defaults
from spoolrender.render_cache.keys import sha256_file
from spoolrender.spool.durable import json_bytes
from spoolrender.spool.layout import new_token
from spoolrender.spool.trusted_dirs import (
    DIR_FLAGS,
    TRUSTED_DIR_MODE,
    UntrustedDir,
    open_root,
    open_trusted,
    trust_problem,
)

log = logging.getLogger(__name__)

ENTRIES = "entries"
STAGING = "staging"
INFLIGHT = "inflight"
OUTPUT_NAME = "output"
META_NAME = "entry.json"
READ_ONLY = stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH
# What a run that used the cache records in its details, and result.json at its top level:
# cache (hit, miss or stored), cache_key, cache_source (the job that rendered a hit:
# id, uid, host, run, stored), cache_waited_seconds (waiting for an identical job) and
# cache_refused (why a cache that is not the runner's alone was not used).
RESULT_FIELDS = ("cache", "cache_key", "cache_source", "cache_waited_seconds", "cache_refused")
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
class Staged:
    """A verified render linked into ``staging/<name>``, not yet an entry (None: not staged,
    and ``why_not`` says why)."""

    key: str
    name: str | None
    why_not: str | None = None


@dataclass(frozen=True)
class Stored:
    """What :meth:`RenderCache.commit` did: stored or not (and why not), what eviction removed."""

    stored: bool
    why_not: str | None = None
    evicted: list[str] = field(default_factory=list)
    total_bytes: int | None = None  # the cache's size after eviction, when it was measured


class RenderCache:
    """The entries of one output root's cache, bounded to ``max_bytes``.

    Every directory of the cache and every entry file must be the runner's alone
    (spoolrender.spool.trusted_dirs): owned by its uid, not writable by group or others, never a
    symlink. Operations go through descriptors opened one component at a time, so a name
    swapped after a check is never used. A cache that fails the check is not used at all
    (:meth:`refusal`); an entry that fails it is removed like a corrupt one.
    """

    def __init__(self, output_root: Path, max_bytes: int) -> None:
        self.output_root = output_root
        self.root = cache_root(output_root)
        self.max_bytes = max_bytes

    @property
    def entries_dir(self) -> Path:
        return self.root / ENTRIES

    @property
    def staging_dir(self) -> Path:
        return self.root / STAGING

    @contextlib.contextmanager
    def _dirs(self, *, create: bool = False) -> Iterator[_Dirs | None]:
        """The cache's directories, opened and checked; None when the cache does not exist
        yet (and not ``create``). Raises UntrustedDir (and OSError for the output root)."""
        fds: list[int] = []
        try:
            fds.append(open_root(self.output_root))
            root = open_trusted(fds[0], defaults.RENDER_CACHE_DIR, self.root, create=create, reclaim=True)
            if root is None:
                yield None
                return
            fds.append(root)
            found = [open_trusted(root, name, self.root / name, create=create) for name in (ENTRIES, STAGING)]
            fds += [fd for fd in found if fd is not None]
            flight = open_trusted(root, INFLIGHT, self.root / INFLIGHT)  # only checked: render_cache_flight
            if flight is not None:
                os.close(flight)
            entries, staging = found
            yield _Dirs(root, entries, staging)
        finally:
            for fd in fds:
                os.close(fd)

    def refusal(self) -> str | None:
        """Why the cache must not be used (a directory of it is a symlink, another user's,
        or writable by others), or None."""
        try:
            with self._dirs():
                return None
        except UntrustedDir as exc:
            return str(exc)
        except OSError as exc:
            return f"{self.root}: {exc.strerror or exc}"

    def entry_path(self, key: str) -> Path:
        return self.entries_dir / key

    def read_entry(self, key: str) -> Entry | None:
        """The entry of ``key`` as recorded (not verified), or None when there is none."""
        with self._opened_entry(key) as found:
            return None if found is None else found[2]

    @contextlib.contextmanager
    def _opened_entry(self, key: str) -> Iterator[tuple[_Dirs, int, Entry] | None]:
        """The cache's directories, the descriptor of ``entries/<key>`` and its entry."""
        with self._dirs() as dirs:
            found = None if dirs is None or dirs.entries is None else self._open_entry(dirs, key)
            if dirs is None or found is None:
                yield None
                return
            try:
                yield dirs, found[0], found[1]
            finally:
                os.close(found[0])

    def _open_entry(self, dirs: _Dirs, key: str) -> tuple[int, Entry] | None:
        """The descriptor of ``entries/<key>`` and its entry; None (and removed if it was
        there but bad) when there is no usable entry."""
        assert dirs.entries is not None
        path = self.entry_path(key)
        try:
            fd = open_trusted(dirs.entries, key, path)
        except UntrustedDir as exc:
            self._remove(dirs, key, exc.reason)
            return None
        if fd is None:
            return None
        try:
            return fd, self._load(fd, key)
        except FileNotFoundError:
            why = "its entry.json is missing"
        except UntrustedDir as exc:
            why = f"its entry.json {exc.reason}"
        except (OSError, ValueError, KeyError, TypeError) as exc:
            why = f"its entry.json is unreadable ({exc})"
        os.close(fd)
        self._remove(dirs, key, why)
        return None

    def _load(self, fd: int, key: str) -> Entry:
        path = self.entry_path(key)
        meta = os.open(META_NAME, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=fd)
        with os.fdopen(meta, "rb") as fh:
            st = os.fstat(fh.fileno())
            problem = "is not a regular file" if not stat.S_ISREG(st.st_mode) else trust_problem(st)
            if problem is not None:
                raise UntrustedDir(path / META_NAME, problem)
            raw = json.loads(fh.read(defaults.RENDER_CACHE_META_MAX_BYTES))
        source, details = dict(raw.get("source") or {}), dict(raw.get("details") or {})
        return Entry(key, path, int(raw["bytes"]), str(raw["sha256"]), source, details, os.fstat(fd).st_mtime)

    def take(self, key: str, dest: Path) -> Entry | None:
        """Link the entry of ``key`` to ``dest`` if it is intact and the runner's; None is a miss.

        The bytes are checked through ``dest`` after the link (the same inode), so what is
        verified is exactly what will be published: a regular file, owned by the runner's
        uid and writable by nobody else (else another user could rewrite a published
        output later), with the recorded size and sha256. A bad or missing entry is
        removed. Raises OSError only for trouble with ``dest`` itself, UntrustedDir for a
        cache directory that is not the runner's.
        """
        with self._opened_entry(key) as found:
            return None if found is None else self._take(*found, dest)

    def _take(self, dirs: _Dirs, fd: int, entry: Entry, dest: Path) -> Entry | None:
        try:
            # follow_symlinks=False: a symlink planted as an entry's output is linked as a
            # symlink, and then refused below; only a regular file is ever published.
            os.link(OUTPUT_NAME, dest, src_dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            self._remove(dirs, entry.key, "its output is missing")
            return None
        except OSError as exc:
            if exc.errno != errno.EXDEV:
                raise
            log.warning("render cache %s is on another filesystem than the scratch dir: not used", self.root)
            return None
        try:
            st = os.lstat(dest)
            if not stat.S_ISREG(st.st_mode):
                problem: str | None = "is not a regular file"
            elif (problem := trust_problem(st)) is None and st.st_size != entry.bytes:
                problem = f"has {st.st_size} bytes (recorded: {entry.bytes})"
            elif problem is None and sha256_file(dest) != entry.sha256:
                problem = "has another sha256 than recorded"
        except OSError:
            os.unlink(dest)
            raise
        if problem is not None:
            os.unlink(dest)
            self._remove(dirs, entry.key, f"its output {problem}")
            return None
        # The directory's mtime is the entry's last use (LRU). Set by the filesystem's
        # clock where it has one (NFS's SET_TO_SERVER_TIME), so hosts' clocks need not agree.
        with contextlib.suppress(OSError):  # evicted right after our link: our copy stands
            os.utime(fd)
        return entry

    def stage(self, key: str, output: Path, source: dict[str, Any], details: dict[str, Any]) -> Staged:
        """Prepare the verified render ``output`` (a scratch file) as the entry of ``key``:
        linked into ``staging/``, where no lookup sees it. :meth:`commit` makes it the
        entry once the run's publish decision is recorded, :meth:`discard` drops it.
        Raises OSError, UntrustedDir."""
        size = output.stat().st_size
        if size > self.max_bytes:
            return Staged(key, None, f"{size} bytes is over render_cache_max_bytes ({self.max_bytes})")
        digest = sha256_file(output)
        name = f"{key}.{new_token()}"
        with self._dirs(create=True) as dirs:
            assert dirs is not None and dirs.entries is not None and dirs.staging is not None
            if _lexists(dirs.entries, key):
                return Staged(key, None, "an identical render was stored meanwhile")
            os.mkdir(name, TRUSTED_DIR_MODE, dir_fd=dirs.staging)
            mode = stat.S_IMODE(os.stat(output).st_mode)
            try:
                staged = os.open(name, DIR_FLAGS, dir_fd=dirs.staging)
                try:
                    # Read-only: the bytes will be shared (one inode) by the entry and every
                    # output published from it; mode 0444 keeps tools from rewriting them.
                    os.chmod(output, READ_ONLY)
                    os.link(output, OUTPUT_NAME, dst_dir_fd=staged)
                    meta = {"key": key, "bytes": size, "sha256": digest, "source": source, "details": details}
                    _write_meta(staged, meta)
                finally:
                    os.close(staged)
            except BaseException:
                shutil.rmtree(name, dir_fd=dirs.staging, ignore_errors=True)
                with contextlib.suppress(OSError):
                    os.chmod(output, mode)  # not staged: the output is the run's own again
                raise
        return Staged(key, name, None)

    def commit(self, staged: Staged) -> Stored:
        """Make a staged render the entry of its key (after the run's publish decision)."""
        if staged.name is None:
            return Stored(False, staged.why_not)
        with self._dirs(create=True) as dirs:
            assert dirs is not None and dirs.entries is not None and dirs.staging is not None
            try:
                # rename() of a directory onto an existing non-empty one fails (ENOTEMPTY or
                # EEXIST): of two runners storing the same key, the first entry stays whole.
                os.rename(staged.name, staged.key, src_dir_fd=dirs.staging, dst_dir_fd=dirs.entries)
            except OSError as exc:
                shutil.rmtree(staged.name, dir_fd=dirs.staging, ignore_errors=True)
                if exc.errno in (errno.ENOTEMPTY, errno.EEXIST):
                    return Stored(False, "an identical render was stored meanwhile")
                raise
        evicted, total = self.evict(keep=staged.key)
        return Stored(True, None, evicted, total)

    def discard(self, staged: Staged) -> None:
        """Drop a staged render whose run did not decide to publish it."""
        if staged.name is None:
            return
        with contextlib.suppress(OSError, UntrustedDir), self._dirs() as dirs:
            if dirs is not None and dirs.staging is not None:
                shutil.rmtree(staged.name, dir_fd=dirs.staging, ignore_errors=True)

    def list_entries(self) -> list[Entry]:
        """Every readable entry, least recently used first (none from a refused cache)."""
        found = []
        with self._dirs() as dirs:
            if dirs is None or dirs.entries is None:
                return []
            for key in _names(dirs.entries):
                try:
                    fd = open_trusted(dirs.entries, key, self.entry_path(key))
                    if fd is None:
                        continue
                    try:
                        found.append(self._load(fd, key))
                    finally:
                        os.close(fd)
                except (OSError, ValueError, KeyError, TypeError, UntrustedDir):
                    continue  # being stored or removed right now, or bad: its next lookup removes it
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
        with self._dirs() as dirs:
            if dirs is None or dirs.staging is None:
                return
            for name in _names(dirs.staging):
                with contextlib.suppress(OSError):
                    if now - os.stat(name, dir_fd=dirs.staging, follow_symlinks=False).st_mtime >= older_than:
                        shutil.rmtree(name, dir_fd=dirs.staging, ignore_errors=True)

    def remove(self, key: str, why: str) -> bool:
        """Remove an entry; True if this call removed it."""
        with self._dirs() as dirs:
            return dirs is not None and self._remove(dirs, key, why)

    def _remove(self, dirs: _Dirs, key: str, why: str) -> bool:
        """Renamed out of entries/ first, so that nobody ever reads a half-deleted entry;
        outputs linked to it keep their bytes. rmtree through the staging descriptor
        never follows a symlink planted inside."""
        if dirs.entries is None or dirs.staging is None:
            return False
        gone = f".removed.{key}.{new_token()}"
        try:
            os.rename(key, gone, src_dir_fd=dirs.entries, dst_dir_fd=dirs.staging)
        except FileNotFoundError:
            return False  # removed by someone else meanwhile
        log.info("render cache: removed entry %s: %s", key[:16], why)
        shutil.rmtree(gone, dir_fd=dirs.staging, ignore_errors=True)
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


@dataclass(frozen=True)
class _Dirs:
    """Open, checked descriptors of the cache's root, ``entries/`` and ``staging/``
    (None: not there yet)."""

    root: int
    entries: int | None
    staging: int | None


def _names(fd: int) -> list[str]:
    with os.scandir(fd) as it:
        return [e.name for e in it]


def _lexists(fd: int, name: str) -> bool:
    try:
        os.stat(name, dir_fd=fd, follow_symlinks=False)
        return True
    except FileNotFoundError:
        return False


def _write_meta(fd: int, meta: dict[str, Any]) -> None:
    """entry.json in the staged entry ``fd``, read-only like the output. No fsync: an entry
    whose data a power cut lost fails verification and is a miss."""
    out = os.open(META_NAME, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o444, dir_fd=fd)
    with os.fdopen(out, "wb") as fh:
        os.fchmod(fh.fileno(), READ_ONLY)  # exactly 0444: open() filters the mode through the umask
        fh.write(json_bytes(meta))
