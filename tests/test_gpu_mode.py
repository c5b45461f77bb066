"""What `make test-gpu` (VERL_EXT_TEST_BACKEND=gpu) would run, checked here on CPU: the end-to-end tests' configs
composed for one GPU carry no CPU-backend setting and pass the config checks that run before Ray starts; without
CUDA the GPU mode skips those tests and says why; the CPU mode composes exactly what `+backend=cpu` composes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from tests.conftest import GPU_TEST_OVERRIDES, e2e_config, tiny_run_overrides
from verl_ext.config.compose import compose_config

ROOT = Path(__file__).resolve().parents[1]
CPU_YAML = ROOT / "verl_ext" / "config" / "backend" / "cpu.yaml"


def _leaves(node, prefix=""):
    for k, v in node.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            yield from _leaves(v, key + ".")
        else:
            yield key, v


def cpu_backend_settings(cfg, stock) -> list[str]:
    """Every setting of backend/cpu.yaml that `cfg` carries with the CPU value where verl's stock config (`stock`)
    differs. Keys the GPU mode sets on purpose (one GPU, fp32) are left out: their values are its own."""
    own = {o.lstrip("+").split("=", 1)[0] for o in GPU_TEST_OVERRIDES}
    plain = OmegaConf.to_container(OmegaConf.load(CPU_YAML))
    plain.pop("hydra")
    found = []
    for key, cpu_value in _leaves(plain):
        if key in own or OmegaConf.select(stock, key, default=None) == cpu_value:
            continue
        if OmegaConf.select(cfg, key, default=None) == cpu_value:
            found.append(f"{key}={cpu_value}")
    return found


def _verl_check(cfg):
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    validate_config(cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))


@pytest.fixture(scope="module")
def gpu_configs(tiny_assets, tmp_path_factory):
    """One config per family the end-to-end tests compose: verl's ppo_trainer (stock and project trainers, raw
    prompts), fast DAPO on the tiny preset (the crash/resume test's own overrides), the Composer (SDPO)."""
    from tests.recipe.fast_dapo.test_e2e_fast_dapo import _overrides as fast_overrides
    from verl_ext.toy.resolvers import register_resolvers

    register_resolvers()
    out = tmp_path_factory.mktemp("gpu_mode")
    tiny = tiny_run_overrides(tiny_assets, out, 2)
    return {
        "ppo_trainer": e2e_config(
            "ppo_trainer",
            [*tiny, "algorithm.adv_estimator=grpo", "actor_rollout_ref.actor.use_kl_loss=true"],
            backend="gpu",
        ),
        "fast_dapo": e2e_config(
            "fast_dapo", fast_overrides(out, 4, 2), config_module="recipe.fast_dapo.config", backend="gpu"
        ),
        "composer": e2e_config("composer", [*tiny, "+arm=sdpo"], config_module="recipe.composer.config", backend="gpu"),
    }


def test_the_detector_finds_the_cpu_backend():
    stock = compose_config("ppo_trainer", [])
    found = cpu_backend_settings(compose_config("ppo_trainer", [], backend="cpu"), stock)
    assert "trainer.device=cpu" in found
    assert "ray_kwargs.ray_init.num_gpus=1" in found  # the pretend GPU slot
    assert any(
        f.startswith("actor_rollout_ref.rollout.engine_kwargs.vllm.worker_extension_cls=verl_ext.cpu") for f in found
    )
    assert cpu_backend_settings(stock, stock) == []


@pytest.mark.parametrize("family", ["ppo_trainer", "fast_dapo", "composer"])
def test_gpu_mode_configs_carry_no_cpu_backend_setting(gpu_configs, family):
    module = {"fast_dapo": "recipe.fast_dapo.config", "composer": "recipe.composer.config"}.get(family)
    stock = compose_config(family, [], **({"config_module": module} if module else {}))
    cfg = gpu_configs[family]
    assert cpu_backend_settings(cfg, stock) == []
    assert cfg.trainer.device == "cuda"
    assert (cfg.trainer.nnodes, cfg.trainer.n_gpus_per_node) == (1, 1)
    assert cfg.actor_rollout_ref.model.override_config.attn_implementation == "sdpa"


def test_gpu_mode_configs_pass_the_checks_for_one_gpu(gpu_configs):
    from recipe.composer.config_check import composer_settings
    from recipe.fast_dapo.config_check import prepare_config

    _verl_check(gpu_configs["ppo_trainer"])
    settings = prepare_config(gpu_configs["fast_dapo"])  # runs verl's batch checks with N responses per prompt
    assert settings.N == 5 and gpu_configs["fast_dapo"].trainer.n_gpus_per_node == 1
    cfg = gpu_configs["composer"]
    OmegaConf.resolve(cfg)
    assert composer_settings(cfg).sdpo_on
    _verl_check(cfg)


def test_cpu_mode_composes_what_the_cpu_backend_composed(tiny_assets, tmp_path):
    """The fast DAPO tests moved from `+preset=cpu_demo` to `tiny` on the test backend: same config here."""
    from tests.recipe.fast_dapo.test_e2e_fast_dapo import _overrides as fast_overrides
    from verl_ext.toy.resolvers import register_resolvers

    register_resolvers()
    overrides = fast_overrides(tmp_path, 4, 2)
    old = [("+preset=cpu_demo" if o == "+preset=tiny" else o) for o in overrides]
    module = "recipe.fast_dapo.config"
    assert e2e_config("fast_dapo", overrides, config_module=module, backend="cpu") == compose_config(
        "fast_dapo", old, config_module=module
    )
    tiny = tiny_run_overrides(tiny_assets, tmp_path, 1)
    assert e2e_config("ppo_trainer", tiny, backend="cpu") == compose_config("ppo_trainer", tiny, backend="cpu")


def test_gpu_mode_without_cuda_skips_the_e2e_tests_with_the_reason():
    env = {k: v for k, v in os.environ.items() if k != "VERL_PLATFORM"}
    env["VERL_EXT_TEST_BACKEND"] = "gpu"
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "tests/trainer/test_e2e_bypass.py"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "1 skipped" in out.stdout
    assert "VERL_EXT_TEST_BACKEND=gpu runs the end-to-end tests on a CUDA GPU; this machine has none" in out.stdout
