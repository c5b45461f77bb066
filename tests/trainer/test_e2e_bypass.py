"""Rollout-correction bypass mode through the project's trainer base: the actor workers train with verl's bypass
loss (old log-probs = the rollout's, no old-log-prob pass) and its rejection sampling. verl 0.9.1's own fit would
leave its workers on the vanilla loss (it sets the bypass loss on the driver only), so the loss-side
`rollout_corr/*` metrics below are what shows the setting reached the workers."""

from __future__ import annotations

import math

import pytest

from tests.conftest import e2e_config, read_file_logger, run_task_runner, tiny_run_overrides

pytestmark = pytest.mark.e2e


def test_bypass_mode_trains_with_verls_bypass_loss(ray_cpu, tiny_assets, tmp_path):
    from verl_ext.trainer.task_runner import ExtTaskRunner

    log = tmp_path / "metrics.jsonl"
    cfg = e2e_config(
        "ppo_trainer",
        tiny_run_overrides(tiny_assets, tmp_path, 1)
        + [
            "algorithm.adv_estimator=grpo",
            "actor_rollout_ref.actor.use_kl_loss=false",
            "actor_rollout_ref.rollout.calculate_log_probs=true",
            "algorithm.rollout_correction.bypass_mode=true",
            "algorithm.rollout_correction.rollout_is=token",
            "algorithm.rollout_correction.rollout_rs=token_k1",
            "algorithm.rollout_correction.rollout_rs_threshold=2.0",
            "trainer.logger=[console,file]",
        ],
    )
    run_task_runner(ExtTaskRunner, cfg, env={"VERL_FILE_LOGGER_PATH": str(log)})

    (row,) = read_file_logger(log)
    m = row["data"]
    loss_side = {k: v for k, v in m.items() if k.startswith("actor/") and "rollout_rs_token_k1" in k}
    assert loss_side, sorted(k for k in m if "rollout" in k)  # computed inside the workers' bypass loss
    assert not any(k.startswith("rollout_corr/") for k in m)  # nothing corrected in the driver
    assert math.isfinite(m["actor/pg_loss"]) and math.isfinite(m["actor/grad_norm"])
