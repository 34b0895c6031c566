"""The spool's on-disk operations, through directory descriptors only.

Why descriptors: a path is resolved again, component by component, every time it is used.
A name that was checked (listed, lstat'ed, found to be a directory) and then used by its
path can by then point elsewhere: whoever owns a directory on the way can swap it for a
symlink between the check and the use. That was reproduced against spoolrender (issue 20,
item 6): a spool-group member made ``incoming/q1/``, waited for the root runner's listing,
swapped ``q1`` for a symlink, and the claim's ``rename("incoming/q1/<name>", ...)`` moved
a same-named file from anywhere on the filesystem into ``failed/`` (which ``purge`` later
deletes); ``serve``'s ``GET /jobs/<name>/file`` listed, then read by path, and returned a
root-only 0600 file over HTTP.

So the spool root (and an output root) is the one path resolved by name, opened with
``O_DIRECTORY|O_NOFOLLOW``; every directory below it is opened relative to its parent's
descriptor (``openat`` with ``O_NOFOLLOW``: a symlink there is refused, never followed),
and every file operation is relative to the descriptor of the directory it is in
(``openat``, ``renameat``/``renameat2``, ``linkat``, ``unlinkat``, ``fstatat`` with
``AT_SYMLINK_NOFOLLOW``). A name is always one path component: ``a/b``, ``..`` and ``.``
are refused, so a string from a listing can never walk anywhere. Once a directory is open,
swapping its name changes nothing for us: the descriptor still is the directory we checked.

Which queue directories under ``incoming/`` are honoured, and incoming/ listed across
them, is spoolrender.spool.queue_dirs's, built on :class:`DirHandle`.

No other module builds a spool path from a name it got from a listing
(tests/unit/test_spooldir_usage.py checks that mechanically, as far as it can).
"""

from __future__ import annotations

import ctypes
import errno
import os
import stat
from collections.abc import Callable, Collection
from pathlib import Path
from types import TracebackType

from spoolrender.core.failpoints import crash_point
from spoolrender.errors import SpoolrenderError
from spoolrender.spool.durable import sync_fd
from spoolrender.spool.tree_removal import remove_tree_at

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
RENAME_NOREPLACE = 1  # <linux/fs.h>


class SpoolPathRefused(SpoolrenderError):
    """A symlink, a non-directory or a directory of the wrong owner where a spool directory
    was expected, or a name that is not one path component. ``path`` is for messages."""

    def __init__(self, message: str, *, path: Path) -> None:
        super().__init__(message)
        self.path = path


def check_name(name: str, where: Path) -> str:
    """``name`` if it is one path component, else SpoolPathRefused (never walk anywhere)."""
    if not name or name in (".", "..") or "/" in name or "\0" in name:
        raise SpoolPathRefused(f"{name!r} is not a single file name in {where}", path=where / name)
    return name


def _libc_renameat2() -> Callable[[int, bytes, int, bytes, int], int] | None:
    try:
        # The process's own symbols (libc is always among them), not find_library("c"): that
        # runs `ldconfig -p` in a subprocess at every import, so every CLI start and runner
        # waited on a pipe for it (and a Ctrl-C then landed in an import, outside the CLI's
        # handler: test_cli's Ctrl-C test got -2, not 130, at load 60).
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.renameat2  # glibc >= 2.28
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return fn  # ctypes' foreign function, typed by its argtypes


_RENAMEAT2 = _libc_renameat2()


class DirHandle:
    """An open directory of the spool: every operation is relative to its descriptor.

    ``path`` names it in messages only and is never resolved again. Close it (or use it as
    a context manager); :meth:`sub` and :meth:`mkdir` hand out new handles to close too.
    """

    def __init__(self, fd: int, path: Path) -> None:
        self.fd = fd
        self.path = path

    @classmethod
    def open(cls, path: Path) -> DirHandle:
        """Open a configured root (the spool, an output root): the one path resolved by name.
        Its last component must not be a symlink."""
        try:
            fd = os.open(path, DIR_FLAGS)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                raise SpoolPathRefused(f"{path} is a symlink or not a directory", path=path) from exc
            raise
        return cls(fd, Path(path))

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> DirHandle:
        return self

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"DirHandle({str(self.path)!r}, fd={self.fd})"

    def _name(self, name: str) -> str:
        return check_name(name, self.path)

    def sub(self, name: str, *, owners: Collection[int] | None = None) -> DirHandle:
        """Open the child directory ``name``: never through a symlink (SpoolPathRefused), and
        if ``owners`` is given only when its owner is one of them. FileNotFoundError if absent."""
        child = self.path / self._name(name)
        try:
            fd = os.open(name, DIR_FLAGS, dir_fd=self.fd)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                raise SpoolPathRefused(f"{child} is a symlink or not a directory", path=child) from exc
            raise
        if owners is not None:
            uid = os.fstat(fd).st_uid
            if uid not in owners:
                os.close(fd)
                raise SpoolPathRefused(f"{child} is owned by uid {uid}, not by the runner", path=child)
        return DirHandle(fd, child)

    def anchored(self, name: str) -> Path:
        """A path to ``name`` that goes through this open descriptor, not through any name
        (``/proc/self/fd/<fd>/<name>``): for a function that takes a path (a lease probe,
        an attribute check), valid while this handle is open. The kernel resolves the
        ``/proc`` entry to the directory held, so a swap of its name changes nothing; the
        function must still open ``name`` itself with O_NOFOLLOW."""
        return self.through / self._name(name)

    @property
    def through(self) -> Path:
        """A path naming this open directory itself (``/proc/self/fd/<fd>``), wherever it
        is renamed to: for readers that take a directory path, valid while it is open."""
        return Path(f"/proc/self/fd/{self.fd}")

    def names(self) -> list[str]:
        """The names in this directory, unsorted, listed through the descriptor."""
        with os.scandir(self.fd) as it:
            return [e.name for e in it]

    def stat(self, name: str) -> os.stat_result:
        """fstatat without following a symlink (a symlink is reported as one)."""
        return os.stat(self._name(name), dir_fd=self.fd, follow_symlinks=False)

    def try_stat(self, name: str) -> os.stat_result | None:
        """:meth:`stat`, or None if ``name`` is gone."""
        try:
            return self.stat(name)
        except FileNotFoundError:
            return None

    def exists(self, name: str) -> bool:
        return self.try_stat(name) is not None

    def open_file(self, name: str, flags: int = os.O_RDONLY, mode: int = 0o600) -> int:
        """openat, never through a symlink; reads are non-blocking (a FIFO must not hang us).
        Returns a raw descriptor: the caller closes it."""
        flags |= os.O_NOFOLLOW | os.O_CLOEXEC
        if flags & (os.O_WRONLY | os.O_RDWR) == 0:
            flags |= os.O_NONBLOCK
        return os.open(self._name(name), flags, mode, dir_fd=self.fd)

    def read_file(self, name: str, max_bytes: int) -> tuple[bytes, os.stat_result]:
        """The bytes of the regular file ``name`` (at most ``max_bytes``, else
        SpoolPathRefused) and its fstat, both of the one inode opened."""
        fd = self.open_file(name)
        try:
            st = os.fstat(fd)
            where = self.path / name
            if not stat.S_ISREG(st.st_mode):
                raise SpoolPathRefused(f"{where} is not a regular file", path=where)
            if st.st_size > max_bytes:
                raise SpoolPathRefused(f"{where} is larger than {max_bytes} bytes", path=where)
            chunks: list[bytes] = []
            size = 0
            while size <= max_bytes:
                chunk = os.read(fd, min(1 << 20, max_bytes + 1 - size))
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
            if size > max_bytes:  # grew after the fstat
                raise SpoolPathRefused(f"{where} is larger than {max_bytes} bytes", path=where)
            return b"".join(chunks), st
        finally:
            os.close(fd)

    def read_text(self, name: str, max_bytes: int) -> str:
        return self.read_file(name, max_bytes)[0].decode("utf-8")

    def write_file(self, name: str, data: bytes, *, mode: int = 0o644, durable: bool = True) -> None:
        """Write ``name`` atomically: a temporary file beside it, then renameat over it."""
        tmp = f".{self._name(name)}.{os.getpid()}.tmp"
        fd = self.open_file(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
        try:
            os.fchmod(fd, mode)  # the umask must not decide who may change it
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            if durable:
                sync_fd(fd)
        except BaseException:
            os.close(fd)
            self.unlink_if_present(tmp)
            raise
        os.close(fd)
        self.rename(tmp, self, name)
        if durable:
            self.fsync()

    def rename(self, name: str, dst: DirHandle, dst_name: str, *, replace: bool = True) -> None:
        """renameat ``name`` to ``dst``/``dst_name``. ``replace=False``: never over an existing
        entry (renameat2 RENAME_NOREPLACE; FileExistsError if one is there)."""
        self._name(name)
        dst._name(dst_name)
        if replace:
            os.rename(name, dst_name, src_dir_fd=self.fd, dst_dir_fd=dst.fd)
            return
        if _RENAMEAT2 is not None:
            if _RENAMEAT2(self.fd, os.fsencode(name), dst.fd, os.fsencode(dst_name), RENAME_NOREPLACE) == 0:
                return
            err = ctypes.get_errno()
            if err not in (errno.EINVAL, errno.ENOSYS):  # EINVAL: the filesystem lacks the flag
                raise OSError(err, os.strerror(err), str(self.path / name))
        self._rename_noreplace_fallback(name, dst, dst_name)

    def move(self, name: str, dst: DirHandle, dst_name: str, *, replace: bool = True) -> None:
        """:meth:`rename`, made to survive a power cut: both directories changed, the
        destination is fsynced first (the entry must be somewhere). FileNotFoundError when
        ``name`` is gone: the caller decides what losing that race means."""
        self.rename(name, dst, dst_name, replace=replace)
        crash_point("after-move")
        dst.fsync()
        if not os.path.samestat(os.fstat(self.fd), os.fstat(dst.fd)):
            self.fsync()

    def _rename_noreplace_fallback(self, name: str, dst: DirHandle, dst_name: str) -> None:
        # Without RENAME_NOREPLACE: a file is hard-linked (linkat refuses an existing name)
        # and then unlinked; a directory is checked, then renamed (a narrow race, only on
        # filesystems that lack the flag, and only between directories we own).
        if stat.S_ISDIR(self.stat(name).st_mode):
            if dst.exists(dst_name):
                raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), str(dst.path / dst_name))
            os.rename(name, dst_name, src_dir_fd=self.fd, dst_dir_fd=dst.fd)
            return
        self.link(name, dst, dst_name)
        self.unlink(name)

    def link(self, name: str, dst: DirHandle, dst_name: str) -> None:
        """linkat (never following a symlink); FileExistsError if ``dst_name`` exists."""
        os.link(self._name(name), dst._name(dst_name), src_dir_fd=self.fd, dst_dir_fd=dst.fd, follow_symlinks=False)

    def mkdir(self, name: str, mode: int) -> DirHandle:
        """mkdirat, then fchmod to ``mode`` exactly (the umask must not make it group-
        writable, and mkdir does not reliably apply setgid/sticky). Returns it open."""
        os.mkdir(self._name(name), 0o700, dir_fd=self.fd)
        handle = self.sub(name)
        try:
            os.fchmod(handle.fd, mode)
        except BaseException:
            handle.close()
            raise
        return handle

    def unlink(self, name: str) -> None:
        os.unlink(self._name(name), dir_fd=self.fd)

    def unlink_if_present(self, name: str) -> bool:
        try:
            self.unlink(name)
        except FileNotFoundError:
            return False
        return True

    def rmtree(self, name: str) -> None:
        """Remove ``name`` and everything below it without following a symlink anywhere,
        iteratively and with few descriptors whatever its depth (spoolrender.spool.tree_removal);
        a file or symlink is simply unlinked."""
        remove_tree_at(self.fd, self._name(name))

    def fsync(self) -> None:
        """Make a rename or creation in this directory durable (when fsync is on)."""
        sync_fd(self.fd)
