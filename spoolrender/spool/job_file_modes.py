"""Who may read what the runner writes in a job directory: never more than the job itself.

A job submitted 0600 (a customer's props, an API key) stays private: its private copy gets
only the read bits the submitted file had (:func:`copy_mode`), and every other file the
runner writes beside it that can repeat the job's content gets the copy's read bits and no
more (:func:`private_file_mode`): its run logs (a command's output echoes props and env),
hooks.log, its run records, ``failure.json`` and ``result.json`` and the hooks' delivery
state (an error message is the last line a render printed). The runner's own user reads
them all; ``status``, ``show`` and ``serve`` run as another user see a private job without
them (spoolrender.spool.records.read_runs skips what it may not read).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from spoolrender import defaults

# Readable by group and others only as far as the submitted file was.
COPY_READ_BITS = stat.S_IRGRP | stat.S_IROTH
_OWNER_RW = stat.S_IRUSR | stat.S_IWUSR


def copy_mode(submitted_mode: int) -> int:
    """The mode of the copy of a file of mode ``submitted_mode``: 0400, plus the group and
    other read bits the submitted file had (the copy never widens who may read a job)."""
    return stat.S_IRUSR | (submitted_mode & COPY_READ_BITS)


def private_file_mode(job_dir: Path) -> int:
    """The mode of a file the runner writes in ``job_dir`` that can repeat the job's content:
    read and write for the runner, and for group and others no more read bits than the
    private copy has; before there is a copy (a claim refused or abandoned before it),
    those the submitted file has, which its copy would get; 0600 when neither can be read."""
    for name in (defaults.JOB_FILENAME, defaults.SUBMITTED_FILENAME):
        try:
            st = os.stat(job_dir / name, follow_symlinks=False)
        except OSError:
            continue
        return private_mode_of_copy(stat.S_IMODE(st.st_mode))
    return _OWNER_RW


def private_mode_of_copy(mode: int) -> int:
    """:func:`private_file_mode` of a job directory whose copy (or submitted file) has ``mode``."""
    return _OWNER_RW | (mode & COPY_READ_BITS)
