"""Directories under a shared output root that the runner may trust: its own, nobody else's to write.

The output root is shared: consumers read it, and on many hosts the spool's group (the
submitters) can write to it too. The runner keeps three trees of its own there: the render
cache (``.spoolrender-cache/``), the scratch directories (``.spoolrender-tmp/``) and the
chunk store. A directory another user made, or may write to, lets that user rename or
replace what is in it: a cache entry with their own bytes (and a matching sha256), a scratch
output before it is published, a chunk before the join. So each directory of those trees is
trusted only if it is a real directory (never a symlink), owned by the runner's uid and not
writable by group or others; each file taken from them (a cache entry's output and
entry.json) likewise.

Directories are opened one component at a time relative to their parent's descriptor
(O_DIRECTORY|O_NOFOLLOW), and checked with fstat on what was opened, so what is checked is
what is then used: a rename of a name between the check and the use cannot swap it.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import secrets
import stat
from pathlib import Path

from spoolrender.core.vocabulary import FailureKind
from spoolrender.errors import SpoolrenderError

log = logging.getLogger(__name__)

# The failure kind of a run that needs a directory it cannot trust (the scratch directory).
UNTRUSTED_DIR = FailureKind.UNTRUSTED_DIR
# The failure kind of a run whose scratch tree in the output root is another user's and cannot
# be moved aside (a non-root runner, a sticky output root it does not own): permanent, as
# only an operator can fix it (its reason says how); `spoolrender retry` after the fix.
FOREIGN_OUTPUT_TREE = FailureKind.FOREIGN_OUTPUT_TREE
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
TRUSTED_DIR_MODE = 0o755
_WRITABLE_BY_OTHERS = stat.S_IWGRP | stat.S_IWOTH


class UntrustedDir(SpoolrenderError):
    """A directory or file under the output root that the runner must not trust."""

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(f"{path} {reason}")
        self.path = path
        self.reason = reason


class ForeignTree(UntrustedDir):
    """Another user's tree right in the output root, which the runner could not move aside."""


def _stuck_reason(root: Path, root_st: os.stat_result, problem: str) -> str:
    """Why a foreign tree in the output root cannot be moved aside, and the operator's fix."""
    uid = os.geteuid()
    mode = stat.S_IMODE(root_st.st_mode)
    why = ""
    if mode & stat.S_ISVTX and root_st.st_uid != uid:
        why = f": the output root {root} is sticky (mode {mode:04o}) and owned by uid {root_st.st_uid}, not the runner"
    return (
        f"{problem}, and cannot be moved aside{why}. An operator must act: make the output root owned by the "
        f"runner and not writable by others (chown {uid} {root}; chmod o-w,-t {root}), or remove that tree; "
        "then `spoolrender retry` the job"
    )


def shared_root_warning(root: Path) -> str | None:
    """What the start-up check says about an output root that other users can write to
    (anyone may then make the runner's trees there first), or None."""
    try:
        st = os.stat(root)
    except OSError:
        return None
    mode = stat.S_IMODE(st.st_mode)
    if not mode & stat.S_IWOTH:
        return None
    uid = os.geteuid()
    stuck = st.st_uid != uid and mode & stat.S_ISVTX and not _overrides_sticky()
    return (
        f"output root {root} is writable by others (mode {mode:04o}, owner uid {st.st_uid}): any local user can make "
        "the runner's trees (.spoolrender-tmp/, .spoolrender-cache/, .spoolrender-chunks/) there first"
        + (
            "; the runner cannot move such a tree aside (sticky, not its own), so jobs fail as "
            f"{FOREIGN_OUTPUT_TREE!r} until an operator removes it"
            if stuck
            else "; the runner moves such a tree aside"
        )
        + f". Make it owned by the runner (uid {uid}) and not writable by others: chown {uid} {root}; chmod o-w {root}"
    )


_CAP_FOWNER = 3  # linux/capability.h: the capability that lets a process rename in others' sticky dirs


def _overrides_sticky() -> bool:
    """Whether this process may rename another user's entry in a sticky directory it does
    not own (CAP_FOWNER in its effective set: root, normally)."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            caps = next(line for line in fh if line.startswith("CapEff:"))
    except (OSError, StopIteration):
        return os.geteuid() == 0
    return bool(int(caps.split()[1], 16) >> _CAP_FOWNER & 1)


def trust_problem(st: os.stat_result) -> str | None:
    """Why an inode with status ``st`` is not the runner's alone (or root's), or None."""
    problem = owner_problem(st)
    if problem is None and st.st_mode & _WRITABLE_BY_OTHERS:
        return f"is writable by its group or others (mode {stat.S_IMODE(st.st_mode):04o})"
    return problem


def owner_problem(st: os.stat_result) -> str | None:
    uid = os.geteuid()
    if st.st_uid not in (uid, 0):
        return f"is owned by uid {st.st_uid}, not by the runner's uid {uid}" + ("" if uid == 0 else " or root")
    return None


def check_trusted(fd: int, path: Path) -> None:
    """Raise UntrustedDir if the open file or directory ``fd`` (named ``path``) is not ours alone."""
    problem = trust_problem(os.fstat(fd))
    if problem is not None:
        raise UntrustedDir(path, problem)


def open_root(path: Path) -> int:
    """A descriptor of the configured output root: the one path resolved by name (it is
    the operator's; a symlink there is their choice)."""
    return os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)


def move_aside(parent: int, name: str, path: Path, problem: str) -> bool:
    """Rename the foreign entry ``name`` of ``parent`` (the output root's descriptor) to
    ``<name>.untrusted-<token>``, never following it; True if it was moved (or is gone).

    Another user's ``.spoolrender-tmp/`` (cache, chunk store) must not stop everyone's
    jobs: the runner owns the output root (or is root), so it can rename the tree aside,
    kept as evidence for the operator, and make its own. renameat acts on the name, not on
    what a symlink there points to. Only another user's entry is moved: one of the
    runner's or root's (an operator's symlink, a tree an old umask left group-writable)
    is theirs to fix, and stays refused. False when it is not moved (also when the rename
    is refused: a sticky output root the runner does not own)."""
    aside = f"{name}.untrusted-{secrets.token_hex(4)}"
    try:
        st = os.stat(name, dir_fd=parent, follow_symlinks=False)
        if owner_problem(st) is None:
            return False
        os.rename(name, aside, src_dir_fd=parent, dst_dir_fd=parent)
    except FileNotFoundError:
        return True  # gone meanwhile: the caller makes its own
    except OSError as exc:
        log.warning("%s %s and cannot be moved aside: %s", path, problem, exc.strerror or exc)
        return False
    log.warning("%s %s (owner uid %d): moved it aside to %s", path, problem, st.st_uid, path.with_name(aside))
    return True


def open_trusted(parent: int, name: str, path: Path, *, create: bool = False, reclaim: bool = False) -> int | None:
    """Open the directory ``name`` in ``parent`` (``path`` names it in messages), checked
    trusted; None if it is absent and not ``create``. ``reclaim`` (for a directory right in
    the output root): a foreign one is moved aside (:func:`move_aside`) and treated as
    absent. Raises UntrustedDir."""
    if reclaim:
        try:
            return open_trusted(parent, name, path, create=create)
        except UntrustedDir as exc:
            if not move_aside(parent, name, path, exc.reason):
                raise
        return open_trusted(parent, name, path, create=create)
    if create:
        with contextlib.suppress(FileExistsError):
            os.mkdir(name, TRUSTED_DIR_MODE, dir_fd=parent)
    try:
        fd = os.open(name, DIR_FLAGS, dir_fd=parent)
    except FileNotFoundError:
        if create:
            raise
        return None
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise UntrustedDir(path, "is a symlink or not a directory") from exc
        raise
    try:
        check_trusted(fd, path)
    except BaseException:
        os.close(fd)
        raise
    return fd


def ensure_trusted_path(root: Path, *names: str) -> Path:
    """Make (mode 0755) or find ``root/names...``, each directory checked trusted; its path.

    For trees a run cannot do without (scratch, chunk store). A directory of the runner's
    own that its group or others may write to (made by an older version under umask 002)
    is repaired (chmod go-w) rather than refused: only the runner can have put anything
    in it that the runner then uses, each run's own directory is made afresh, and
    nobody else can rename in it from now on. One owned by another user right in the
    output root is moved aside (:func:`move_aside`); deeper, or if that fails, refused.
    Raises UntrustedDir, OSError. Callers that then use the path by name rely on every
    component being the runner's, which nobody else can rename in.
    """
    if _found_trusted(root, names):
        return root.joinpath(*names)
    fd = open_root(root)
    path = root
    try:
        for depth, name in enumerate(names):
            path = path / name
            try:
                child = _open_repaired(fd, name, path)
            except UntrustedDir as exc:
                # Only the output root is shared: deeper directories are the runner's own.
                if depth > 0:
                    raise
                if not move_aside(fd, name, path, exc.reason):
                    st = os.stat(name, dir_fd=fd, follow_symlinks=False)
                    if owner_problem(st) is None:
                        raise  # the runner's or root's own (an operator's symlink): theirs to fix
                    raise ForeignTree(path, _stuck_reason(root, os.fstat(fd), exc.reason)) from exc
                child = _open_repaired(fd, name, path)
            os.close(fd)
            fd = child
    finally:
        os.close(fd)
    return path


def _found_trusted(root: Path, names: tuple[str, ...]) -> bool:
    """True if every directory of ``root/names...`` is already there and trusted as it is:
    a real directory (``lstat``, never following the name), the runner's or root's, not
    writable by group or others. The same checks the descriptors' ``fstat`` makes, on the
    inodes the names lead to now, in one ``lstat`` each instead of an open, an fstat and a
    close each plus the root's (every run's scratch: bench/README.md, "P2 queue overhead").
    The path is used by name afterwards either way. False (anything missing, foreign, a
    symlink, to repair): the full walk decides, makes, repairs or moves aside."""
    path = root
    for name in names:
        path = path / name
        try:
            st = os.lstat(path)
        except OSError:
            return False
        if not stat.S_ISDIR(st.st_mode) or trust_problem(st) is not None:
            return False
    return True


def _open_repaired(parent: int, name: str, path: Path) -> int:
    try:
        # Opened first, made only if missing: one syscall per job where it exists (it
        # nearly always does), instead of a failing mkdir before every open.
        try:
            fd = os.open(name, DIR_FLAGS, dir_fd=parent)
        except FileNotFoundError:
            with contextlib.suppress(FileExistsError):
                os.mkdir(name, TRUSTED_DIR_MODE, dir_fd=parent)
            fd = os.open(name, DIR_FLAGS, dir_fd=parent)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise UntrustedDir(path, "is a symlink or not a directory") from exc
        raise
    try:
        st = os.fstat(fd)
        problem = owner_problem(st)
        if problem is not None:
            raise UntrustedDir(path, problem)
        if st.st_mode & _WRITABLE_BY_OTHERS:
            log.warning("%s was writable by its group or others; made it writable by the runner only", path)
            os.fchmod(fd, stat.S_IMODE(st.st_mode) & ~_WRITABLE_BY_OTHERS)
    except BaseException:
        os.close(fd)
        raise
    return fd
