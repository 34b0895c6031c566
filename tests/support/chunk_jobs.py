"""Shared by the chunked-rendering tests: a spool config whose `frames` command can be
split (tests/programs/frames.py: one line per frame), and what a split job leaves behind."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from spoolrender.spool.chunk_names import LEDGERS_DIR, STORE_DIR, is_chunk_name
from spoolrender.spool.layout import SpoolLayout

FRAMES = Path(__file__).resolve().parents[1] / "programs" / "frames.py"
PY = sys.executable

FRAMES_CONFIG: dict[str, Any] = {
    "commands": {"frames": [PY, str(FRAMES), "whole", "{props_file}", "{output}"]},
    "command_chunks": {
        "frames": {
            "span": [PY, str(FRAMES), "span", "{props_file}"],
            "chunk": [PY, str(FRAMES), "chunk", "{props_file}", "{index}", "{first}", "{last}", "{output}"],
            "join": [PY, str(FRAMES), "join", "{props_file}", "{parts_file}", "{output}"],
        }
    },
}


def frames_job(chunks: int | None = 4, **props: Any) -> dict[str, Any]:
    job: dict[str, Any] = {"renderer": "command", "command": "frames", "props": props}
    if chunks is not None:
        job["chunks"] = chunks
    return job


def video(frames: int = 40) -> str:
    """What frames.py renders for a whole job of ``frames`` frames."""
    return "".join(f"frame {i}\n" for i in range(frames))


def chunk_leftovers(layout: SpoolLayout, output_root: Path) -> list[str]:
    """Every trace of a chunk that must be gone once its job has ended."""
    found = [f"{s}/{n}" for s in ("running", "retry") for n in os.listdir(layout.root / s) if is_chunk_name(n)]
    found += [f"split/{n}" for n in os.listdir(layout.root / "split")]
    ledgers = layout.private / LEDGERS_DIR
    found += [f"ledger {n}" for n in (os.listdir(ledgers) if ledgers.is_dir() else [])]
    store = output_root / STORE_DIR
    found += [f"store {n}" for n in (os.listdir(store) if store.is_dir() else [])]
    return found


def markers(path: Path) -> list[tuple[int, int, int]]:
    """(index, attempt, pid) of each chunk render frames.py recorded."""
    if not path.exists():
        return []
    return [(int(a), int(b), int(c)) for a, b, c in (line.split() for line in path.read_text().splitlines())]
