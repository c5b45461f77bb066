"""Shared set-up: one copy of the tiny assets and one Ray session (CPU backend) for the whole test run."""

from __future__ import annotations

import os

# This suite runs on CPU machines: select the CPU backend before anything imports verl (the platform is resolved
# once per process). Tests that need a GPU are marked `gpu` and skipped here.
os.environ.setdefault("VERL_PLATFORM", "cpu")

import json
from pathlib import Path

import pytest


def pytest_collection_modifyitems(config, items):
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(
        reason="needs a CUDA GPU; this machine has none (a CPU test of the same logic sits beside it)"
    )
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
    """One Ray session for every end-to-end test (Ray start-up is paid once)."""
    import shutil
    import tempfile

    from verl_ext.cpu.session import cpu_session

    # Ray's socket paths must stay under 107 bytes: a short private dir, not pytest's deep tmp_path.
    tmp = tempfile.mkdtemp(prefix="vxray-", dir="/tmp")
    try:
        with cpu_session(tmp):
            yield
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


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


def read_file_logger(path: Path) -> list[dict]:
    """verl's FileLogger lines: {"step": s, "data": {...}}."""
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


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
