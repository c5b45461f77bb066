"""Shim for verl 0.9.1: extra non-tensor flags on the actor update's TensorDict.

Why: verl's `RayPPOTrainer._update_actor` builds the update's TensorDict, sets its flags from verl's own config
(`distillation_use_topk`, `distillation_only`, ...) and calls `actor_rollout_wg.update_actor(td)` in one method, with
no hook between the two. A recipe that needs a flag verl derives from another feature's config (the Composer's
full-logit SDPO needs `distillation_use_topk=True` so that verl's engine calls the installed loss function as a logits
processor) adds it on the way to that call: the worker group binds its remote methods as instance attributes, so
`update_flags` wraps `update_actor` for the length of one update and restores it afterwards.

Upstream: verl 0.9.1 `verl/trainer/ppo/ray_trainer.py` (`RayPPOTrainer._update_actor`). tests/trainer/
test_update_flags.py fails when verl stops setting its flags before it calls `actor_rollout_wg.update_actor`.
"""

from __future__ import annotations

import contextlib

from verl.utils import tensordict_utils as tu


@contextlib.contextmanager
def update_flags(worker_group, flags: dict):
    """Within the block, `worker_group.update_actor(td)` assigns `flags` to `td` first; no flags: untouched."""
    if not flags:
        yield
        return
    original = worker_group.update_actor

    def update_actor(td, *args, **kwargs):
        tu.assign_non_tensor(td, **flags)
        return original(td, *args, **kwargs)

    worker_group.update_actor = update_actor
    try:
        yield
    finally:
        worker_group.update_actor = original
