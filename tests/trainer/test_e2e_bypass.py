"""Two features in one verl start-up (a tiny run is ~65 s of start-up and ~2 s a step on the 2-core CI machine, so
the two features share it):

1. Rollout-correction bypass mode through the project's trainer base: the actor workers train with verl's bypass
   loss (old log-probs = the rollout's, no old-log-prob pass) and its rejection sampling. verl 0.9.1's own fit would
   leave its workers on the vanilla loss (it sets the bypass loss on the driver only), so the loss-side
   `rollout_corr/*` metrics below are what shows the setting reached the workers.
2. Base-model prompts (plain strings, no chat template: `verl_ext.dataset.raw_prompt` and its agent loop) are
   encoded raw through verl's rollout: the prompt lengths the run logs are the raw prompts' token counts, shorter
   than any templated prompt. The dataset class is verl's `data.custom_cls` hook and the agent loop verl's registry,
   so any verl task runner takes them; their unit tests are tests/dataset/test_raw_prompt.py.
"""

from __future__ import annotations

import math

import pandas as pd
import pytest

from tests.conftest import e2e_config, read_file_logger, run_task_runner, tiny_run_overrides

pytestmark = pytest.mark.e2e


def _raw_copy(src, dst):
    df = pd.read_parquet(src)
    df["prompt"] = [msgs[0]["content"] for msgs in df["prompt"]]  # what --use-chat-template off writes
    df.to_parquet(dst)


def test_bypass_mode_trains_with_verls_bypass_loss(ray_cpu, tiny_assets, tiny_tokenizer, tmp_path):
    from verl_ext.trainer.task_runner import ExtTaskRunner

    train, val = tmp_path / "train.parquet", tmp_path / "val.parquet"
    _raw_copy(tiny_assets.train_file, train)
    _raw_copy(tiny_assets.val_file, val)
    log = tmp_path / "metrics.jsonl"
    cfg = e2e_config(
        "ppo_trainer",
        tiny_run_overrides(tiny_assets, tmp_path, 1)
        + [
            f"data.train_files={train}",
            f"data.val_files={val}",
            "data.filter_overlong_prompts=true",  # verl's own filter would drop every string prompt
            "data.custom_cls.path=pkg://verl_ext.dataset.raw_prompt",
            "data.custom_cls.name=RawPromptRLHFDataset",
            "actor_rollout_ref.rollout.agent.default_agent_loop=raw_prompt_single_turn",
            "algorithm.adv_estimator=grpo",
            "actor_rollout_ref.actor.use_kl_loss=false",
            "actor_rollout_ref.rollout.calculate_log_probs=true",
            "algorithm.rollout_correction.bypass_mode=true",
            "algorithm.rollout_correction.rollout_is=token",
            "algorithm.rollout_correction.rollout_rs=token_k1",
            "algorithm.rollout_correction.rollout_rs_threshold=2.0",
            "trainer.save_freq=-1",
            "trainer.logger=[console,file]",
        ],
    )
    run_task_runner(ExtTaskRunner, cfg, env={"VERL_FILE_LOGGER_PATH": str(log)})

    (row,) = read_file_logger(log)
    m = row["data"]
    # 1) bypass mode
    loss_side = {k: v for k, v in m.items() if k.startswith("actor/") and "rollout_rs_token_k1" in k}
    assert loss_side, sorted(k for k in m if "rollout" in k)  # computed inside the workers' bypass loss
    assert not any(k.startswith("rollout_corr/") for k in m)  # nothing corrected in the driver
    assert math.isfinite(m["actor/pg_loss"]) and math.isfinite(m["actor/grad_norm"])

    # 2) raw prompts: the rollout saw each prompt's raw tokens; every templated prompt is longer than the longest raw
    texts = pd.read_parquet(train)["prompt"].tolist()

    def n_tokens(text):
        return len(tiny_tokenizer(text, add_special_tokens=False)["input_ids"])

    raw = [n_tokens(t) for t in texts]
    templated = [
        n_tokens(
            tiny_tokenizer.apply_chat_template(
                [{"role": "user", "content": t}], add_generation_prompt=True, tokenize=False
            )
        )
        for t in texts
    ]
    assert max(raw) < min(templated)
    assert min(raw) <= float(m["prompt_length/min"]) <= float(m["prompt_length/max"]) <= max(raw)
