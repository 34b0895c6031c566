"""Putting a rendered file in place under the output root, never half, never outside it.

Renders write to a scratch directory on the output root's filesystem
(``<output_root>/.spoolrender-tmp/<digest of the job's running/ name>/``). Publishing is
then one ``link()`` (or ``rename()`` for re-runs that replace their own older output) into
the final name, so a consumer sees no file or the whole file, never a partial one.

Hostile output paths: job files only give relative paths without ``..`` (checked when
the job is parsed), and here every directory below the root is opened with O_NOFOLLOW
relative to its parent's descriptor, so a symlink planted anywhere along the way (even
between a check and the link) cannot lead the file out of the output root.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import logging
import os
import shutil
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from spoolrender.errors import PublishError, RenderError
from spoolrender.spool.durable import fsync_enabled, sync_fd
from spoolrender.spool.trusted_dirs import (
    FOREIGN_OUTPUT_TREE,
    TRUSTED_DIR_MODE,
    UNTRUSTED_DIR,
    ForeignTree,
    UntrustedDir,
    ensure_trusted_path,
)

log = logging.getLogger(__name__)

SCRATCH_DIR = ".spoolrender-tmp"
SCRATCH_NAME_HEX = 32  # hex digits of a scratch directory's name (scratch_name)


@dataclass(frozen=True)
class Published:
    path: Path
    bytes: int
    inode: int
    mtime_ns: int

    @property
    def file(self) -> RenderedFile:
        return RenderedFile(self.inode, self.bytes, self.mtime_ns)


@dataclass(frozen=True)
class RenderedFile:
    """How a publish decision recognises its output later, from any host.

    The inode number alone is not enough: over sshfs (SFTP has no inode numbers) every
    mount numbers every name on its own, so the host that carries out a dead runner's
    decision never sees the number the runner recorded. Size and modification time are
    the server's and survive link() and rename(); they decide (:meth:`matches`).
    """

    inode: int
    bytes: int
    mtime_ns: int | None  # None in decisions recorded by older versions

    def __post_init__(self) -> None:
        if self.bytes < 0:
            raise ValueError(f"negative size {self.bytes}")

    @classmethod
    def of(cls, st: os.stat_result) -> RenderedFile:
        return cls(st.st_ino, st.st_size, st.st_mtime_ns)

    @classmethod
    def recorded(cls, info: dict[str, Any]) -> RenderedFile | None:
        """The identity a PUBLISHING record's ``publish`` gives (None in records that have
        no inode; ``mtime_ns`` only since sshfs support)."""
        if info.get("inode") is None:
            return None
        mtime_ns = info.get("mtime_ns")
        return cls(int(info["inode"]), int(info["bytes"]), None if mtime_ns is None else int(mtime_ns))

    def matches(self, st: os.stat_result) -> bool:
        """True if ``st`` (of the published name) is this file.

        A regular file of the recorded size and modification time: the inode number
        alone proves nothing, since ext4 (like most filesystems) hands a freed number to
        the next new file, so a user's file put under a consumed output's name can get
        it. The number is compared only in records older than ``mtime_ns``.
        """
        if not stat.S_ISREG(st.st_mode) or st.st_size != self.bytes:
            return False
        if self.mtime_ns is None:
            return st.st_ino == self.inode
        # SFTP (protocol 3) carries whole seconds only: a host on sshfs sees the mtime a
        # host on the server's own filesystem recorded with its fraction cut off.
        if st.st_mtime_ns % 1_000_000_000 == 0 or self.mtime_ns % 1_000_000_000 == 0:
            return st.st_mtime_ns // 1_000_000_000 == self.mtime_ns // 1_000_000_000
        return st.st_mtime_ns == self.mtime_ns


def scratch_name(job_key: str) -> str:
    """The name of job ``job_key``'s scratch directory: a digest of the key, never its id.

    The scratch directory is the command's working directory, its TMPDIR, ``{work_dir}``
    and the directory of ``{output}``: named after the job's id, a cached command that
    writes where it runs would put the id in an output the render cache serves to
    identical jobs of other ids. The digest is opaque, yet recovery and the orphan sweep
    compute it from the running/ entry's name.
    """
    return hashlib.sha256(job_key.encode()).hexdigest()[:SCRATCH_NAME_HEX]


def scratch_dir(output_root: Path, job_key: str) -> Path:
    """The job's scratch directory on the output filesystem (temp output, TMPDIR)."""
    return output_root / SCRATCH_DIR / scratch_name(job_key)


def prepare_scratch(output_root: Path, job_key: str) -> Path:
    """An empty scratch directory for job ``job_key``, in a scratch tree that is the
    runner's alone (spoolrender.spool.trusted_dirs): another user's ``.spoolrender-tmp/`` would
    let them replace a rendered file before it is published. Raises RenderError (kind
    trusted_dirs.FOREIGN_OUTPUT_TREE, permanent: another user's tree the runner cannot move
    aside; UNTRUSTED_DIR, transient: any other refusal) or OSError."""
    try:
        ensure_trusted_path(output_root, SCRATCH_DIR)
    except ForeignTree as exc:
        # Every job would fail the same way until an operator acts: at once, for good.
        raise RenderError(str(exc), transient=False, kind=FOREIGN_OUTPUT_TREE) from exc
    except UntrustedDir as exc:
        raise RenderError(
            f"{exc}: refusing to render into it; remove it (the runner makes its own)",
            transient=True,
            kind=UNTRUSTED_DIR,
        ) from exc
    path = scratch_dir(output_root, job_key)
    remove_tree(path)
    os.mkdir(path, TRUSTED_DIR_MODE)  # in a directory only the runner can write to
    return path


def remove_scratch(output_root: Path, job_key: str) -> None:
    remove_scratch_dir(scratch_dir(output_root, job_key))


def remove_scratch_dir(path: Path) -> None:
    """Remove a scratch directory and what is in it, as far as it is there; if it cannot be
    removed now, the orphan sweep (spoolrender.lifecycle.recovery) tries again at its next pass."""
    try:
        # The usual case, one syscall: a published output was moved out, the dir is empty.
        os.rmdir(path)
    except FileNotFoundError:
        pass
    except OSError:  # ENOTEMPTY: a render left files (props.json, tmp/, a failed output)
        remove_tree(path)
        return
    # Gone, unless a lookup still finds it: in the seconds after a GlusterFS brick restarts,
    # rmdir of a directory that is not empty on the bricks that hold it answers ENOENT, or
    # even success, when the restarted brick lacks it (measured: docs/reliability.md, "A
    # brick restarted mid-run"). Taken at its word, the dir stayed for good, the sweep's
    # rmdir getting the same answer; one lstat per removal checks it.
    if os.path.lexists(path):
        remove_tree(path)
        if os.path.lexists(path):
            log.info("scratch dir %s still there after its removal; the orphan sweep tries again", path.name)


def remove_tree(path: Path) -> None:
    """Remove ``path`` and everything in it, as far as it is there.

    Two hosts may remove the same tree at once (a job's end and another host's sweep).
    On sshfs (path-based FUSE) rmtree's fstat() of a directory deleted meanwhile fails
    (ENOENT, ESTALE), which ``ignore_errors`` does not cover in Python 3.11: hence the
    suppress.
    """
    with contextlib.suppress(OSError):
        shutil.rmtree(path, ignore_errors=True)


def _open_parent(output_root: Path, rel: PurePosixPath, *, create: bool) -> int | None:
    """An O_PATH-like descriptor of ``rel``'s parent under ``output_root``, or None if absent."""
    try:
        fd = os.open(output_root, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as exc:
        raise PublishError(f"output root {output_root}: {exc.strerror}", transient=True) from exc
    try:
        for part in rel.parts[:-1]:
            if create:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, 0o755, dir_fd=fd)
            try:
                child = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            except FileNotFoundError:
                if create:
                    raise
                os.close(fd)
                return None
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise PublishError(
                        f"output path {str(rel)!r}: {part!r} is a symlink or not a directory; "
                        "refusing to write outside the output root",
                        transient=False,
                    ) from exc
                raise
            os.close(fd)
            fd = child
        return fd
    except PublishError:
        os.close(fd)
        raise
    except OSError as exc:
        os.close(fd)
        raise PublishError(f"output path {str(rel)!r}: {exc.strerror}", transient=exc.errno != errno.EACCES) from exc


def output_taken_problem(output_root: Path, rel: PurePosixPath, *, rerun: bool) -> str | None:
    """Why a job may not publish to ``rel`` (something has its name, and no ``rerun``), or None."""
    if rerun or not output_exists(output_root, rel):
        return None
    return (
        f"field 'output': {str(rel)!r} already exists under the output root; "
        "choose another output or set rerun: true to replace it"
    )


def output_exists(output_root: Path, rel: PurePosixPath) -> bool:
    """True if something already has ``rel``'s name under the output root."""
    return existing_output(output_root, rel) is not None


def existing_output(output_root: Path, rel: PurePosixPath) -> os.stat_result | None:
    """The status of what has ``rel``'s name under the output root (not followed), or None."""
    fd = _open_parent(output_root, rel, create=False)
    if fd is None:
        return None
    try:
        return os.stat(rel.name, dir_fd=fd, follow_symlinks=False)
    except FileNotFoundError:
        return None
    finally:
        os.close(fd)


def fsync_file(path: Path) -> None:
    if not fsync_enabled():
        return  # `fsync: false`: the open and close would be for a no-op sync_fd
    fd = os.open(path, os.O_RDONLY)
    try:
        sync_fd(fd)
    finally:
        os.close(fd)


def _published_before(fd: int, name: str, final: Path, temp: Path, expect: RenderedFile | None) -> Published:
    """``temp`` is gone: the output is published already if ``name`` (in ``fd``) is the file
    the record describes (an earlier try of ours, or another carrier of the same record:
    recovery rolls a decided run forward, and its owner may be alive). Else the rendered
    file vanished, which only a re-render mends."""
    try:
        done = os.stat(name, dir_fd=fd, follow_symlinks=False)
    except FileNotFoundError:
        done = None
    if done is not None and expect is not None and expect.matches(done):
        return Published(final, done.st_size, done.st_ino, done.st_mtime_ns)
    raise PublishError(f"rendered file {temp} vanished before publishing", transient=True) from None


def _unlink_temp(temp: Path) -> None:
    """Remove ``temp`` once the output's name holds it; another carrier of the same record
    may have removed it first (``_published_before``), which is just as good."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(temp)


def _is_same_file(temp: Path, st: os.stat_result, dir_fd: int, name: str, existing: os.stat_result) -> bool:
    """True if ``name`` (in ``dir_fd``) is the file ``temp``: a link made by an earlier try.

    The inode number says so on local filesystems and NFS. sshfs (FUSE over SFTP, which
    has no inode numbers) gives each name a number of its own, so there equal size, mtime
    and bytes must say it; a name that holds exactly our bytes is our output either way.
    """
    if (existing.st_dev, existing.st_ino) == (st.st_dev, st.st_ino):
        return True
    if not stat.S_ISREG(existing.st_mode) or (existing.st_size, existing.st_mtime_ns) != (st.st_size, st.st_mtime_ns):
        return False
    ours = os.open(name, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=dir_fd)
    try:
        with open(temp, "rb") as a, os.fdopen(ours, "rb", closefd=False) as b:
            while True:
                chunk = a.read(1 << 20)
                if chunk != b.read(1 << 20):
                    return False
                if not chunk:
                    return True
    finally:
        os.close(ours)


def publish_output(
    output_root: Path,
    rel: PurePosixPath,
    temp: Path,
    *,
    replace: bool,
    expect: RenderedFile | None = None,
    may_replace: Callable[[os.stat_result], PublishError | None] | None = None,
) -> Published:
    """Move the finished ``temp`` file to ``output_root/rel`` atomically.

    ``replace`` allows overwriting an existing output (re-runs), if ``may_replace`` (given
    the existing file's status) has no refusal: a re-run replaces only its own id's output
    (spoolrender.lifecycle.rerun). Idempotent for recovery: if ``temp`` is already gone and the
    output is the file ``expect`` describes, the earlier publish is reported instead of
    failing.
    """
    fd = _open_parent(output_root, rel, create=True)
    assert fd is not None
    name = rel.name
    final = output_root / rel
    try:
        try:
            st = os.stat(temp, follow_symlinks=False)
        except FileNotFoundError:
            return _published_before(fd, name, final, temp, expect)
        try:
            existing = os.stat(name, dir_fd=fd, follow_symlinks=False) if replace else None
        except FileNotFoundError:
            existing = None
        refusal = None if existing is None or may_replace is None else may_replace(existing)
        if refusal is not None:
            raise refusal
        try:
            if existing is not None:
                # rename() over an existing output: readers see the old or the new video.
                os.rename(temp, name, dst_dir_fd=fd)
            else:
                # link() never overwrites: an output that appeared meanwhile (another
                # job with the same output path) is reported, not clobbered.
                os.link(temp, name, dst_dir_fd=fd, follow_symlinks=False)
                _unlink_temp(temp)
        except FileNotFoundError:
            # ``temp`` went after our stat: another carrier of this same decided record
            # published it meanwhile (a recoverer that took a live owner for dead while the
            # owner's heartbeats failed on a full spool, or the owner itself: the GlusterFS
            # full-brick test failed such a job after publishing it, once in a whole-suite
            # run). Its output, if it is the record's, is ours too; only a mismatch is an error.
            return _published_before(fd, name, final, temp, expect)
        except FileExistsError:
            existing = os.stat(name, dir_fd=fd, follow_symlinks=False)
            try:
                same = _is_same_file(temp, st, fd, name, existing)  # our own link from an interrupted publish
            except FileNotFoundError:  # the other carrier removed ``temp`` (above)
                return _published_before(fd, name, final, temp, expect)
            if same:
                _unlink_temp(temp)
            else:
                raise PublishError(
                    f"output {str(rel)!r} already exists; set rerun: true to replace it",
                    transient=False,
                ) from None
        except OSError as exc:
            if exc.errno == errno.EXDEV:
                raise PublishError(
                    f"output {str(rel)!r} is on another filesystem than the output root's "
                    f"scratch dir {SCRATCH_DIR}/; keep the output tree on one filesystem",
                    transient=False,
                ) from exc
            if exc.errno == errno.EISDIR:
                raise PublishError(f"output {str(rel)!r} is a directory", transient=False) from exc
            raise PublishError(f"publishing {str(rel)!r}: {exc.strerror}", transient=True) from exc
        # The new name lives in the directory's data: fsync it so an acknowledged job's
        # output survives a power cut.
        sync_fd(fd)
        return Published(final, st.st_size, st.st_ino, st.st_mtime_ns)
    finally:
        os.close(fd)
