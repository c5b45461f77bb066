"""k responses per prompt of a data set at the training's sampling settings, counted right or wrong: what the
pass-rate probe (verl_ext/trainer/probe.py) and the held-out pass@k of a run (`trainer.pass_at_k`) measure.

The responses come from verl's rollout exactly as a training step's do (the agent loop's training sampling
parameters: `rollout.temperature`, `top_p`, `top_k`; not `val_kwargs`, which greedy validation uses), scored by
the configured reward. A response is right when the reward's `metric` (`acc`) is > 0, or without that key when its
score is > 0. These calls are not training generation: they do not count in `rollout/generate_calls`.

pass@j per prompt is the unbiased estimate from its c right of k (`verl_ext.curriculum.pass_rates.pass_at`), averaged
over prompts, per data source and, with several, over all of them (`val-pass/<source>/pass@j`, `val-pass/all/...`,
j = 1, 2, 4, ..., k).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from tqdm import tqdm
from verl import DataProto

from verl_ext.curriculum.memory import prompt_keys
from verl_ext.curriculum.pass_rates import pass_at, pass_at_grid
from verl_ext.metrics_log.console import ALL_SOURCES
from verl_ext.trainer.uids import assign_uids

PASS_PREFIX = "val-pass"


@dataclass(frozen=True)
class SampledCounts:
    """Per prompt, in data-set order: right responses of k, row index, memory key (None without the column),
    data source."""

    k: int
    counts: np.ndarray
    index: np.ndarray
    keys: np.ndarray
    sources: np.ndarray


def sample_counts(
    trainer, dataset, k: int, prompts_per_call: int, metric: str, key_column: str | None = None, desc: str = ""
) -> SampledCounts:
    """k responses for every prompt of `dataset` through `trainer`'s rollout (awake, with the weights to measure)."""
    from torch.utils.data import DataLoader
    from verl.utils.dataset.rl_dataset import collate_fn

    if k < 1 or prompts_per_call < 1:
        raise ValueError(f"k and prompts_per_call must be >= 1, got {k}, {prompts_per_call}")
    loader = DataLoader(dataset, batch_size=prompts_per_call, shuffle=False, collate_fn=collate_fn)
    counts, index, keys, sources = [], [], [], []
    for batch_dict in tqdm(loader, desc=desc or f"{k} responses per prompt", unit="call"):
        batch = DataProto.from_single_dict(batch_dict)
        batch.meta_info["temperature"] = trainer.config.actor_rollout_ref.rollout.temperature
        assign_uids(batch)
        nt = batch.non_tensor_batch
        index.extend(_row_index(nt, len(batch), start=len(counts)))
        keys.extend(prompt_keys(nt[key_column]).tolist() if key_column in nt else [None] * len(batch))
        sources.extend(str(x) for x in nt.get("data_source", ["unknown"] * len(batch)))
        gen = trainer._get_gen_batch(batch).repeat(repeat_times=k, interleave=True)
        out = trainer.async_rollout_manager.generate_sequences(gen)
        right = is_right(out, metric).reshape(len(batch), k)
        counts.extend(right.sum(axis=1).astype(int).tolist())
    return SampledCounts(
        k, np.array(counts), np.array(index), np.array(keys, dtype=object), np.array(sources, dtype=object)
    )


def pass_at_k_metrics(sampled: SampledCounts) -> dict[str, float]:
    """`val-pass/<source>/pass@j` for j in 1, 2, 4, ..., k (and over all sources when there are several)."""
    groups = {s: sampled.sources == s for s in sorted(set(sampled.sources.tolist()))}
    if len(groups) > 1:
        groups[ALL_SOURCES] = np.ones(len(sampled.counts), dtype=bool)
    out = {}
    for source, rows in groups.items():
        for j in pass_at_grid(sampled.k):
            out[f"{PASS_PREFIX}/{source}/pass@{j}"] = float(pass_at(sampled.counts[rows], sampled.k, j).mean())
    return out


def is_right(out: DataProto, metric: str) -> np.ndarray:
    """Per response, 1 if the reward's `metric` (acc, ...) says right, else 0; the sequence score > 0 without it."""
    if metric in out.non_tensor_batch:
        return (np.asarray(out.non_tensor_batch[metric], dtype=float) > 0).astype(int)
    return (out.batch["rm_scores"].sum(-1).numpy() > 0).astype(int)


def _row_index(nt: dict, size: int, start: int) -> list:
    """extra_info.index when the data set has it (what the memory keys by with memory.key=index), else the row."""
    extra = nt.get("extra_info")
    if extra is not None and all(isinstance(e, dict) and "index" in e for e in extra):
        return [e["index"] for e in extra]
    return list(range(start, start + size))
