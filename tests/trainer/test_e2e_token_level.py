"""The project's trainer base feeds token-level estimators end to end on CPU: gtpo_sepa with true Shannon entropy."""

from __future__ import annotations

import math

import pytest
import torch

from tests.conftest import e2e_config, run_task_runner, tiny_run_overrides
from verl_ext.metrics_log import read_jsonl

pytestmark = pytest.mark.e2e


def test_gtpo_sepa_with_shannon_entropy_trains_and_checkpoints_sepa_state(ray_cpu, tiny_assets, tmp_path):
    from verl_ext.advantage import validate_algorithm_config
    from verl_ext.trainer.task_runner import ExtTaskRunner

    steps = 2
    cfg = e2e_config(
        "ppo_trainer",
        tiny_run_overrides(tiny_assets, tmp_path, steps)
        + [
            "algorithm.adv_estimator=gtpo_sepa",
            "+algorithm.uncertainty_kind=shannon_entropy",
            "+algorithm.sepa.schedule=auto",
            "+algorithm.sepa.delay_steps=0",
            "+algorithm.sepa.steps=2",
            "+algorithm.sepa.correct_rate_gate=0",
            "actor_rollout_ref.actor.use_kl_loss=false",
            f"trainer.save_freq={steps}",
            "trainer.logger=[console]",
            f"+trainer.jsonl_metrics_path={tmp_path / 'metrics.jsonl'}",
            "+trainer.plot_keys=[critic/score/mean,adv/exec_u_var_after]",
        ],
    )
    assert validate_algorithm_config(cfg.algorithm).needs_entropys
    run_task_runner(ExtTaskRunner, cfg)

    rows = read_jsonl(tmp_path / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2]
    png = tmp_path / "metrics.png"  # trainer.plot_keys: the curves are drawn when the run ends
    assert png.read_bytes()[:4] == b"\x89PNG" and png.stat().st_size > 5000
    lambdas = [r["adv/sepa_lambda"] for r in rows]
    assert lambdas == [0.5, 1.0]  # linear part of the schedule: (step - 0) / 2; auto is 0 before 50 observations
    for r in rows:
        for key in (
            "adv/exec_u_mean_before",
            "adv/exec_u_var_before",
            "adv/exec_u_mean_after",
            "adv/exec_u_var_after",
            "adv/planning_token_frac",
            "adv/skipped_all_correct",
            "adv/skipped_all_wrong",
            "actor/pg_loss",
            "actor/grad_norm",
            "critic/advantages/mean",
        ):
            assert key in r and r[key] is not None and math.isfinite(r[key]), (r["step"], key, r.get(key))
        # SEPA pooled the Shannon entropies of execution tokens towards each response's mean: their variance over
        # the batch shrinks (within-response variance scales by (1 - lambda)^2; the between-response part stays).
        assert r["adv/exec_u_var_after"] <= r["adv/exec_u_var_before"] + 1e-9
    # lambda 1: no within-response variance left, only the small spread of per-response means.
    assert rows[1]["adv/exec_u_var_after"] < 0.1 * rows[1]["adv/exec_u_var_before"]

    state = torch.load(tmp_path / "ckpt" / f"global_step_{steps}" / "verl_ext_state.pt", weights_only=False)
    assert state["sepa"]["n_observed"] == steps and state["sepa"]["var_ema"] > 0
