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

Queue directories (``incoming/<queue>/``, :func:`open_queue_dir`) are honoured only when
owned by the runner's user or root and, if writable by others, sticky: a directory a
spool-group member made is theirs, and they could delete or replace the other submitters'
drops in it, or swap it; its files are not claimed (nothing deleted) and ``status`` says why.
``spoolrender queue add NAME`` (or ``init --queue NAME``) makes them with the rules of
``incoming/``.

No other module builds a spool path from a name it got from a listing
(tests/unit/test_spooldir_usage.py checks that mechanically, as far as it can).
"""

from __future__ import annotations

import ctypes
import errno
import os
import stat
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import Protocol

from spoolrender import defaults
from spoolrender.core.failpoints import crash_point
from spoolrender.errors import SpoolrenderError
from spoolrender.spool.durable import sync_fd
from spoolrender.spool.layout import SpoolLayout
from spoolrender.spool.tree_removal import remove_tree_at

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
RENAME_NOREPLACE = 1  # <linux/fs.h>
QUEUE_DIR_MODE = 0o3775  # as incoming/: group-writable, setgid, sticky


class Listed(Protocol):
    """What a scan found (spoolrender.intake.candidates.Candidate): a name relative to its source."""

    @property
    def source(self) -> str: ...  # "incoming" or "retry"

    @property
    def name(self) -> str: ...


class Held(Protocol):
    """A directory held open for many uses (spoolrender.spool.held_dirs.HeldDir)."""

    def get(self) -> DirHandle: ...


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


def runner_owners() -> frozenset[int]:
    """Owners whose directories the runner trusts: its own user and root."""
    return frozenset({os.geteuid(), 0})


def queue_dir_problem(st: os.stat_result, where: str) -> str | None:
    """Why the directory ``where`` (``incoming/q1``) with ``st`` is no queue directory the
    runner may honour, or None: owned by the runner's user or root and, if others may write
    it, sticky (else one submitter could delete or replace another's drops)."""
    if stat.S_ISLNK(st.st_mode):
        return f"{where} is a symlink; queue directories must be real directories made by the operator"
    if not stat.S_ISDIR(st.st_mode):
        return f"{where} is not a directory"
    if st.st_uid not in runner_owners():
        return (
            f"{where} is owned by uid {st.st_uid}, not by the runner: its files are not claimed; "
            f"ask the operator to create queues with `spoolrender queue add {Path(where).name}`"
        )
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not st.st_mode & stat.S_ISVTX:
        return (
            f"{where} is writable by others but not sticky: any submitter could delete another's "
            f"drops; `spoolrender queue add {Path(where).name}` sets its mode to 3775"
        )
    return None


def open_queue_dir(incoming: DirHandle, name: str) -> DirHandle:
    """Open the queue directory ``incoming/<name>`` if the runner may honour it
    (:func:`queue_dir_problem`), else SpoolPathRefused with the reason. The checks are made
    on the opened descriptor, so a swap after them changes nothing."""
    handle = incoming.sub(name)  # O_NOFOLLOW: a symlink is refused here
    try:
        problem = queue_dir_problem(os.fstat(handle.fd), f"incoming/{name}")
    except BaseException:
        handle.close()
        raise
    if problem is not None:
        handle.close()
        raise SpoolPathRefused(problem, path=handle.path)
    return handle


class IncomingView:
    """incoming/ and its honoured queue directories, listed and held open for one pass (a
    scan, a status): ``names`` are the waiting entries (``<queue>/<name>`` in a queue
    directory), ``refused`` the queue directories not honoured, with the reason
    (``{"q1": "incoming/q1 is owned by ..."}``; their files are not listed, so never
    claimed, and nothing is deleted). Every later use of a listed name goes through the
    descriptors the listing was made with (:meth:`where`).

    ``is_queue_name`` says which names may be queue directories (spoolrender.config.queues).
    """

    def __init__(self, incoming: DirHandle, is_queue_name: Callable[[str], bool]) -> None:
        self.incoming = incoming
        self.names: list[str] = []
        self.refused: dict[str, str] = {}
        self._queues: dict[str, DirHandle] = {}
        try:
            self._list(is_queue_name)
        except BaseException:
            self.close()
            raise

    @classmethod
    def open(cls, incoming: Path, is_queue_name: Callable[[str], bool]) -> IncomingView:
        """List ``incoming`` (a missing one lists as empty)."""
        try:
            handle = DirHandle.open(incoming)
        except FileNotFoundError:
            handle = DirHandle(-1, incoming)
        return cls(handle, is_queue_name)

    def _list(self, is_queue_name: Callable[[str], bool]) -> None:
        if self.incoming.fd < 0:
            return
        for name in self.incoming.names():
            st = self.incoming.try_stat(name) if is_queue_name(name) else None
            if st is None or not stat.S_ISDIR(st.st_mode):
                self.names.append(name)  # a file, or a symlink: claimed and failed with a reason
                continue
            try:
                queue = open_queue_dir(self.incoming, name)
            except SpoolPathRefused as exc:
                self.refused[name] = str(exc)
                continue
            except (FileNotFoundError, NotADirectoryError):
                continue  # removed or swapped meanwhile: the next listing sees what it is
            self._queues[name] = queue
            self.names.extend(f"{name}/{child}" for child in queue.names())

    def where(self, name: str) -> tuple[DirHandle, str]:
        """The open directory holding the listed entry ``name``, and its name in it."""
        head, sep, base = name.partition("/")
        if not sep:
            return self.incoming, check_name(name, self.incoming.path)
        queue = self._queues.get(head)
        if queue is None:
            raise SpoolPathRefused(f"incoming/{head} was not listed as a queue directory", path=self.incoming.path)
        return queue, check_name(base, queue.path)

    def stat(self, name: str) -> os.stat_result | None:
        """fstatat of a listed entry (not following a symlink); None if it is gone."""
        where, base = self.where(name)
        return where.try_stat(base)

    def anchored(self, name: str) -> Path:
        """:meth:`DirHandle.anchored` for a listed entry."""
        where, base = self.where(name)
        return where.anchored(base)

    def dir_stats(self) -> list[os.stat_result]:
        """fstat of incoming/ and of each honoured queue directory (held open since the listing)."""
        return [os.fstat(d.fd) for d in (self.incoming, *self._queues.values()) if d.fd >= 0]

    def close(self) -> None:
        for queue in self._queues.values():
            queue.close()
        self._queues.clear()
        self.incoming.close()

    def __enter__(self) -> IncomingView:
        return self

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.close()


@contextmanager
def entry_dir(incoming: DirHandle, name: str) -> Iterator[tuple[DirHandle, str]]:
    """The directory holding the incoming/-relative entry ``name`` (``q1/a.yaml`` or
    ``a.yaml``) as an open handle, with the entry's own name in it: the queue directory
    is opened (and checked, :func:`open_queue_dir`) anew, never followed through a symlink."""
    head, sep, base = name.partition("/")
    if not sep:
        yield incoming, check_name(name, incoming.path)
        return
    with open_queue_dir(incoming, head) as queue:
        yield queue, check_name(base, queue.path)


@contextmanager
def candidate_dir(layout: SpoolLayout, candidate: Listed, held: Held | None = None) -> Iterator[tuple[DirHandle, str]]:
    """The open directory holding a scan's candidate and its name in it: for ``incoming``
    its queue directory (opened and checked anew, :func:`entry_dir`) or incoming/ itself
    (``held``, the runner's, spoolrender.spool.held_dirs, if given), for ``retry`` the job directory ``retry/<name>``
    with the name of its job file."""
    if candidate.source == "incoming":
        if held is not None:
            with entry_dir(held.get(), candidate.name) as found:
                yield found
            return
        with DirHandle.open(layout.incoming) as incoming, entry_dir(incoming, candidate.name) as found:
            yield found
        return
    with DirHandle.open(layout.retry) as retry, retry.sub(candidate.name) as job_dir:
        yield job_dir, defaults.JOB_FILENAME


def add_queue_dir(incoming_path: Path, name: str) -> str:
    """Create the queue directory ``incoming/<name>`` with the rules of incoming/ (owned by
    the runner's user, the spool's group, mode 3775), or bring a runner-owned one to them.
    Returns what was done, for the CLI. A directory another user made is refused: its
    owner could still delete or swap the others' drops; the operator moves its files out
    and removes it first."""
    with DirHandle.open(incoming_path) as incoming:
        st = incoming.try_stat(name)
        if st is None:
            queue = incoming.mkdir(name, QUEUE_DIR_MODE)
            done = "created"
        elif stat.S_ISDIR(st.st_mode) and st.st_uid in runner_owners():
            queue = incoming.sub(name)
            done = "kept"
        else:
            problem = queue_dir_problem(st, f"incoming/{name}") or f"incoming/{name} is not usable"
            raise SpoolPathRefused(
                f"{problem.partition(':')[0]}: move its files to incoming/ and remove it, then add the queue again",
                path=incoming.path / name,
            )
        with queue:
            incoming_gid = os.fstat(incoming.fd).st_gid
            os.fchown(queue.fd, -1, incoming_gid)  # the spool's group, as incoming/ has
            # fchmod after the chown: a chown clears setgid; mkdir's mode is umask-filtered.
            os.fchmod(queue.fd, QUEUE_DIR_MODE)
        incoming.fsync()
        return done
