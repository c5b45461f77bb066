"""One Ray session on this machine, set up for the CPU backend, for in-process runs (tests, benchmarks).

`with cpu_session(tmp_dir) as s:` sets the environment the `backend=cpu` config group sets through Hydra, activates
the CPU backend in this process, starts Ray once with a pretend GPU slot and a private temp dir, and on exit shuts
Ray down and unlinks the shared-memory segments the run's vLLM servers leaked (see cleanup.py).
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from omegaconf import OmegaConf

BACKEND_YAML = Path(__file__).parents[1] / "config" / "backend" / "cpu.yaml"


def backend_env() -> dict[str, str]:
    """The environment variables of the backend=cpu config group (kept in one place: the YAML)."""
    cfg = OmegaConf.load(BACKEND_YAML)
    return {k: str(v) for k, v in cfg.hydra.job.env_set.items()}


@contextlib.contextmanager
def cpu_session(tmp_dir: str | os.PathLike, num_cpus: int = 8):
    import ray

    from verl_ext import cpu
    from verl_ext.cpu.cleanup import shm_segments, unlink_orphaned_shm

    os.environ.update(backend_env())
    cpu.activate()
    before = shm_segments()
    tmp = Path(tmp_dir)
    tmp.mkdir(parents=True, exist_ok=True)
    from verl.trainer.constants_ppo import get_ppo_ray_runtime_env

    runtime_env = get_ppo_ray_runtime_env()
    runtime_env["env_vars"].update(backend_env())
    ray.init(
        num_cpus=num_cpus,
        num_gpus=1,
        include_dashboard=False,
        _temp_dir=str(tmp / "ray"),
        runtime_env=runtime_env,
    )
    try:
        yield
    finally:
        ray.shutdown()
        unlink_orphaned_shm(before)
