"""Rows in the schema verl's RLHFDataset reads, with the prompt of verl's examples/data_preprocess/math_dataset.py.

Columns: ``data_source`` (str), ``prompt``, ``ability`` ('math'), ``reward_model`` {style: 'rule', ground_truth},
``extra_info`` {split, index (position in the file), source_id (the input's own id), problem}.

``prompt`` is, with the chat template on (instruct models), one user message
``[{"role": "user", "content": "<problem> Let's think step by step and output the final answer within \\boxed{}."}]``;
with it off (base models), the same text as a plain string. verl 0.9.1 cannot take a string prompt by itself
(its length filter and its single-turn agent loop both apply the chat template): see
``verl_ext.dataset.raw_prompt`` for the dataset class and agent loop that make it work, and the trainer overrides.
"""

from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.parquet as pq

from data_preprocess.dedup import ProblemRow

INSTRUCTION = "Let's think step by step and output the final answer within \\boxed{}."


def prompt_text(problem: str) -> str:
    return f"{problem} {INSTRUCTION}"


def parse_on_off(value: str) -> bool:
    """'on'/'off' (also true/false/1/0/yes/no) for the --use-chat-template flag."""
    lowered = value.strip().lower()
    if lowered in ("on", "true", "1", "yes"):
        return True
    if lowered in ("off", "false", "0", "no"):
        return False
    raise ValueError(f"expected on/off, got {value!r}")


def verl_table(rows: list[ProblemRow], data_source: str, split: str, use_chat_template: bool) -> pa.Table:
    texts = [prompt_text(r.problem) for r in rows]
    if use_chat_template:
        prompt = pa.array(
            [[{"role": "user", "content": t}] for t in texts],
            pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())])),
        )
    else:
        prompt = pa.array(texts, pa.string())
    n = len(rows)
    return pa.table(
        {
            "data_source": pa.array([data_source] * n, pa.string()),
            "prompt": prompt,
            "ability": pa.array(["math"] * n, pa.string()),
            "reward_model": pa.array(
                [{"style": "rule", "ground_truth": r.answer} for r in rows],
                pa.struct([("style", pa.string()), ("ground_truth", pa.string())]),
            ),
            "extra_info": pa.array(
                [
                    {"split": split, "index": i, "source_id": r.source_id, "problem": r.problem}
                    for i, r in enumerate(rows)
                ],
                pa.struct(
                    [
                        ("split", pa.string()),
                        ("index", pa.int64()),
                        ("source_id", pa.string()),
                        ("problem", pa.string()),
                    ]
                ),
            ),
        }
    )


def write_table(table: pa.Table, path: str) -> str:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    pq.write_table(table, path)
    return path
