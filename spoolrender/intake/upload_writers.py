"""Is a process on this host still writing a file? The authoritative local writer check.

Uploads by scp/sftp (sftp-server), rsync --inplace, cp or a script are all written by a
process on the receiving host that holds the file open for writing until the upload
ends, however long it pauses (``scp -l 100`` stays silent for more than 20 s). So a file
that a local process holds open for writing is never complete. Two ways to see that,
measured on Debian 12 / Linux 6.x (docs/reliability.md, "Uploads"):

1. A read lease (``fcntl(F_SETLEASE, F_RDLCK)`` on a read-only descriptor): the kernel
   refuses it with EAGAIN while *any* descriptor on the inode is open for writing, in any
   process, pid namespace or container. One open and two fcntl calls (~10 us). It needs the
   caller to own the file or to hold CAP_LEASE: root always may; an unprivileged runner
   (contrib's systemd unit drops every capability) only for files its own user uploaded.
   This decides whenever the kernel grants or refuses the lease.
2. A scan of ``/proc/*/fd``: ``lstat`` of each fd link carries the descriptor's access mode
   in its permission bits (S_IWUSR = open for writing), and ``stat`` through the link gives
   the inode, which follows the file across renames (a path comparison would not). As root
   it sees every process of this pid namespace; as an unprivileged user only that user's
   own (other users' fd directories answer EACCES, or are hidden by ``hidepid``), so a scan
   that could not look everywhere proves a writer but never the absence of one. This
   decides when the lease cannot be taken (file of another user, filesystem without
   leases), once per scan pass for all files together.

When neither can prove the absence of a writer the answer is :data:`UNKNOWN` and the caller
falls back to inotify's open/modify/close bookkeeping and the settle time. Writers on
other hosts (NFS clients) are invisible to both: on a network filesystem a "free" answer
is no proof, and only the settle time protects (the caller knows which filesystem it is).
"""

from __future__ import annotations

import enum
import errno
import fcntl
import os
import signal
import stat
from pathlib import Path

# Python's fcntl module names these only on some versions; the values are Linux's ABI.
F_SETLEASE = getattr(fcntl, "F_SETLEASE", 1024)
F_SETSIG = getattr(fcntl, "F_SETSIG", 10)


class Writer(enum.Enum):
    HELD = "held"  # a local process holds the file open for writing
    FREE = "free"  # no process on this host does (proven)
    UNKNOWN = "unknown"  # cannot tell from here


def lease_probe(path: Path) -> Writer:
    """Ask the kernel for a read lease on ``path`` and give it back at once.

    HELD on EAGAIN (open for writing somewhere on this host), FREE when granted, UNKNOWN
    when leases are not ours to take here (not the owner and no CAP_LEASE: EACCES; a
    filesystem without leases: EINVAL) or the path is not a regular file.
    """
    try:
        # Only regular files are opened at all: opening a dropped device node could have
        # side effects. (A swap between lstat and open still meets O_NOFOLLOW/O_NONBLOCK.)
        if not stat.S_ISREG(os.lstat(path).st_mode):
            return Writer.UNKNOWN
        # O_NOFOLLOW | O_NONBLOCK: never follow a dropped symlink, never hang on a FIFO.
        # Read-only: a read lease can only be set on a read-only descriptor.
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return Writer.UNKNOWN
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return Writer.UNKNOWN
        return probe_lease(fd)
    except OSError:
        return Writer.UNKNOWN
    finally:
        os.close(fd)


def probe_lease(fd: int) -> Writer:
    """:func:`lease_probe` on ``fd``, a read-only descriptor of a regular file the caller
    opened (and may read next: one open for the probe and the read)."""
    try:
        # While we hold the lease, a process opening the file for writing breaks it and
        # the kernel signals us (SIGIO by default, whose default action kills the
        # process). SIGURG's default action is to ignore it: the writer waits the few
        # microseconds until our F_UNLCK and nothing else happens.
        fcntl.fcntl(fd, F_SETSIG, signal.SIGURG)
        try:
            fcntl.fcntl(fd, F_SETLEASE, fcntl.F_RDLCK)
        except OSError as exc:
            if exc.errno == errno.EAGAIN:
                return Writer.HELD
            return Writer.UNKNOWN  # EACCES/EPERM (not ours), EINVAL/ENOSYS (no leases)
        fcntl.fcntl(fd, F_SETLEASE, fcntl.F_UNLCK)
        return Writer.FREE
    except OSError:
        return Writer.UNKNOWN


def _proc_hidden() -> bool:
    """True when /proc hides other users' processes from us (``hidepid``, not root)."""
    if os.geteuid() == 0:
        return False
    try:
        with open("/proc/self/mountinfo", encoding="utf-8") as fh:
            for line in fh:
                fields = line.split()
                if len(fields) > 4 and fields[4] == "/proc" and "hidepid=" in line:
                    return "hidepid=0" not in line and "hidepid=off" not in line
    except OSError:
        return True
    return False


class ProcWriters:
    """One scan of /proc/*/fd: the inodes open for writing in the processes we may see."""

    def __init__(self, proc: Path = Path("/proc")) -> None:
        self.inodes: set[tuple[int, int]] = set()
        self.complete = not _proc_hidden()
        try:
            pids = [p for p in os.listdir(proc) if p.isdigit()]
        except OSError:
            self.complete = False
            return
        for pid in pids:
            fd_dir = proc / pid / "fd"
            try:
                fds = os.listdir(fd_dir)
            except PermissionError:
                self.complete = False  # another user's process: it may be the writer
                continue
            except OSError:
                continue  # exited meanwhile
            for fd in fds:
                link = fd_dir / fd
                try:
                    # The magic link's own mode says how the descriptor was opened.
                    if not os.lstat(link).st_mode & stat.S_IWUSR:
                        continue
                    st = os.stat(link)
                except OSError:
                    continue  # closed meanwhile
                if stat.S_ISREG(st.st_mode):
                    self.inodes.add((st.st_dev, st.st_ino))

    def check(self, st: os.stat_result) -> Writer:
        if (st.st_dev, st.st_ino) in self.inodes:
            return Writer.HELD
        return Writer.FREE if self.complete else Writer.UNKNOWN


class WriterCheck:
    """The local writer check for one scan pass: a lease per file, /proc only if needed."""

    def __init__(self) -> None:
        self._proc: ProcWriters | None = None

    def check(self, path: Path, st: os.stat_result) -> Writer:
        verdict = lease_probe(path)
        if verdict is not Writer.UNKNOWN:
            return verdict
        if self._proc is None:
            self._proc = ProcWriters()  # one scan serves every file of this pass
        return self._proc.check(st)


def local_writer(path: Path) -> Writer:
    """The verdict for one file now (a fresh /proc scan if the lease cannot decide)."""
    try:
        st = os.stat(path, follow_symlinks=False)
    except OSError:
        return Writer.UNKNOWN
    return WriterCheck().check(path, st)
