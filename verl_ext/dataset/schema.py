"""Rows in the schema verl's RLHFDataset reads, for every task the project writes (the DAPO-Math-17k and eval-set
preprocessing in data_preprocess/, the generated math task in verl_ext/mathgen/).

Columns: ``data_source`` (str), ``prompt`` (chat messages [{role, content}], or a plain string for base models, which
``verl_ext.dataset.raw_prompt`` reads), ``ability`` (str), ``reward_model`` {style: 'rule', ground_truth} and
``extra_info`` (a struct of the writer's own fields, e.g. split and index).
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import pyarrow as pa

MESSAGES = pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))
REWARD_MODEL = pa.struct([("style", pa.string()), ("ground_truth", pa.string())])


def rl_table(
    data_source: Sequence[str],
    prompt: Sequence[list[dict] | str],
    ground_truth: Sequence[str],
    extra_info: Sequence[dict],
    ability: str = "math",
) -> pa.Table:
    """One row per prompt; ``extra_info``'s struct type is inferred from its dicts (their keys, in order). No rows is
    an error: an empty split would be written with untyped columns and fail later, in the trainer's dataset."""
    n = len(prompt)
    if n == 0:
        raise ValueError("rl_table: no rows to write (an empty split?)")
    if not len(data_source) == len(ground_truth) == len(extra_info) == n:
        raise ValueError("rl_table: data_source, prompt, ground_truth and extra_info must have one entry per row")
    strings = n > 0 and all(isinstance(p, str) for p in prompt)
    return pa.table(
        {
            "data_source": pa.array(list(data_source), pa.string()),
            "prompt": pa.array(list(prompt), pa.string() if strings else MESSAGES),
            "ability": pa.array([ability] * n, pa.string()),
            "reward_model": pa.array([{"style": "rule", "ground_truth": g} for g in ground_truth], REWARD_MODEL),
            "extra_info": pa.array(list(extra_info)),
        }
    )


def write_table(table: pa.Table, path: str | os.PathLike) -> str:
    import pyarrow.parquet as pq

    path = os.fspath(path)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    pq.write_table(table, path)
    return path
