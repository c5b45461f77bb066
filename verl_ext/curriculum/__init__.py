"""Two-phase curriculum sampling ("fast DAPO", SPEED-RL arXiv 2506.09016): pure bookkeeping, no Ray.

- ``controller``: ``DataController`` (fast / dapo / plain modes).
- ``dataproto_ops``: ``truncate``, ``interleave_by_uid``, ``pad_to_multiple``: functions on verl's DataProto.
- ``cost_model``: expected responses per training group from a pass-rate histogram.
- ``memory``: pass-rate memory (GRESO, arXiv 2506.02177): skip prompts that screened uniform in an earlier epoch
  (``MemorySettings``, ``PassRateMemory``; docs/PASS_RATE_MEMORY.md).

Nothing here patches verl: callers use these functions directly (the DataController orders its groups by prompt
position itself; `interleave_by_uid` is for callers whose rows carry no such position).
"""

from verl_ext.curriculum.controller import CONTINUE, PHASE_KEY, SCREEN, DataController
from verl_ext.curriculum.dataproto_ops import PAD_KEY, interleave_by_uid, pad_to_multiple, truncate
from verl_ext.curriculum.memory import MemorySettings, PassRateMemory

__all__ = [
    "CONTINUE",
    "PAD_KEY",
    "PHASE_KEY",
    "SCREEN",
    "DataController",
    "MemorySettings",
    "PassRateMemory",
    "interleave_by_uid",
    "pad_to_multiple",
    "truncate",
]
