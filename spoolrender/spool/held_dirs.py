"""Spool directories a runner uses for every job, opened once and held (incoming/, running/).

Part of the spool's on-disk operations (spoolrender.spool.spooldir): the handles are DirHandles,
opened by name with its checks.
"""

from __future__ import annotations

import os
from pathlib import Path

from spoolrender.spool.layout import SpoolLayout
from spoolrender.spool.spooldir import DirHandle


class HeldDir:
    """A spool directory that a runner uses for every job (incoming/, running/), opened
    once by name and held, instead of an ``openat`` and a ``close`` per use.

    A held descriptor must still be the spool's directory when it is used: an operator
    may recreate one (``rm -r incoming && mkdir incoming``, a restore that renames a copy
    into place), and a descriptor of the old one would then claim from, or claim into, a
    directory nobody looks at. So the name is checked again (one ``lstat``: same device
    and inode as the descriptor held) at the first :meth:`get` after each :meth:`recheck`,
    which the runner calls once per pass of its loop, before it scans: the held directory
    is then never older than the pass's own view of the spool (a listing, too, can be
    outdated by a rename right after it). A name that is no longer the directory held is
    opened again, with the checks of :meth:`DirHandle.open` (a symlink is refused).

    An inode number cannot be reused while the old directory is held open (the open
    descriptor keeps the inode allocated), so a match is never a new directory with the
    old number. Within a pass, a directory removed and made again locally is still safe:
    the old one, held, is empty and unlinked, so no name is found in it and nothing can
    be created in it (ENOENT: a claim through it moves nothing, as a lost race). On NFS,
    where the server may remove it, operations through the descriptor fail with ESTALE
    until this client's attribute cache (``actimeo``) lets the ``lstat`` see the change.

    For one thread (the runner's loop); the handle :meth:`get` returns stays open until a
    later :meth:`get` finds the name changed, or :meth:`drop`: callers never close it.
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._handle: DirHandle | None = None
        self._identity: tuple[int, int] | None = None
        self._checked = False

    def recheck(self) -> None:
        """Check the name again at the next :meth:`get` (a new pass of the runner's loop)."""
        self._checked = False

    def get(self) -> DirHandle:
        """The held directory, re-opened first if its name is no longer it. FileNotFoundError
        if the name is gone, SpoolPathRefused if it is a symlink or no directory."""
        if self._handle is not None and self._checked:
            return self._handle
        try:
            st = os.stat(self.path, follow_symlinks=False)
        except FileNotFoundError:
            self.drop()
            raise
        if self._handle is None or (st.st_dev, st.st_ino) != self._identity:
            self.drop()
            handle = DirHandle.open(self.path)
            held = os.fstat(handle.fd)  # the identity of what was opened, not of what was lstat'ed
            self._handle, self._identity = handle, (held.st_dev, held.st_ino)
        self._checked = True
        return self._handle

    def drop(self) -> None:
        """Close the held descriptor: the next :meth:`get` opens the name again."""
        if self._handle is not None:
            self._handle.close()
        self._handle, self._identity, self._checked = None, None, False


class HeldSpoolDirs:
    """The runner's held incoming/ and running/ (:class:`HeldDir`), for its claims."""

    def __init__(self, layout: SpoolLayout) -> None:
        self.incoming = HeldDir(layout.incoming)
        self.running = HeldDir(layout.running)

    def recheck(self) -> None:
        self.incoming.recheck()
        self.running.recheck()

    def close(self) -> None:
        self.incoming.drop()
        self.running.drop()
