"""Base-model prompts (plain strings, no chat template) train end to end through verl's rollout on CPU."""

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


def test_string_prompts_are_encoded_raw_end_to_end(ray_cpu, tiny_assets, tiny_tokenizer, tmp_path):
    from verl.trainer.main_ppo_v0 import TaskRunner

    train, val = tmp_path / "train.parquet", tmp_path / "val.parquet"
    _raw_copy(tiny_assets.train_file, train)
    _raw_copy(tiny_assets.val_file, val)
    cfg = e2e_config(
        "ppo_trainer",
        tiny_run_overrides(tiny_assets, tmp_path, steps=1)
        + [
            f"data.train_files={train}",
            f"data.val_files={val}",
            "data.filter_overlong_prompts=true",  # verl's own filter would drop every string prompt
            "data.custom_cls.path=pkg://verl_ext.dataset.raw_prompt",
            "data.custom_cls.name=RawPromptRLHFDataset",
            "actor_rollout_ref.rollout.agent.default_agent_loop=raw_prompt_single_turn",
            "algorithm.adv_estimator=grpo",
            "actor_rollout_ref.actor.use_kl_loss=false",
            "trainer.save_freq=-1",
            "trainer.logger=[console,file]",
        ],
    )
    log = tmp_path / "metrics.jsonl"
    run_task_runner(TaskRunner, cfg, env={"VERL_FILE_LOGGER_PATH": str(log)})
    (row,) = read_file_logger(log)
    m = row["data"]
    assert math.isfinite(float(m["actor/grad_norm"]))
    # The rollout saw each prompt's raw tokens: every templated prompt is longer than the longest raw one.
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
