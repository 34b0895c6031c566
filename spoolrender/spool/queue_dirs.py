"""incoming/ and its queue directories: which ``incoming/<queue>/`` the runner honours,
incoming/ listed across them and held for one pass (:class:`IncomingView`), a listed or
scanned entry's directory opened again (:func:`entry_dir`, :func:`candidate_dir`), and
``spoolrender queue add`` (:func:`add_queue_dir`).

Queue directories are honoured only when owned by the runner's user or root and, if
writable by others, sticky: a directory a spool-group member made is theirs, and they
could delete or replace the other submitters' drops in it, or swap it; its files are not
claimed (nothing deleted) and ``status`` says why. ``spoolrender queue add NAME`` (or
``init --queue NAME``) makes them with the rules of ``incoming/``.

Separate from spoolrender.spool.spooldir (descriptors and the operations through them,
for every directory of the spool) because this is one policy over one directory: who may
make a queue, and what the runner trusts of it. It opens everything through
:class:`~spoolrender.spool.spooldir.DirHandle`, so a swapped queue directory is refused,
never followed.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import Protocol

from spoolrender import defaults
from spoolrender.spool.layout import SpoolLayout
from spoolrender.spool.spooldir import DirHandle, SpoolPathRefused, check_name

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
