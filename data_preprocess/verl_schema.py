"""Rows in the schema verl's RLHFDataset reads (written by verl_ext/dataset/schema.py), with the prompt of verl's
examples/data_preprocess/math_dataset.py.

Columns: ``data_source`` (str), ``prompt``, ``ability`` ('math'), ``reward_model`` {style: 'rule', ground_truth},
``extra_info`` {split, index (position in the file), source_id (the input's own id), problem}.

``prompt`` is, with the chat template on (instruct models), one user message
``[{"role": "user", "content": "<problem> Let's think step by step and output the final answer within \\boxed{}."}]``;
with it off (base models), the same text as a plain string. verl 0.9.1 cannot take a string prompt by itself
(its length filter and its single-turn agent loop both apply the chat template): see
``verl_ext.dataset.raw_prompt`` for the dataset class and agent loop that make it work, and the trainer overrides.
"""

from __future__ import annotations

import pyarrow as pa

from data_preprocess.dedup import ProblemRow
from verl_ext.dataset.schema import rl_table, write_table  # noqa: F401  write_table: the writers' import point

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
    return rl_table(
        [data_source] * len(rows),
        [[{"role": "user", "content": t}] for t in texts] if use_chat_template else texts,
        [r.answer for r in rows],
        [{"split": split, "index": i, "source_id": r.source_id, "problem": r.problem} for i, r in enumerate(rows)],
    )
