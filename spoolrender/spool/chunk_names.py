"""Names of a split job's pieces, derived from the job's id and uid alone, so that every
host (and a planner that runs again after a crash) arrives at the same names.

- chunk entries: id ``<job-id>@chunk-NNNN`` (``@`` is never in a job id), uid a hash of
  the job's uid and the chunk's index; they live in retry/ and running/ like jobs;
- the job's ledger, ``.spoolrender/chunks/<id>.<uid>/``: its plan and finished chunks,
  in one place whatever state the job itself is in;
- chunk files, ``<output root>/.spoolrender-chunks/<id>.<uid>/NNNN-<token>/``: on the
  output filesystem (renames from scratch), under a dot-name no output can have.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from spoolrender.spool.layout import TOKEN_HEX, SpoolLayout

CHUNK_MARK = "@chunk-"
LEDGERS_DIR = "chunks"  # in .spoolrender/
STORE_DIR = ".spoolrender-chunks"  # in the output root


def chunk_id(parent_id: str, index: int) -> str:
    return f"{parent_id}{CHUNK_MARK}{index:04d}"


def parent_id(job_id: str) -> str:
    """The id of the job a chunk belongs to (a job's own id as it is)."""
    return job_id.split(CHUNK_MARK, 1)[0]


def is_chunk_name(name: str) -> bool:
    """True for a chunk entry's name or id (in retry/ or running/): never shown as a job."""
    return CHUNK_MARK in name


def chunk_uid(parent_uid: str, index: int) -> str:
    return hashlib.sha256(f"{parent_uid}/{index}".encode()).hexdigest()[:TOKEN_HEX]


def ledgers_root(layout: SpoolLayout) -> Path:
    return layout.private / LEDGERS_DIR


def ledger_dir(layout: SpoolLayout, key: str) -> Path:
    """The ledger of job ``key`` (``<id>.<uid>``)."""
    return ledgers_root(layout) / key


def store_dir(output_root: Path, key: str) -> Path:
    """Where the verified chunk files of job ``key`` wait for the join."""
    return output_root / STORE_DIR / key


def chunk_store_name(index: int, token: str) -> str:
    # Per run (token): two runs of one chunk (a duplicate after a crash) never share files.
    return f"{index:04d}-{token}"
