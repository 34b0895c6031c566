"""How many jobs this host runs at once, and how many threads each may use.

From psutil: usable cores (CPU affinity, as in a container or a systemd CPUAffinity=)
times ``slots_per_core`` divided by the per-job thread budget, and available memory
divided by the per-job memory estimate; the smaller wins, and never less than one.
More slots than cores is deliberate: a render leaves its core idle part of the time
(see ``defaults.SLOTS_PER_CORE``), and jobs in parallel fill that time better than
Remotion's per-job ``concurrency`` does. ``slots`` in the config overrides the count; the
thread budget is then spread so that slots x threads <= cores.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import psutil

from spoolrender.config.spool_config import SpoolConfig

MIB = 1024 * 1024


@dataclass(frozen=True)
class Capacity:
    slots: int
    threads_per_job: int
    cores: int
    available_mb: int
    reason: str

    def __post_init__(self) -> None:
        if self.slots < 1 or self.threads_per_job < 1:
            raise ValueError("slots and threads_per_job must be >= 1")


def usable_cores() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return max(1, psutil.cpu_count(logical=True) or 1)


def plan_capacity(config: SpoolConfig) -> Capacity:
    cores = usable_cores()
    available_mb = int(psutil.virtual_memory().available // MIB)
    if config.slots is not None:
        threads = max(1, min(config.threads_per_job, cores // config.slots))
        return Capacity(config.slots, threads, cores, available_mb, "slots set in config")
    threads = min(config.threads_per_job, cores)
    by_cpu = max(1, int(cores * config.slots_per_core) // threads)
    by_memory = max(1, available_mb // config.memory_per_job_mb)
    slots = min(by_cpu, by_memory)
    reason = (
        f"{cores} cores x {config.slots_per_core:g} slots per core / {threads} thread(s) per job"
        if by_cpu <= by_memory
        else f"{available_mb} MB available / {config.memory_per_job_mb} MB per job"
    )
    return Capacity(slots, threads, cores, available_mb, reason)
