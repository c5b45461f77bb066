"""The reward inside verl's own machinery: custom-function loading, the naive reward manager (which calls it from
an executor thread), extra-info arrays in DataProto, and validation metrics (maj@N over ``pred``)."""

import asyncio

import numpy as np
import torch
from omegaconf import OmegaConf
from tensordict import TensorDict
from verl import DataProto

RESPONSES = [
    ("Thus $\\boxed{\\dfrac{1}{2}}$.", "\\frac{1}{2}"),
    ("So the answer is \\boxed{0.5}", "\\frac{1}{2}"),
    ("I think \\boxed{3}", "\\frac{1}{2}"),
    ("no idea", "\\frac{1}{2}"),
    ("\\boxed{9^{9^{9^{9}}}}", "7"),
    ("\\boxed{7}", "7"),
]


def _config(**reward_kwargs):
    return OmegaConf.create(
        {
            "reward": {
                "custom_reward_function": {
                    "path": "pkg://verl_ext.reward.math_reward",
                    "name": "compute_score",
                    "reward_kwargs": reward_kwargs,
                }
            }
        }
    )


def _batch(tokenizer) -> DataProto:
    prompt_len, resp_len = 4, 48
    prompts = torch.full((len(RESPONSES), prompt_len), tokenizer.pad_token_id)
    responses = torch.full((len(RESPONSES), resp_len), tokenizer.pad_token_id)
    mask = torch.zeros((len(RESPONSES), prompt_len + resp_len), dtype=torch.long)
    mask[:, :prompt_len] = 1
    for i, (text, _) in enumerate(RESPONSES):
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        assert len(ids) <= resp_len
        responses[i, : len(ids)] = torch.tensor(ids)
        mask[i, prompt_len : prompt_len + len(ids)] = 1
    return DataProto(
        batch=TensorDict(
            {"prompts": prompts, "responses": responses, "attention_mask": mask}, batch_size=len(RESPONSES)
        ),
        non_tensor_batch={
            "data_source": np.array(["set_a"] * 4 + ["set_b"] * 2, dtype=object),
            "reward_model": np.array([{"ground_truth": gt, "style": "rule"} for _, gt in RESPONSES], dtype=object),
            "extra_info": np.array([{"index": i} for i in range(len(RESPONSES))], dtype=object),
        },
    )


def _run_manager(config, tokenizer, data):
    from verl.experimental.reward_loop.reward_manager.naive import NaiveRewardManager
    from verl.trainer.ppo.reward import get_custom_reward_fn

    async def go():
        manager = NaiveRewardManager(config, tokenizer, get_custom_reward_fn(config))
        return [await manager.run_single(data[i : i + 1]) for i in range(len(data))]

    return asyncio.run(go())


def test_naive_reward_manager_runs_our_reward(tiny_tokenizer):
    data = _batch(tiny_tokenizer)
    outputs = _run_manager(_config(timeout_s=1.5), tiny_tokenizer, data)
    scores = [o["reward_score"] for o in outputs]
    assert scores == [1.0, 1.0, 0.0, 0.0, 0.0, 1.0]
    infos = [o["reward_extra_info"] for o in outputs]
    assert [i["timeout"] for i in infos] == [0.0, 0.0, 0.0, 0.0, 1.0, 0.0]
    assert [i["pred"] for i in infos] == ["\\dfrac{1}{2}", "0.5", "3", "", "9^{9^{9^{9}}}", "7"]

    # What verl's RewardLoopManager.compute_rm_score does with them, then the trainer's concat/union.
    keys = list(infos[0])
    extra = DataProto(
        batch=TensorDict({"rm_scores": torch.tensor(scores)}, batch_size=len(scores)),
        non_tensor_batch={k: np.array([info[k] for info in infos]) for k in keys},
        meta_info={"reward_extra_keys": keys},
    )
    merged = data.union(extra)
    both = DataProto.concat([merged[:3], merged[3:]])
    assert list(both.non_tensor_batch["pred"]) == [i["pred"] for i in infos]
    assert both.non_tensor_batch["acc"].tolist() == scores


def test_validation_metrics_accept_our_keys(tiny_tokenizer):
    from verl.trainer.ppo.metric_utils import process_validation_metrics

    outputs = _run_manager(_config(timeout_s=1.5), tiny_tokenizer, _batch(tiny_tokenizer))
    infos = [o["reward_extra_info"] for o in outputs]
    infos_dict = {k: [info[k] for info in infos] for k in infos[0]}
    data_sources = ["set_a"] * 4 + ["set_b"] * 2
    uids = ["a"] * 4 + ["b"] * 2
    metrics = process_validation_metrics(data_sources, uids, infos_dict)
    assert metrics["set_a"]["acc"]["mean@4"] == 0.5
    assert metrics["set_b"]["acc"]["mean@2"] == 0.5
    assert metrics["set_a"]["no_answer"]["mean@4"] == 0.25
    assert metrics["set_b"]["timeout"]["mean@2"] == 0.5
    assert "pred" not in metrics["set_a"]  # strings are skipped ...
    assert any(name.startswith("maj@") for name in metrics["set_a"]["acc"])  # ... and drive the majority vote


def test_numeric_only_option(tiny_tokenizer):
    outputs = _run_manager(_config(return_pred=False), tiny_tokenizer, _batch(tiny_tokenizer)[:2])
    assert set(outputs[0]["reward_extra_info"]) == {"score", "acc", "no_answer", "timeout"}
