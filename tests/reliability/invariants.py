"""What must hold on disk after anything at all happened to a spool: the no-loss audit.

Used by the chaos, race and multi-host tests and by the long-run script. Everything is
read from the filesystem (never from a runner's memory), after every runner has stopped.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from spoolrender.spool.layout import FINAL_NAME, RETRY_NAME, RUNNING_NAME, SpoolLayout, list_names
from spoolrender.spool.probe_dirs import PROBE_PREFIX
from spoolrender.spool.publish import scratch_name
from spoolrender.spool.records import attempts_used, read_runs

# Processes a render may leave behind; none may outlive the runners.
RENDER_PROCESS_MARKERS = ("render_props.py", "frames.py", "render-worker.mjs", "spoolrender-worker-")


@dataclass
class Audit:
    expected: int
    where: dict[str, list[str]] = field(default_factory=dict)  # job id -> states it is in
    lost: list[str] = field(default_factory=list)
    duplicated: list[str] = field(default_factory=list)
    partial_files: list[str] = field(default_factory=list)
    bad_outputs: list[str] = field(default_factory=list)
    attempt_violations: list[str] = field(default_factory=list)
    orphans: list[str] = field(default_factory=list)
    states: Counter[str] = field(default_factory=Counter)

    @property
    def ok(self) -> bool:
        return not (
            self.lost or self.duplicated or self.partial_files or self.bad_outputs or self.attempt_violations
            or self.orphans
        )  # fmt: skip

    def problems(self) -> str:
        parts = []
        for name in ("lost", "duplicated", "partial_files", "bad_outputs", "attempt_violations", "orphans"):
            values = getattr(self, name)
            if values:
                parts.append(f"{name}: {values[:10]}{' ...' if len(values) > 10 else ''}")
        return "; ".join(parts) or "none"


def _job_id(state: str, name: str) -> str | None:
    if state == "incoming":
        if name.startswith("."):
            return None
        return name.rsplit(".", 1)[0] if name.endswith((".yaml", ".yml")) else name
    pattern = {"running": RUNNING_NAME, "retry": RETRY_NAME}.get(state, FINAL_NAME)
    m = pattern.fullmatch(name)
    return m.group("id") if m else None


def render_orphans(scope: str = "") -> list[str]:
    """Render processes still alive (zombies do not count) whose cmdline marks them as ours.

    ``scope``: only processes whose command line also mentions it (a spool's path), so
    that renders of other spools on the machine are not counted.
    """
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as fh:
                state = fh.read().rsplit(b")", 1)[1].split()[0]
            with open(f"/proc/{entry.name}/cmdline", "rb") as fh:
                cmdline = fh.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if state not in (b"Z", b"X") and scope in cmdline and any(m in cmdline for m in RENDER_PROCESS_MARKERS):
            found.append(f"{entry.name}: {cmdline[:120]}")
    return found


def probe_leftovers(layout: SpoolLayout) -> list[str]:
    """Start-up probes' directories (spoolrender.spool.probe_dirs) in the spool's private dir or the
    output root's scratch dir. A runner killed while probing leaves its own until its host
    starts a runner again (or for an hour): judge a spool after every host has."""
    found = []
    for parent in (layout.private, layout.root / "output" / ".spoolrender-tmp"):
        if parent.exists():
            found += [f"{parent.name}/{name}" for name in os.listdir(parent) if name.startswith(PROBE_PREFIX)]
    return found


def damaged_cache_entries(cache: Path) -> list[str]:
    """Render cache entries that are not whole (an entry must appear complete or not at all;
    staging left by a killed runner is not an entry and is swept later)."""
    problems = []
    entries = cache / "entries"
    for name in list_names(entries):
        try:
            meta = json.loads((entries / name / "entry.json").read_text())
            data = (entries / name / "output").read_bytes()
        except (OSError, ValueError) as exc:
            problems.append(f"cache entry {name[:16]}: {exc}")
            continue
        if len(data) != meta["bytes"] or hashlib.sha256(data).hexdigest() != meta["sha256"]:
            problems.append(f"cache entry {name[:16]}: its output does not match its entry.json")
    return problems


def audit(
    layout: SpoolLayout,
    job_ids: set[str],
    *,
    output_ok: dict[str, bytes] | None = None,
    max_attempts: int = 100,
    check_processes: bool = True,
) -> Audit:
    """Check the spool against the ``job_ids`` that were submitted.

    ``output_ok`` maps a job id to the exact bytes its published output must have.
    """
    result = Audit(expected=len(job_ids))
    # split/: a job waiting for its chunks; a chunk entry left in running/ or retry/ shows
    # as an unexpected job (none may be left once its job has ended).
    for state in ("incoming", "running", "retry", "split", "done", "failed"):
        for name in list_names(layout.root / state):
            job_id = _job_id(state, name)
            if job_id is None:
                continue
            result.where.setdefault(job_id, []).append(state)
            result.states[state] += 1
    for job_id in sorted(job_ids):
        states = result.where.get(job_id, [])
        if not states:
            result.lost.append(job_id)
        elif len(states) > 1:
            result.duplicated.append(f"{job_id}: {states}")
    for job_id in sorted(set(result.where) - job_ids):
        result.duplicated.append(f"{job_id}: unexpected job in {result.where[job_id]}")

    output_root = layout.root / "output"
    scratch = output_root / ".spoolrender-tmp"
    running = set(list_names(layout.running))
    if scratch.exists():
        # A job still in running/ may own a scratch dir; any other one is a leak.
        owned = {scratch_name(name) for name in running}
        result.partial_files += [f"scratch: {p.name}" for p in scratch.iterdir() if p.name not in owned]
    expected_outputs: set[Path] = set()
    for name in list_names(layout.done):
        job_dir = layout.done / name
        try:
            res = json.loads((job_dir / "result.json").read_text())
        except (OSError, ValueError) as exc:
            result.bad_outputs.append(f"{name}: no result.json ({exc})")
            continue
        # Relative to the output root: another host may have recorded it through another
        # mount of the same spool.
        out = output_root / str(res["output"]).split("/output/", 1)[-1]
        expected_outputs.add(out)
        try:
            data = out.read_bytes()
        except OSError:
            result.bad_outputs.append(f"{name}: output {out} missing")
            continue
        job_id = res["id"]
        if output_ok is not None and job_id in output_ok and data != output_ok[job_id]:
            result.bad_outputs.append(f"{name}: output content {data[:40]!r}")
        if res["bytes"] != len(data):
            result.bad_outputs.append(f"{name}: {len(data)} bytes, result says {res['bytes']}")
    cache = output_root / ".spoolrender-cache"
    result.bad_outputs += damaged_cache_entries(cache)
    if output_root.exists():
        for path in output_root.rglob("*"):
            if path.is_dir() or scratch in path.parents or cache in path.parents:
                continue
            if ".remotion-in-progress" in path.name or path not in expected_outputs:
                result.partial_files.append(str(path.relative_to(output_root)))

    for state in ("retry", "done", "failed"):
        for name in list_names(layout.state_dir(state)):
            job_dir = layout.state_dir(state) / name
            runs = read_runs(job_dir)
            used = attempts_used(runs)
            if used > max_attempts:
                result.attempt_violations.append(f"{state}/{name}: {used} attempts > {max_attempts}")
            if state == "done" and (not runs or runs[-1].outcome != "publishing"):
                result.attempt_violations.append(f"done/{name}: last run is not a publish")
            numbers = [r.run for r in runs]
            if numbers != sorted(set(numbers)):
                result.attempt_violations.append(f"{state}/{name}: run numbers {numbers}")
    if check_processes:
        result.orphans = render_orphans(str(layout.root))
    return result
