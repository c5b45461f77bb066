"""Shared-prefix actor passes: each group's prompt computed once in the actor's log-prob and update passes.

Switch: verl's own key `actor_rollout_ref.actor.use_prefix_grouper` (on in the CPU backend). `packing.py` is the pure
layout and the log-prob gather; `engine.py` is verl's FSDP engine with the two overridden seams; `registration.py`
puts that engine in verl's engine registry for cuda and npu (docs/SHARED_PREFIX.md).
"""

from __future__ import annotations

DEVICES = ("cuda", "npu")
# The batch's meta_info key (so the TensorDicts' non-tensor key) that asks the engine for shared-prefix passes.
FLAG = "shared_prefix"
# The attention implementations that take the packs' 4-D mask, and the form each takes it in (eager adds it to the
# scores; torch's SDPA takes a bool mask). FlashAttention takes none.
MASK_KIND = {"eager": "additive", "sdpa": "bool"}
