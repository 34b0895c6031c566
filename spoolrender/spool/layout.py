"""Where things live in a spool, and how entry names encode queue order.

A spool is a directory with one sub-directory per state. A job enters as a single file
in ``incoming/``; from its claim on it is a directory (the runner's private copy
``job.yaml``, the submitted file as evidence, and the runner's records beside them) that
moves between states with one ``rename`` each, so a job is always in exactly one state
and its records always travel with it.

Entry names (``uid`` is fixed at the first claim, ``token`` is new for every claim):

- ``running/<id>.<uid>.<token>``
- ``retry/<due-ms>-<priority-key>-<id>.<uid>``: sorts by due time, as huey's FileStorage
  sorts by priority and time, so a listing is the retry queue in order
- ``done/<id>.<uid>`` and ``failed/<id>.<uid>``
- ``split/<id>.<uid>``: a job split into chunks, waiting for them (spoolrender.chunks)
"""

from __future__ import annotations

import functools
import grp
import os
import re
import secrets
from dataclasses import dataclass
from pathlib import Path

from spoolrender import defaults
from spoolrender.core.vocabulary import JobState
from spoolrender.errors import SpoolLayoutError

TOKEN_HEX = 12  # 48 random bits: unique enough per spool, short enough to read
_HEX = rf"[0-9a-f]{{{TOKEN_HEX}}}"
RUNNING_NAME = re.compile(rf"(?P<id>.+)\.(?P<uid>{_HEX})\.(?P<token>{_HEX})")
RETRY_NAME = re.compile(rf"(?P<due>\d{{13}})-(?P<prio>\d{{4}})-(?P<id>.+)\.(?P<uid>{_HEX})")
FINAL_NAME = re.compile(rf"(?P<id>.+)\.(?P<uid>{_HEX})")


def new_token() -> str:
    return secrets.token_hex(TOKEN_HEX // 2)


def priority_key(priority: int) -> str:
    """Encode priority so that higher priorities sort first as text."""
    return f"{defaults.PRIORITY_MAX - priority:04d}"


def priority_from_key(key: str) -> int:
    return defaults.PRIORITY_MAX - int(key)


@dataclass(frozen=True)
class SpoolLayout:
    """The spool's directories by name. Each path is built once per layout (cached): the
    runner's loop and every run ask for them many times per job, and pathlib's joins were
    a measurable share of a no-op job's time (bench/README.md, "P2 queue overhead")."""

    root: Path

    @functools.cached_property
    def incoming(self) -> Path:
        return self.root / JobState.INCOMING.value

    @functools.cached_property
    def running(self) -> Path:
        return self.root / JobState.RUNNING.value

    @functools.cached_property
    def retry(self) -> Path:
        return self.root / JobState.RETRY.value

    @functools.cached_property
    def done(self) -> Path:
        return self.root / JobState.DONE.value

    @functools.cached_property
    def failed(self) -> Path:
        return self.root / JobState.FAILED.value

    @functools.cached_property
    def split(self) -> Path:
        return self.root / JobState.SPLIT.value

    @functools.cached_property
    def private(self) -> Path:
        return self.root / defaults.PRIVATE_DIR

    @functools.cached_property
    def pause_marker(self) -> Path:
        # `spoolrender pause`'s marker, looked for on every pass of the claiming loop.
        return self.private / defaults.PAUSE_FILENAME

    @functools.cached_property
    def ids(self) -> Path:
        return self.private / "ids"

    @functools.cached_property
    def runners(self) -> Path:
        return self.private / "runners"

    def state_dir(self, state: str) -> Path:
        if state not in defaults.STATE_DIRS:
            raise ValueError(f"unknown state {state!r}")
        return self.root / state

    def check(self) -> None:
        """Raise SpoolLayoutError unless every state directory exists."""
        required = [s for s in defaults.STATE_DIRS if s not in defaults.OPTIONAL_STATE_DIRS]
        missing = [s for s in (*required, defaults.PRIVATE_DIR) if not (self.root / s).is_dir()]
        if missing:
            raise SpoolLayoutError(
                f"{self.root} is not an initialised spool (missing {', '.join(missing)}); "
                f"run `spoolrender init {self.root}`"
            )


def running_name(job_id: str, uid: str, token: str) -> str:
    return f"{job_id}.{uid}.{token}"


def retry_name(job_id: str, uid: str, due: float, priority: int) -> str:
    return f"{int(due * 1000):013d}-{priority_key(priority)}-{job_id}.{uid}"


def final_name(job_id: str, uid: str) -> str:
    return f"{job_id}.{uid}"


def list_names(directory: Path) -> list[str]:
    """Names in ``directory``, unsorted; a missing directory lists as empty."""
    try:
        # listdir, not scandir: names only, no DirEntry object per entry (done/ at a million
        # entries: 0.04 s less CPU of `status`'s listing, bench/status_scale.py).
        return os.listdir(directory)
    except FileNotFoundError:
        return []


def init_spool(root: Path, *, group: str | None = None, config_text: str | None = None) -> SpoolLayout:
    """Create (or complete) a spool at ``root``; existing jobs and config are left alone.
    A spool without a config file gets ``config_text`` as its spoolrender.yaml (`init`'s
    commented template, settings.config_template: the caller's, since settings depends on
    this module), or none.

    Permissions: the spool is owned by the runner's user. ``incoming/`` is group-writable,
    setgid (new files keep the spool's group) and sticky (a submitter cannot delete or
    rename another submitter's job, while the runner, owning the directory, can claim
    them all). Everything else is writable by the runner only.
    """
    layout = SpoolLayout(Path(root).expanduser().resolve())
    gid = -1
    if group is not None:
        try:
            gid = grp.getgrnam(group).gr_gid
        except KeyError as exc:
            raise SpoolLayoutError(f"no such group {group!r}") from exc
    try:
        layout.root.mkdir(parents=True, exist_ok=True)
        dirs = [
            (layout.root, 0o2755),
            (layout.incoming, 0o3775),
            (layout.running, 0o2755),
            (layout.retry, 0o2755),
            (layout.done, 0o2755),
            (layout.failed, 0o2755),
            (layout.split, 0o2755),
            (layout.private, 0o2755),
            (layout.ids, 0o2755),
            (layout.runners, 0o2755),
        ]
        for path, mode in dirs:
            path.mkdir(exist_ok=True)
            if gid != -1:
                os.chown(path, -1, gid)
            # chmod after mkdir: mkdir's mode is filtered by the umask, and setgid/sticky
            # bits are not reliably applied by mkdir at all.
            os.chmod(path, mode)
        config_path = layout.root / defaults.CONFIG_FILENAME
        if config_text is not None and not config_path.exists():
            config_path.write_text(config_text, encoding="utf-8")
    except OSError as exc:
        raise SpoolLayoutError(f"cannot initialise spool at {layout.root}: {exc}") from exc
    return layout
