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


# A run's engine class, end to end across processes as Ray runs them: the TaskRunner's process picks the actor's
# worker class from the run config; a fresh interpreter (a worker: verl, and through it the project's plugin, imported
# from scratch) unpickles that class as Ray does and builds it; the engine class verl's registry then resolves for a
# GPU (VERL_ENGINE_DEVICE=cuda, verl's own override of the detected device) is the one that worker's engines get.
PROCESS = r"""
import json, sys
from ray import cloudpickle

from verl.workers.engine.base import EngineRegistry
from verl.workers.engine.fsdp import transformer_impl


def engines():
    return {b: EngineRegistry.get_engine_cls("language_model", b) for b in ("fsdp", "fsdp2")}


def names(classes):
    return {b: f"{c.__module__}.{c.__qualname__}" for b, c in classes.items()}


from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY

assert "maxrl" in ADV_ESTIMATOR_REGISTRY, "the project's plugin did not load"
verl_own = {b: c is transformer_impl.FSDPEngineWithLMHead for b, c in engines().items()}
step, path = sys.argv[1], sys.argv[2]
if step == "taskrunner":
    from verl_ext.config.compose import compose_config
    from verl_ext.trainer.task_runner import ExtTaskRunner

    cfg = compose_config("ppo_trainer", sys.argv[3:])
    runner = ExtTaskRunner.__ray_actor_class__()
    runner.add_actor_rollout_worker(cfg)
    [(role, remote)] = runner.role_worker_mapping.items()
    worker = remote.__ray_actor_class__
    with open(path, "wb") as f:
        cloudpickle.dump((worker, cfg.actor_rollout_ref, str(role)), f)
    out = {"worker": f"{worker.__module__}.{worker.__qualname__}", "verl_own_engines_here": verl_own}
else:
    with open(path, "rb") as f:
        worker, config, role = cloudpickle.load(f)
    worker(config, role=role)
    after = engines()
    out = {
        "verl_own_engines_before": verl_own,
        "engines_after": names(after),
        "verl_own_engines_after": {b: c is transformer_impl.FSDPEngineWithLMHead for b, c in after.items()},
    }
print("RESULT " + json.dumps(out))
"""


def _process(step: str, path, overrides=(), platform: str | None = None) -> dict:
    import json
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "VERL_PLATFORM"}  # a GPU user's process: no CPU backend
    if platform:
        env["VERL_PLATFORM"] = platform
    env.update(VERL_ENGINE_DEVICE="cuda", WORLD_SIZE="1", RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT="29500")
    proc = subprocess.run(
        [sys.executable, "-c", PROCESS, step, str(path), *overrides], env=env, capture_output=True, text=True
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(lines[-1][len("RESULT ") :])


def test_a_gpu_run_without_the_key_builds_verls_own_engine_in_every_process(tmp_path):
    runner = _process("taskrunner", tmp_path / "worker.pkl")
    assert runner["worker"] == "verl.workers.engine_workers.ActorRolloutRefWorker"
    assert runner["verl_own_engines_here"] == {"fsdp": True, "fsdp2": True}  # the plugin swapped nothing
    worker = _process("worker", tmp_path / "worker.pkl")
    assert worker["verl_own_engines_before"] == {"fsdp": True, "fsdp2": True}
    assert worker["verl_own_engines_after"] == {"fsdp": True, "fsdp2": True}, worker


def test_a_gpu_run_with_the_key_builds_the_shared_prefix_engine_in_its_worker(tmp_path):
    runner = _process("taskrunner", tmp_path / "worker.pkl", ["actor_rollout_ref.actor.use_prefix_grouper=true"])
    assert runner["worker"] == "verl_ext.shared_prefix.worker.SharedPrefixActorRolloutRefWorker"
    assert runner["verl_own_engines_here"] == {"fsdp": True, "fsdp2": True}  # the TaskRunner builds no engine
    worker = _process("worker", tmp_path / "worker.pkl")
    assert worker["verl_own_engines_before"] == {"fsdp": True, "fsdp2": True}  # the plugin alone swaps nothing
    assert worker["engines_after"] == {
        "fsdp": "verl_ext.shared_prefix.engine.SharedPrefixFSDPEngineWithLMHead",
        "fsdp2": "verl_ext.shared_prefix.engine.SharedPrefixFSDPEngineWithLMHead",
    }


def test_the_cpu_backend_keeps_verls_worker_with_the_key(tmp_path):
    """The CPU backend's engine for device cpu is shared-prefix in every process already (cpu/shims.py)."""
    runner = _process(
        "taskrunner", tmp_path / "worker.pkl", ["actor_rollout_ref.actor.use_prefix_grouper=true"], platform="cpu"
    )
    assert runner["worker"] == "verl.workers.engine_workers.ActorRolloutRefWorker"
