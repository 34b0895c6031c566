"""Reading a secret (serve's write token, a webhook's HMAC key) from a file of its own.

A secret is only as safe as the file that holds it: the file must be a regular file that
other users cannot touch at all and the group cannot change. The group may read it only
when nobody but the runner's own user is in that group: never the spool's group (the
submitters: with serve's token they could pause the spool, with a hook's key forge its
signatures), nor any group with other members. Both serve's token and the hooks' secrets
are read here, so the rule and its wording are the same everywhere.
"""

from __future__ import annotations

import grp
import os
import pwd
import stat
from pathlib import Path

from spoolrender.errors import ConfigError
from spoolrender.spool.layout import SpoolLayout

MAX_SECRET_FILE_BYTES = 4096
MIN_SECRET_LENGTH = 16
# Others must have no access at all; the group may never write a secret file.
SECRET_FILE_FORBIDDEN = stat.S_IRWXO | stat.S_IWGRP
SECRET_FIX = "`chmod 600 {path}`, or give it a group of its own that has no other members"


def spool_group(spool: Path) -> int | None:
    """The spool's group (the submitters'): the group of incoming/, which they write into."""
    for directory in (SpoolLayout(spool).incoming, spool):
        try:
            return os.stat(directory).st_gid
        except OSError:
            continue
    return None


def shared_group_problem(gid: int, spool: Path) -> str | None:
    """Why members of group ``gid`` other than this process's user may exist (a file of
    that group readable by the group is then readable by them); None if nobody else is in it.

    Members are the group's listed members and every user whose primary group it is, as
    the group and user databases (NSS) list them."""
    try:
        group = grp.getgrgid(gid)
    except KeyError:
        return f"its group {gid} has no name, so its members cannot be checked"
    if gid == spool_group(spool):
        return f"its group {group.gr_name} is the spool's group, whose members submit jobs"
    uid = os.geteuid()
    try:
        me: str | None = pwd.getpwuid(uid).pw_name
    except KeyError:
        me = None
    others = {name for name in group.gr_mem if name != me}
    others |= {user.pw_name for user in pwd.getpwall() if user.pw_gid == gid and user.pw_uid != uid}
    if others:
        listed = ", ".join(sorted(others)[:5]) + (", ..." if len(others) > 5 else "")
        return f"its group {group.gr_name} has other members ({listed})"
    return None


def read_secret_line(path: Path, where: str, risk: str, spool: Path) -> str:
    """The first line of secret file ``path``, stripped; a ConfigError naming ``where``
    (e.g. ``serve_token_file PATH``) when it is unreadable, not a regular file, owned by
    another user than the runner's or root, open to
    others or to a group with other members (``risk`` says what such a reader could do;
    ``spool``: whose group counts as shared), too large or too short."""
    try:
        # Opened once and checked by fstat, so the checked file is the one read (no swap
        # in between); a symlink to a safe file is fine (secret mounts are symlinks).
        # O_NONBLOCK: a FIFO planted under the name must not hang the caller.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise ConfigError(f"{where}: cannot read: {exc.strerror or exc}") from exc
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ConfigError(f"{where}: not a regular file")
        mode = stat.S_IMODE(st.st_mode)
        fix = SECRET_FIX.format(path=path)
        if st.st_uid not in (os.geteuid(), 0):
            # Its owner knows the secret and can change it at will (a file planted at the
            # configured path, or a symlink there to a file of theirs).
            raise ConfigError(
                f"{where} is owned by uid {st.st_uid}, not by the runner's uid {os.geteuid()} or root: {risk}; "
                f"make it the runner's (chown) and {fix}"
            )
        if mode & SECRET_FILE_FORBIDDEN:
            raise ConfigError(f"{where} is open to other users (mode {mode:04o}): {risk}; {fix}")
        problem = shared_group_problem(st.st_gid, spool) if mode & stat.S_IRGRP else None
        if problem is not None:
            raise ConfigError(f"{where} is readable by its group (mode {mode:04o}) and {problem}: {risk}; {fix}")
        data = os.read(fd, MAX_SECRET_FILE_BYTES + 1)
    finally:
        os.close(fd)
    lines = data.decode("utf-8", errors="replace").splitlines()
    secret = lines[0].strip() if lines else ""
    if len(data) > MAX_SECRET_FILE_BYTES or len(secret) < MIN_SECRET_LENGTH:
        raise ConfigError(f"{where}: expected the secret on the first line, at least {MIN_SECRET_LENGTH} characters")
    return secret
