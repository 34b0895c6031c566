"""Remove a directory tree of any depth through descriptors: iterative, never following a
symlink, with a bounded number of open descriptors.

shutil.rmtree(dir_fd=...) does not follow symlinks, but it recurses once per level and
holds a descriptor per level: a tree another user grew 1,500 levels deep (in a directory
of theirs the runner must remove) ends it in RecursionError, and deeper ones in EMFILE.
Here the walk is a loop over an explicit stack of levels; only the deepest
``TREE_REMOVAL_MAX_FDS`` levels keep their descriptor, and a level whose descriptor was
closed is opened again from its nearest open ancestor, one name at a time with
O_NOFOLLOW, and must be the same directory (device and inode) as before, so a rename
meanwhile can never lead the removal elsewhere.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from dataclasses import dataclass, field

from spoolrender import defaults

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclass
class _Level:
    """One directory on the way down: its name in its parent, identity, open descriptor."""

    name: str
    ident: tuple[int, int]
    fd: int | None
    subdirs: list[str] | None = field(default=None)  # subdirectories still to remove (None: not listed yet)


def remove_tree_at(parent: int, name: str, *, max_fds: int = defaults.TREE_REMOVAL_MAX_FDS) -> None:
    """Remove ``name`` in the directory ``parent`` and everything below it (a file or
    symlink is unlinked). Absent entries are skipped. Raises OSError (ESTALE when a
    directory was replaced during the removal) for what cannot be removed."""
    try:
        st = os.stat(name, dir_fd=parent, follow_symlinks=False)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(st.st_mode):
        _unlink(parent, name)
        return
    stack = [_Level(name, (st.st_dev, st.st_ino), None)]
    try:
        while stack:
            fd = _fd(stack, parent, len(stack) - 1, max_fds)
            top = stack[-1]
            if top.subdirs is None:
                top.subdirs = _clear_files(fd)
            if top.subdirs:
                child = top.subdirs.pop()
                try:
                    cst = os.stat(child, dir_fd=fd, follow_symlinks=False)
                except FileNotFoundError:
                    continue
                if not stat.S_ISDIR(cst.st_mode):  # replaced by a file meanwhile
                    _unlink(fd, child)
                    continue
                stack.append(_Level(child, (cst.st_dev, cst.st_ino), None))
                continue
            done = stack.pop()
            _close(done)
            above = parent if not stack else _fd(stack, parent, len(stack) - 1, max_fds)
            with contextlib.suppress(FileNotFoundError):
                os.rmdir(done.name, dir_fd=above)
    finally:
        for level in stack:
            _close(level)


def _clear_files(fd: int) -> list[str]:
    """Unlink every non-directory in ``fd``; the names of its subdirectories."""
    subdirs = []
    with os.scandir(fd) as it:
        for entry in it:
            if entry.is_dir(follow_symlinks=False):
                subdirs.append(entry.name)
            else:
                _unlink(fd, entry.name)
    return subdirs


def _fd(stack: list[_Level], parent: int, index: int, max_fds: int) -> int:
    """The open descriptor of ``stack[index]``, opened again from its nearest open ancestor
    if it was closed; keeps at most ``max_fds`` levels open (the deepest ones)."""
    level = stack[index]
    if level.fd is not None:
        return level.fd
    start = index
    while start > 0 and stack[start - 1].fd is None:
        start -= 1
    for i in range(start, index + 1):
        above = parent if i == 0 else stack[i - 1].fd
        assert above is not None
        fd = os.open(stack[i].name, _DIR_FLAGS, dir_fd=above)
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino) != stack[i].ident:
            os.close(fd)
            raise OSError(errno.ESTALE, f"{stack[i].name} was replaced during its removal")
        stack[i].fd = fd
        _cap(stack, i, max_fds)
    opened = level.fd
    assert opened is not None
    return opened


def _cap(stack: list[_Level], deepest: int, max_fds: int) -> None:
    """Close the descriptors of the shallowest open levels above ``deepest`` past ``max_fds``."""
    open_levels = [lvl for lvl in stack[: deepest + 1] if lvl.fd is not None]
    for lvl in open_levels[: max(0, len(open_levels) - max(max_fds, 2))]:
        _close(lvl)


def _close(level: _Level) -> None:
    if level.fd is not None:
        os.close(level.fd)
        level.fd = None


def _unlink(dir_fd: int, name: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(name, dir_fd=dir_fd)
