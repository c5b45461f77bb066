"""Run a verl TaskRunner from a driver process and leave the machine clean afterwards (Ray down, leaked vLLM
shared-memory segments unlinked). Used by the recipes' `main.py` entry points."""

from __future__ import annotations

from omegaconf import DictConfig


def run(config: DictConfig, task_runner_class=None) -> None:
    import ray
    from verl.trainer.main_ppo import run_ppo

    from verl_ext.cpu.cleanup import shm_segments, unlink_orphaned_shm
    from verl_ext.trainer.task_runner import ExtTaskRunner

    before = shm_segments()
    try:
        run_ppo(config, task_runner_class=task_runner_class or ExtTaskRunner)
    finally:
        if ray.is_initialized():
            ray.shutdown()
        unlink_orphaned_shm(before)
