"""Start-up probes: does the spool's filesystem do what the protocol relies on?

spoolrender's guarantees rest on a few filesystem operations being atomic and exclusive
(docs/reliability.md). Network and FUSE filesystems do not all provide them: an SFTP
server without the posix-rename extension cannot replace a file by rename, sshfs mounted
with ``-o disable_hardlink`` (or a server without the hardlink extension) has no
``link()``, some servers refuse symlinks. Such a spool would fail later and obscurely (a
run that can never be decided, ids that can never be reserved), so a runner probes once
when it starts, in a private directory it removes again (and removes those of probers
that died: :mod:`spoolrender.spool.probe_dirs`), and refuses to start with a reason that names
the missing operation and what it is needed for.

One more probe concerns caches: uploads from other hosts are judged by their size and
mtime and read once settled, so the runner must see the server's (spoolrender.spool.netcache).
It says whether the mount caches attributes, and refuses one whose caches even a forced
revalidation cannot get past, naming the mount options that make it safe.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import shutil
from collections.abc import Callable
from pathlib import Path

from spoolrender.core.failpoints import crash_point
from spoolrender.errors import UnsupportedFilesystem
from spoolrender.intake.watch import filesystem_type, mount_of
from spoolrender.jobfile import read_job_bytes
from spoolrender.spool import glusterfs
from spoolrender.spool.io_trouble import condition, is_spool_io, spool_io_error, strerror
from spoolrender.spool.netcache import fresh_attributes
from spoolrender.spool.probe_dirs import PROBE_PREFIX, make_probe_dir, remove_dead_probes

__all__ = ["PROBE_PREFIX", "check_filesystem"]

log = logging.getLogger(__name__)


def check_filesystem(directory: Path, role: str, *, probe_in: Path | None = None) -> None:
    """Probe ``directory`` (the spool's private dir, or the output root).

    Raises UnsupportedFilesystem naming the first operation that does not behave as the
    protocol needs. ``role`` names the directory in the message ("spool", "output root").
    ``probe_in``: where the probe's directory goes (a hidden directory on the same
    filesystem, made if missing), ``directory`` itself by default.
    """
    parent = directory if probe_in is None else probe_in
    try:
        parent.mkdir(exist_ok=True)
        probe = make_probe_dir(parent)
    except OSError as exc:
        _raise_if_spool_io(exc, role, directory)
        raise UnsupportedFilesystem(f"{role} {directory}: cannot create a directory: {exc.strerror}") from exc
    try:
        remove_dead_probes(parent, probe)
        if parent != directory:  # versions up to 8329ac5 probed in ``directory`` itself
            remove_dead_probes(directory, probe)
        for check in _CHECKS:
            try:
                problem = check(probe)
            except OSError as exc:  # a step around the operation under test failed
                _raise_if_spool_io(exc, role, directory)
                problem = f"a probe ({check.__name__.lstrip('_')}) failed with {_describe(exc)}"
            if problem is not None:
                raise UnsupportedFilesystem(
                    f"{role} {directory} ({filesystem_type(directory)}) cannot hold a spoolrender "
                    f'{role}: {problem}. See docs/reliability.md, "Which filesystems work".'
                )
        with contextlib.suppress(OSError):  # only informative
            _warn_about_hidden_files(probe, role, directory)
        crash_point("fscheck-" + role.replace(" ", "-"))
    finally:
        # The probe is ours alone (a unique name); whatever a failed check left goes too.
        shutil.rmtree(probe, ignore_errors=True)


def _raise_if_spool_io(exc: OSError, role: str, directory: Path) -> None:
    """A full, read-only or failing filesystem is a condition, not a missing operation:
    say so (the runner waits for it to pass), never blame the filesystem type."""
    if is_spool_io(exc):
        raise spool_io_error(
            exc, f"the {role}'s filesystem {condition(exc)}: {directory}: {strerror(exc)} (while probing it)"
        ) from exc


def _describe(exc: OSError) -> str:
    if is_spool_io(exc):
        raise exc  # not the operation's fault: check_filesystem says what it is
    name = errno.errorcode.get(exc.errno or 0, "error")
    return f"{name} ({exc.strerror})"


def _write(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def _exclusive_create(probe: Path) -> str | None:
    # Temporary files of atomic writes and decisions are created with O_EXCL.
    path = probe / "excl"
    try:
        _write(path, b"first")
    except OSError as exc:
        return f"creating a file with O_CREAT|O_EXCL failed with {_describe(exc)}"
    try:
        _write(path, b"second")
    except FileExistsError:
        return None
    except OSError as exc:
        return f"O_CREAT|O_EXCL on an existing file failed with {_describe(exc)} instead of EEXIST"
    return "O_CREAT|O_EXCL opened an existing file (exclusive create is not exclusive)"


def _rename_replaces(probe: Path) -> str | None:
    # Records, heartbeats and the config are replaced by rename(): readers must see the
    # old or the new file, and there must never be a moment without one.
    new, old = probe / "new", probe / "old"
    _write(new, b"new")
    _write(old, b"old")
    try:
        os.rename(new, old)
    except OSError as exc:
        return (
            f"rename() onto an existing file failed with {_describe(exc)}: records and heartbeats are "
            "replaced atomically by rename (on SFTP this needs the server's posix-rename extension)"
        )
    if new.exists() or old.read_bytes() != b"new":
        return "rename() onto an existing file did not replace it"
    # Claims and state changes move a whole job directory in one rename.
    (probe / "dir").mkdir()
    try:
        os.rename(probe / "dir", probe / "moved")
    except OSError as exc:
        return f"rename() of a directory failed with {_describe(exc)}: jobs move between states by rename"
    return None


def _link_is_exclusive(probe: Path) -> str | None:
    # Runs are decided, and outputs published, by link(): of two processes exactly one
    # must get the name, and an existing name must never be replaced.
    src, dst = probe / "old", probe / "linked"
    try:
        os.link(src, dst)
    except OSError as exc:
        return (
            f"link() failed with {_describe(exc)}: runs are decided and outputs published with hard "
            "links (on SFTP this needs the server's hardlink extension; sshfs must not be mounted "
            "with -o disable_hardlink)"
        )
    if dst.read_bytes() != b"new":
        return "link() made a name with other content"
    try:
        os.link(probe / "excl", dst)
    except FileExistsError:
        return None
    except OSError as exc:
        return f"link() onto an existing name failed with {_describe(exc)} instead of EEXIST"
    return "link() replaced an existing name (it must fail with EEXIST)"


def _symlink_is_exclusive(probe: Path) -> str | None:
    # Job ids are reserved with symlink() in .spoolrender/ids/: exactly one of two
    # processes reserving the same id may succeed, and the target names the holder.
    link = probe / "reserved"
    try:
        os.symlink("holder-uid", link)
    except OSError as exc:
        return f"symlink() failed with {_describe(exc)}: job ids are reserved with symbolic links"
    try:
        if os.readlink(link) != "holder-uid":
            return "readlink() did not return the symlink's target"
    except OSError as exc:
        return f"readlink() failed with {_describe(exc)}"
    try:
        os.symlink("other-uid", link)
    except FileExistsError:
        return None
    except OSError as exc:
        return f"symlink() onto an existing name failed with {_describe(exc)} instead of EEXIST"
    return "symlink() replaced an existing name (it must fail with EEXIST)"


# What makes a mount show this host the server's attributes and bytes (docs/reliability.md,
# "Uploads on a network filesystem"), by filesystem type.
_UNCACHED_MOUNT = {
    "fuse.sshfs": "sshfs -o dir_cache=no,attr_timeout=0,entry_timeout=0,negative_timeout=0 (without kernel_cache "
    "or auto_cache)",
    "nfs": "mount -o noac (or actimeo=0), without nocto",
    "nfs4": "mount -o noac (or actimeo=0), without nocto",
    "cifs": "mount -o actimeo=0,cache=none",
}


def _sees_other_writers(probe: Path) -> str | None:
    # Uploads from other hosts are judged by their size and mtime and read once settled:
    # through a mount that caches them, the runner must see the server's. A second name
    # of one file stands in for another host: on path-based FUSE (sshfs) a write through
    # one name leaves the mount's view of the other as stale as another host's write.
    # (On NFS both names are one inode, and this passes; NFS revalidates on a forced
    # statx, see spoolrender.spool.netcache.)
    written, other = probe / "written", probe / "other-name"
    _write(written, b"a" * 100)
    os.link(written, other)
    other.read_bytes()  # its pages and attributes cached, as the scanner's reads leave them
    os.lstat(other)
    with open(written, "ab") as fh:
        fh.write(b"b" * 100)
    stale = os.lstat(other).st_size != 200
    fixed = _UNCACHED_MOUNT.get(filesystem_type(probe), "a mount option that turns attribute caching off")
    if fresh_attributes(other).size != 200:
        return (
            "a file written through another path keeps its old size here even after a forced revalidation "
            f"(open and statx with AT_STATX_FORCE_SYNC): uploads from other hosts would be claimed half-written. "
            f"Mount it with {fixed}"
        )
    fd = os.open(written, os.O_WRONLY)
    try:
        os.pwrite(fd, b"c" * 200, 0)  # a rewrite that keeps the size
    finally:
        os.close(fd)
    if read_job_bytes(other, 1000, uncached=True) != b"c" * 200:
        return (
            "a file rewritten through another path still reads as its old bytes here after its cached pages "
            f"were dropped: a claimed upload could be rendered from stale bytes. Mount it with {fixed}"
        )
    if stale:
        log.info(
            "%s: this mount caches attributes (a write through another path was not seen by stat()): "
            "uploads from other hosts are revalidated before each claim and read past the cache", probe.parent,
        )  # fmt: skip
    return None


def _glusterfs_client(probe: Path) -> str | None:
    # A GlusterFS client caches in its own translators too, where no revalidation of this
    # host reaches: read its settings (spoolrender.spool.glusterfs), refuse what breaks the
    # protocol and warn about what delays other hosts' changes, naming the option.
    root, fstype = mount_of(probe)
    if fstype != glusterfs.FUSE_TYPE or root is None:
        return None
    refusals, warnings = glusterfs.mount_problems(glusterfs.read_client(root))
    for warning in warnings:
        log.warning("%s (GlusterFS mount %s): %s", probe.parent, root, warning)
    return refusals[0] if refusals else None


_CHECKS: tuple[Callable[[Path], str | None], ...] = (
    _exclusive_create,
    _rename_replaces,
    _link_is_exclusive,
    _symlink_is_exclusive,
    _glusterfs_client,
    _sees_other_writers,
)


def _warn_about_hidden_files(probe: Path, role: str, directory: Path) -> None:
    """FUSE filesystems without ``hard_remove`` keep an open file that is unlinked as a
    hidden ``.fuse_hidden*`` name until it is closed: harmless, but worth knowing when a
    directory cannot be removed."""
    path = probe / "open-unlinked"
    _write(path, b"x")
    with open(path, "rb"):
        os.unlink(path)
        hidden = [n for n in os.listdir(probe) if n.startswith(".fuse_hidden")]
        if hidden:
            log.info(
                "%s %s: a file unlinked while still open stays behind as %s until it is "
                "closed (FUSE without hard_remove)", role, directory, hidden[0],
            )  # fmt: skip
