"""Reading a secret (serve's write token, a webhook's HMAC key) from a file of its own.

A secret is only as safe as the file that holds it: the file must be a regular file that
other users cannot touch at all and the group cannot change. Both serve's token and the
hooks' secrets are read here, so the rule and its wording are the same everywhere.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from spoolrender.errors import ConfigError

MAX_SECRET_FILE_BYTES = 4096
MIN_SECRET_LENGTH = 16
# Others must have no access at all; the group may read (not write) a secret file.
SECRET_FILE_FORBIDDEN = stat.S_IRWXO | stat.S_IWGRP


def read_secret_line(path: Path, where: str, risk: str) -> str:
    """The first line of secret file ``path``, stripped; a ConfigError naming ``where``
    (e.g. ``serve_token_file PATH``) when it is unreadable, not a regular file, open to
    others (``risk`` says what such a reader could do), too large or too short."""
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
        if mode & SECRET_FILE_FORBIDDEN:
            raise ConfigError(
                f"{where} is open to other users (mode {mode:04o}): {risk}; "
                f"`chmod 600 {path}` (or 640 for the spool's group)"
            )
        data = os.read(fd, MAX_SECRET_FILE_BYTES + 1)
    finally:
        os.close(fd)
    lines = data.decode("utf-8", errors="replace").splitlines()
    secret = lines[0].strip() if lines else ""
    if len(data) > MAX_SECRET_FILE_BYTES or len(secret) < MIN_SECRET_LENGTH:
        raise ConfigError(f"{where}: expected the secret on the first line, at least {MIN_SECRET_LENGTH} characters")
    return secret
