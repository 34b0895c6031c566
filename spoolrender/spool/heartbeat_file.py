"""The heartbeat file: its record, its name (one per claim) and reading it.

While a job runs, its owner rewrites ``running/<job>/heartbeat-<token>`` every few seconds
(spoolrender.spool.heartbeat's HeartbeatWriter, by an atomic replace: a temporary name beside
it, then a rename); the lock beside it is ``lock-<token>``. The claim's first beat is
written into its new lock file instead, which is then linked as ``heartbeat-<token>``
(complete when the name appears, as after a rename; one inode per claim less): until the
second beat replaces that name, both name one file. Readers see no difference.

Both names carry the claim's token, so no two claims ever operate on one name in a job's
directory (which travels with the job: retry/, the next claim, done/). On GlusterFS a
client frozen whole (SIGSTOP, its FUSE client too) in the middle of replacing its
heartbeat keeps the entry locks of that replace on the bricks for as long as it is frozen
(its TCP connection stays up), and any create, rename or unlink of those names, by anyone,
waits behind them (docs/reliability.md, "A frozen host's locks"). With one name per claim
only the frozen claim's own names are locked: the next claim of the job beats under its
own token, and nobody else ever writes, renames or removes another claim's heartbeat or
lock (recovery reads them only; transitions remove the caller's own claim's names).

Mixed versions: runners before this scheme wrote ``running/<job>/heartbeat``. A claim of
theirs is still judged by it: :func:`read_heartbeat` falls back to that name when the
claim's own is missing (its token is inside, and callers compare it with the entry's). An
older runner judging a claim of this version finds no ``heartbeat`` and falls back to its
signature of the directory's mtime, which every beat still changes (each beat is a rename
into the directory): it still sees the owner alive, and dead once it stops.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spoolrender import defaults
from spoolrender.spool.layout import RUNNING_NAME


@dataclass(frozen=True)
class Heartbeat:
    host: str
    pid: int
    token: str
    run: int
    counter: int
    progress: float | None = None
    stage: str | None = None
    started: float | None = None  # owner's wall clock, informational
    updated: float | None = None  # owner's wall clock, informational
    runner: str | None = None
    pgid: int | None = None  # the render's process group, killed if the job is recovered
    # Which boot of the host, and when the group's leader started (clock ticks since that
    # boot): a recoverer kills ``pgid`` only if both still match, never a group that
    # reused the number after a reboot or a pid wrap-around.
    boot: str | None = None
    pgid_start: int | None = None
    # The owner could not write to the spool for this job (a full disk: the kernel's text).
    # A recoverer that finds it dead requeues the job without counting an attempt.
    spool_io: str | None = None

    def to_json(self) -> bytes:
        return json.dumps(self.__dict__, sort_keys=True).encode("utf-8")

    @classmethod
    def from_json(cls, data: bytes) -> Heartbeat:
        raw: dict[str, Any] = json.loads(data)
        return cls(
            host=str(raw["host"]),
            pid=int(raw["pid"]),
            token=str(raw["token"]),
            run=int(raw["run"]),
            counter=int(raw["counter"]),
            progress=None if raw.get("progress") is None else float(raw["progress"]),
            stage=raw.get("stage"),
            started=raw.get("started"),
            updated=raw.get("updated"),
            runner=raw.get("runner"),
            pgid=None if raw.get("pgid") is None else int(raw["pgid"]),
            boot=None if raw.get("boot") is None else str(raw["boot"]),
            pgid_start=None if raw.get("pgid_start") is None else int(raw["pgid_start"]),
            spool_io=None if raw.get("spool_io") is None else str(raw["spool_io"]),
        )


def heartbeat_path(job_dir: Path, token: str) -> Path:
    """The heartbeat file of the claim ``token`` (one name per claim: see the module's docstring)."""
    return job_dir / f"{defaults.HEARTBEAT_FILENAME}-{token}"


def lock_path(job_dir: Path, token: str) -> Path:
    """The lock file of the claim ``token`` (its first beat is written into it:
    spoolrender.spool.heartbeat.JobLock.publish_as)."""
    # One lock file per claim, named by its token: the job directory (and any lock file
    # in it) travels between states, and a process that still holds the flock of an
    # earlier claim of the same job must not block, or be mistaken for, the new one.
    return job_dir / f"{defaults.LOCK_FILENAME}-{token}"


def entry_token(job_dir: Path) -> str | None:
    """The claim token in a running/ entry's name, None for a name of no claim."""
    m = RUNNING_NAME.fullmatch(job_dir.name)
    return None if m is None else m.group("token")


def _heartbeat_names(job_dir: Path, token: str | None) -> list[str]:
    """Where the claim ``token``'s heartbeat may be, in order: its own name, then an older
    version's ``heartbeat`` (module docstring). By default the token in the entry's name."""
    token = entry_token(job_dir) if token is None else token
    own = [] if token is None else [heartbeat_path(job_dir, token).name]
    return [*own, defaults.HEARTBEAT_FILENAME]


def heartbeat_stat(job_dir: Path, token: str | None = None) -> os.stat_result | None:
    """lstat of the file :func:`read_heartbeat` reads for the claim ``token``, None if there
    is none (its mtime says when the owner last beat, its identity changes with each beat)."""
    for name in _heartbeat_names(job_dir, token):
        try:
            st = os.lstat(job_dir / name)
        except FileNotFoundError:
            continue
        except OSError:
            return None
        return st if stat.S_ISREG(st.st_mode) else None
    return None


def read_heartbeat(job_dir: Path, token: str | None = None) -> Heartbeat | None:
    """The heartbeat of the claim ``token`` (by default the entry name's), or None when it is
    missing or unreadable (treated as silent).

    Read only, never written, renamed or removed (another claim's names are its own).
    O_NONBLOCK: whatever sits under the name, the open returns at once (a FIFO would
    otherwise wait for a writer); only a regular file is read.
    """
    for name in _heartbeat_names(job_dir, token):
        try:
            fd = os.open(job_dir / name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except FileNotFoundError:
            continue  # not this name: the next (an older version's)
        except OSError:
            return None
        return _read_beat(fd)
    return None


def read_first_beat(job_dir: Path, token: str) -> Heartbeat | None:
    """The beat a claim wrote into its new lock file (``lock-<token>``), whose link as its
    heartbeat a crash may have stopped (spoolrender.spool.heartbeat.JobLock.publish_as);
    None if the lock file holds none (made by an older version, or killed before the
    write). Read only, like :func:`read_heartbeat`."""
    try:
        fd = os.open(lock_path(job_dir, token), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    beat = _read_beat(fd)
    return beat if beat is not None and beat.token == token else None


def _read_beat(fd: int) -> Heartbeat | None:
    """The heartbeat in the open file ``fd`` (closed here), or None."""
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return Heartbeat.from_json(_read_all(fd))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    finally:
        # A FUSE client (GlusterFS) can fail the close of a file that the owner's next
        # beat replaced meanwhile (ENOENT from its flush): what was read stands.
        with contextlib.suppress(OSError):
            os.close(fd)


_HEARTBEAT_MAX_BYTES = 64 * 1024  # a heartbeat is a few hundred bytes: a bigger file is garbage


def _read_all(fd: int) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while size < _HEARTBEAT_MAX_BYTES:
        chunk = os.read(fd, _HEARTBEAT_MAX_BYTES - size)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)
