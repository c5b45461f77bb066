"""Fast DAPO on a real pretrained model, end to end on the test backend: SmolLM2-135M-Instruct as released (its real
tokenizer, chat template and Llama weights) on the generated math task, one training step (screening, continuation
and update in fused generation calls) through vLLM and FSDP2, the model's own answers scored by math_verify."""

from __future__ import annotations

import json
import math

import pytest

from tests.conftest import e2e_config, run_task_runner
from verl_ext.metrics_log import read_jsonl

pytestmark = pytest.mark.e2e

TRAIN_BATCH, N_SCREEN, N_CONTINUE = 2, 4, 2


def _config(out):
    from recipe.fast_dapo.config_check import prepare_config
    from verl_ext.trainer.launch import register_lazy_resolvers

    register_lazy_resolvers()
    overrides = [
        "+preset=real",
        f"data.train_batch_size={TRAIN_BATCH}",
        "data.gen_batch_size=6",
        "data.max_response_length=48",
        "data.val_max_samples=8",  # a fixed subset (data.seed) of the preset's four arithmetic modules
        "data.seed=0",
        f"actor_rollout_ref.rollout.n={N_SCREEN}",
        f"actor_rollout_ref.rollout.n_continue={N_CONTINUE}",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={TRAIN_BATCH}",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=12",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=12",
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=12",
        "trainer.total_training_steps=1",
        "trainer.test_freq=1",
        "trainer.save_freq=-1",
        "trainer.val_before_train=false",
        "trainer.logger=[console]",
        "trainer.plot_keys=[]",
        f"trainer.default_local_dir={out}",
        f"trainer.rollout_data_dir={out / 'rollouts'}",
        f"trainer.validation_data_dir={out / 'validation'}",
    ]
    cfg = e2e_config("fast_dapo", overrides, config_module="recipe.fast_dapo.config")
    prepare_config(cfg)
    return cfg


def test_fast_dapo_step_on_smollm2(ray_cpu, tmp_path):
    from transformers import AutoTokenizer

    from verl_ext.reward.math_reward import compute_score
    from verl_ext.trainer.task_runner import ExtTaskRunner

    cfg = _config(tmp_path)
    run_task_runner(ExtTaskRunner, cfg)

    (row,) = read_jsonl(tmp_path / "metrics.jsonl")
    N = N_SCREEN + N_CONTINUE
    assert row["step"] == 1
    assert row["curriculum/train_batch_responses"] == TRAIN_BATCH * N
    assert row["curriculum/train_groups_mixed_frac"] == 1.0, "the real model's own mixed prompts, nothing hand-set"
    assert row["rollout/generate_calls"] == row["curriculum/generation_calls"] >= 2, "screen, then continue"
    for key in ("critic/score/mean", "actor/pg_loss", "actor/grad_norm", "val-core/all/acc/mean@1"):
        assert math.isfinite(row[key]), key
    # fp32 end to end on the CPU backend: vLLM's sampling log-probs and the FSDP actor's agree closely (a bf16
    # actor differs by ~1e-2 in probability on this model)
    assert row["training/rollout_probs_diff_max"] < 1e-3, row["training/rollout_probs_diff_max"]  # measured 1.6e-5
    # validation reports every module and their pooled accuracy
    modules = [k for k in row if k.startswith("val-core/mathgen/") and k.endswith("/acc/mean@1")]
    assert len(modules) >= 2

    tok = AutoTokenizer.from_pretrained(cfg.actor_rollout_ref.model.path)
    dumped = [json.loads(line) for p in sorted((tmp_path / "rollouts").glob("*.jsonl")) for line in open(p)]
    assert len(dumped) == TRAIN_BATCH * N
    boxed = 0
    for d in dumped:
        # the chat template as the model was released (verl's dump drops the special tokens): its default system
        # line, the worked example, the question, the assistant's turn
        assert d["input"].startswith("system\nYou are a helpful AI assistant named SmolLM")
        assert d["input"].endswith("\nassistant\n") and "\\boxed{4}" in d["input"]
        ids = tok(d["output"], add_special_tokens=False)["input_ids"]
        assert tok.decode(ids) == d["output"], "the real tokenizer round-trips the model's text"
        # the trainer's score is math_verify's on the model's own answer
        assert compute_score("mathgen", d["output"], d["gts"])["score"] == d["score"]
        boxed += "\\boxed{" in d["output"]
    assert boxed > 0 and 0 < sum(d["score"] for d in dumped) < len(dumped)
    val = [json.loads(line) for p in (tmp_path / "validation").glob("*.jsonl") for line in open(p)]
    assert len(val) == 8 and {d["score"] for d in val} <= {0.0, 1.0}
