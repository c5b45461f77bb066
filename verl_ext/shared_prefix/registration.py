"""Shim for verl 0.9.1: verl's FSDP language-model engines for cuda and npu swapped for their shared-prefix subclasses.

Why: `EngineRegistry.register` (verl/workers/engine/base.py) asserts that a (device, vendor) key is new, so there is
no public way to replace an engine; `register()` writes the subclass into `EngineRegistry._engines` (idempotent).
The subclass behaves as verl's class unless a batch asks for shared prefixes. The CPU backend registers its own
(`cpu/shims.py`).

Upstream: verl 0.9.1 `EngineRegistry._engines` and `EngineRegistry.register`. tests/shared_prefix/
test_registration.py fails when the registry's layout or its refusal changes.
"""

from __future__ import annotations

from verl_ext.shared_prefix import DEVICES


def register() -> None:
    """Swap verl's FSDP language-model engines for cuda and npu for their shared-prefix subclasses (idempotent)."""
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
