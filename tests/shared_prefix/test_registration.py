"""Shared-prefix engines in verl's engine registry: the CPU backend's, and the swap for cuda/npu (a shim on verl
0.9.1's registry layout, verl_ext/shared_prefix/registration.py), which must still be needed and still apply."""

from __future__ import annotations

import pytest

from verl_ext import cpu, shared_prefix
from verl_ext.shared_prefix.engine import SharedPrefixLMHead
from verl_ext.shared_prefix.registration import register


def _registry():
    from verl.workers.engine.base import EngineRegistry
    from verl.workers.engine.fsdp import transformer_impl

    return EngineRegistry, transformer_impl


def test_the_cpu_backend_registers_the_shared_prefix_engine():
    cpu.activate()
    registry, impl = _registry()
    for backend in ("fsdp", "fsdp2"):
        cls = registry._engines["language_model"][backend]["cpu"]
        assert issubclass(cls, SharedPrefixLMHead) and issubclass(cls, impl.FSDPEngineWithLMHead)
        # the critic's engine is verl's own
        assert not issubclass(registry._engines["value_model"][backend]["cpu"], SharedPrefixLMHead)


def test_gpu_engines_are_swapped_for_their_shared_prefix_subclasses():
    registry, impl = _registry()
    register()
    register()  # idempotent
    for backend in ("fsdp", "fsdp2"):
        for device in shared_prefix.DEVICES:
            cls = registry._engines["language_model"][backend][device]
            assert issubclass(cls, SharedPrefixLMHead) and issubclass(cls, impl.FSDPEngineWithLMHead)
            assert cls.__mro__.count(SharedPrefixLMHead) == 1


def test_upstream_still_refuses_to_replace_an_engine():
    """The probe: the day verl lets `register` replace an entry, the swap should use it instead."""
    registry, impl = _registry()
    with pytest.raises(AssertionError, match="already registed"):
        registry.register(model_type="language_model", backend="fsdp2", device="cuda")(impl.FSDPEngineWithLMHead)
