"""The SPEED-RL presets start: every condition of both campaign specs and each arm script composes and passes the
driver's config check and verl's batch-size checks (with N responses per prompt) on the cluster size its preset
names, and its batches split evenly over those GPUs; with the paper's settings. No Ray, no model load."""

from __future__ import annotations

import copy
import os
import subprocess
from pathlib import Path

import pytest
from omegaconf import open_dict

from recipe.fast_dapo.config_check import ConfigError, prepare_config
from verl_ext.campaign.spec import CampaignSpec
from verl_ext.config.compose import compose_config

ROOT = Path(__file__).resolve().parents[3]
MODULE = "recipe.fast_dapo.config"
SPECS = sorted((ROOT / "configs" / "campaign").glob("speedrl_*.yaml"))
CLUSTER = {"speedrl_qwen_math_1p5b": (1, 4), "speedrl_qwen_math_7b": (1, 8)}  # (nodes, GPUs per node)
MODELS = {"speedrl_qwen_math_1p5b": "Qwen/Qwen2.5-Math-1.5B", "speedrl_qwen_math_7b": "Qwen/Qwen2.5-Math-7B"}
DATA_FILES = ["dapo17k_train", "dapo17k_test", "math500", "amc2023", "aime2024", "aime2025"]


def _compose(overrides):
    return compose_config("fast_dapo", overrides, config_module=MODULE)


def _campaign_runs():
    """One run per condition (the seeds differ only in data.seed and the data loader's seed)."""
    for path in SPECS:
        spec = CampaignSpec.from_yaml(path)
        for run in spec.runs("/shared/campaigns"):
            if run.seed == spec.seeds[0]:
                yield pytest.param(spec.name, run.condition, run.overrides, id=f"{spec.name}-{run.condition}")


def driver_checks(cfg):
    """What the driver checks before Ray starts: the recipe's settings, then verl's batch-size validation on a copy
    whose rollout.n is N (a training batch holds N responses per prompt)."""
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    s = prepare_config(cfg)
    probe = copy.deepcopy(cfg)
    with open_dict(probe):
        probe.actor_rollout_ref.rollout.n = s.N
    validate_config(probe, use_reference_policy=need_reference_policy(probe), use_critic=need_critic(probe))
    return s


def layout_problems(cfg, s) -> list[str]:
    """With dynamic micro-batches verl skips its divisibility check, but its workers still split each batch evenly
    over the data-parallel ranks and place each vLLM replica on tensor_model_parallel_size GPUs."""
    gpus = cfg.trainer.nnodes * cfg.trainer.n_gpus_per_node
    rows, mini = s.train_batch_size * s.N, cfg.actor_rollout_ref.actor.ppo_mini_batch_size * s.N
    tp = cfg.actor_rollout_ref.rollout.tensor_model_parallel_size
    return [
        msg
        for bad, msg in (
            (rows % gpus, f"{rows} rows per step over {gpus} GPUs"),
            (mini % gpus, f"a mini-batch of {mini} rows over {gpus} GPUs"),
            (gpus % tp, f"{gpus} GPUs in vLLM replicas of {tp}"),
        )
        if bad
    ]


def test_both_model_sizes_have_a_campaign():
    assert {CampaignSpec.from_yaml(p).name for p in SPECS} == set(CLUSTER)


@pytest.mark.parametrize(("preset", "arm", "overrides"), list(_campaign_runs()))
def test_every_campaign_run_passes_the_check_on_its_cluster(preset, arm, overrides):
    cfg = _compose(overrides)
    s = driver_checks(cfg)  # raises on a bad key or batch size, as the driver would before Ray starts
    assert layout_problems(cfg, s) == []
    assert (cfg.trainer.nnodes, cfg.trainer.n_gpus_per_node) == CLUSTER[preset]
    assert cfg.trainer.device == "cuda" and "backend" not in " ".join(overrides)
    assert cfg.actor_rollout_ref.model.path == MODELS[preset]
    # SPEED-RL's settings: N = 24 = 4 + 20, 16 training prompts, lr 1e-6, T = 1.0, 3072 response tokens
    assert (s.n, s.N, s.train_batch_size) == (4, 24, 16)
    assert cfg.actor_rollout_ref.actor.optim.lr == 1e-6
    assert cfg.actor_rollout_ref.rollout.temperature == 1.0
    assert cfg.data.max_response_length == 3072
    assert s.mode == {"fast": "fast", "rloo": "plain", "dapo": "dapo"}[arm]
    assert s.gen_batch_size == (16 if arm == "rloo" else 64)  # 64 screened per call; plain: one call per step
    assert cfg.algorithm.adv_estimator == ("grpo" if arm == "dapo" else "rloo")
    # validation every 25 steps, mean@k with sampling on DAPO-1k, MATH-500, AMC 2023, AIME 2024 and 2025
    assert cfg.trainer.test_freq == 25
    val = cfg.actor_rollout_ref.rollout.val_kwargs
    assert val.n > 1 and val.do_sample
    assert [Path(f).stem for f in cfg.data.val_files] == DATA_FILES[1:]
    assert Path(cfg.data.train_files).stem == "dapo17k_train"


def test_a_cluster_the_batch_does_not_divide_is_rejected():
    """The checks are real: 16 x 24 = 384 rows per step cannot be split over 7 GPUs."""
    cfg = _compose(["+preset=speedrl_qwen_math_7b", "+arm=fast", "trainer.n_gpus_per_node=7"])
    assert layout_problems(cfg, prepare_config(cfg)) == [
        "384 rows per step over 7 GPUs",
        "a mini-batch of 384 rows over 7 GPUs",
        "7 GPUs in vLLM replicas of 2",
    ]
    cfg = _compose(["+preset=speedrl_qwen_math_7b", "+arm=fast", "trainer.n_gpus_per_node=7"])
    with open_dict(cfg):
        cfg.actor_rollout_ref.actor.use_dynamic_bsz = False
        cfg.actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu = 4
    # verl's own check, raised by the driver's check (as a ConfigError) or by verl's validate_config
    with pytest.raises((AssertionError, ConfigError), match="must be divisible by minimal possible batch size"):
        driver_checks(cfg)


@pytest.fixture()
def data_dir(tmp_path):
    for name in DATA_FILES:
        (tmp_path / f"{name}.parquet").write_bytes(b"PAR1")
    return tmp_path


def _script(name, *args, data):
    env = {**os.environ, "VERL_EXT_DATA_DIR": str(data), "SPEEDRL_DRY_RUN": "1", "PYTHON": "python"}
    return subprocess.run(
        ["bash", str(ROOT / "scripts" / "speedrl" / name), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize(("arm", "model"), [("fast", "1p5b"), ("rloo", "7b"), ("dapo", "7b")])
def test_each_arm_script_runs_a_command_that_passes_the_check(arm, model, data_dir):
    out = _script(f"{arm}.sh", model, "trainer.total_training_steps=3", data=data_dir)
    assert out.returncode == 0, out.stderr
    argv = out.stdout.split("\n")[:-1]
    assert argv[:3] == ["python", "-m", "recipe.fast_dapo.main"]
    assert f"+arm={arm}" in argv and f"+preset=speedrl_qwen_math_{model}" in argv
    cfg = _compose(argv[3:])
    driver_checks(cfg)
    assert cfg.trainer.total_training_steps == 3 and cfg.trainer.experiment_name == f"qwen2.5-math-{model}-{arm}"


def test_the_run_script_names_a_missing_data_file_and_a_bad_arm(data_dir):
    (data_dir / "aime2025.parquet").unlink()
    out = _script("fast.sh", "7b", data=data_dir)
    assert out.returncode == 1 and "aime2025.parquet" in out.stderr and "prepare_data.sh" in out.stderr
    out = _script("run.sh", "grpo", "7b", data=data_dir)
    assert out.returncode == 2 and "unknown arm 'grpo'" in out.stderr
