"""Shared-prefix actor passes: each group's prompt computed once in the actor's log-prob and update passes.

Switch: verl's own key `actor_rollout_ref.actor.use_prefix_grouper` (on in the CPU backend). `packing.py` is the pure
layout and the log-prob gather; `engine.py` is verl's FSDP engine with the two overridden seams; `register()` puts
that engine in verl's engine registry for every device (docs/SHARED_PREFIX.md).
"""

from __future__ import annotations

DEVICES = ("cuda", "npu")
# The batch's meta_info key (so the TensorDicts' non-tensor key) that asks the engine for shared-prefix passes.
FLAG = "shared_prefix"
# The attention implementations that take the packs' 4-D mask, and the form each takes it in (eager adds it to the
# scores; torch's SDPA takes a bool mask). FlashAttention takes none.
MASK_KIND = {"eager": "additive", "sdpa": "bool"}


def register() -> None:
    """Swap verl's FSDP language-model engines for cuda and npu for their shared-prefix subclasses (idempotent).

    A shim on verl 0.9.1's `EngineRegistry._engines` (verl/workers/engine/base.py): `EngineRegistry.register` asserts
    that a (device, vendor) key is new, so there is no public way to replace an engine. The subclass behaves as
    verl's class unless a batch asks for shared prefixes. The CPU backend registers its own (`cpu/shims.py`).
    tests/shared_prefix/test_registration.py fails when the registry's layout or its refusal changes.
    """
    from verl.workers.engine.base import EngineRegistry
    from verl.workers.engine.fsdp import transformer_impl  # noqa: F401  (registers verl's engines)

    from verl_ext.shared_prefix.engine import engine_class

    for backend, by_device in EngineRegistry._engines.get("language_model", {}).items():
        if backend not in ("fsdp", "fsdp2"):
            continue
        for key, cls in list(by_device.items()):
            device = key[0] if isinstance(key, tuple) else key
            if device in DEVICES:
                by_device[key] = engine_class(cls)
