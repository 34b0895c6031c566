"""The write token of `spoolrender serve`: where it may come from, and checking a request's.

Whoever knows the token can submit, cancel and retry jobs, so it must not sit in a file
every local user can read (as OpenSSH refuses a private key others can read). It comes
from one of:

- ``serve_token_file``: a regular file, neither readable nor writable by others and not
  writable by its group; readable by its group only when that group is not the spool's
  (the submitters') and has no member but the server's user
  (:mod:`spoolrender.config.secret_file`); the first line is the token;
- ``serve_token`` in the spool's ``spoolrender.yaml``: only if that file is readable by
  nobody else on the same terms (``init`` makes it readable by everyone: the runners of
  every host read it);
- ``SPOOLRENDER_SERVE_TOKEN`` in the server's environment.

Anything else is refused with the reason and the fix, before the server listens.
"""

from __future__ import annotations

import hmac
import os
import stat

from spoolrender import defaults
from spoolrender.config.secret_file import read_secret_line, shared_group_problem
from spoolrender.config.spool_config import SpoolConfig, config_file_settings
from spoolrender.errors import ConfigError


def load_serve_token(config: SpoolConfig) -> str | None:
    """The token that enables write actions (None: read-only), or a ConfigError saying why not."""
    if config.serve_token_file is not None:
        return _read_token_file(config)
    if config.serve_token is not None and "serve_token" in config_file_settings(config.spool):
        config_path = config.spool / defaults.CONFIG_FILENAME
        try:
            st = os.stat(config_path)
        except OSError as exc:
            raise ConfigError(f"{config_path}: cannot check who may read serve_token: {exc}") from exc
        mode = stat.S_IMODE(st.st_mode)
        group = shared_group_problem(st.st_gid, config.spool) if mode & stat.S_IRGRP else None
        if mode & stat.S_IROTH or group is not None:
            who = "other users can read it" if mode & stat.S_IROTH else f"it is readable by its group and {group}"
            raise ConfigError(
                f"{config_path} holds serve_token but {who} (mode {mode:04o}): "
                "they could submit, cancel and retry jobs. Move it to a file only you can read, "
                "e.g. serve-token in the spool with `chmod 600`, and set serve_token_file: serve-token "
                f"instead; or `chmod go-r {config_path}`"
            )
    return config.serve_token


def _read_token_file(config: SpoolConfig) -> str:
    path = config.serve_token_file
    assert path is not None
    where = f"serve_token_file {path}"
    token = read_secret_line(path, where, "anyone who can read or change it controls the spool", config.spool)
    if any(c.isspace() for c in token):
        raise ConfigError(f"{where}: expected the token on the first line, without spaces")
    return token


def bearer_matches(authorization: str | None, token: str) -> bool | None:
    """Whether an ``Authorization`` header carries ``token`` (None: no bearer token in it)."""
    scheme, _, value = (authorization or "").strip().partition(" ")
    if scheme.lower() != "bearer" or not value.strip():
        return None
    # Constant time: the comparison must not tell a client how much of a guess was right.
    return hmac.compare_digest(value.strip().encode(), token.encode())
