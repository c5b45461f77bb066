"""What the agent tests share: task parquet files in verl's RLHFDataset schema (rows of the toy set, whose ground truth
is a digit 0-4, used as the secret / the answer, plus per-row `extra_info` fields the test agents read), and the
calculator tool the gateway tests offer (`CALC`, chat-completions form)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

CALC = {
    "type": "function",
    "function": {
        "name": "calc",
        "description": "Evaluate an arithmetic expression.",
        "parameters": {"type": "object", "properties": {"expr": {"type": "string"}}, "required": ["expr"]},
    },
}


def write_tasks(src: Path, dst: Path, n: int, extra: list[dict] | None = None) -> Path:
    df = pd.read_parquet(src).head(n).reset_index(drop=True)
    if extra is not None:
        assert len(extra) == n
        df["extra_info"] = [{**dict(e0), **e1} for e0, e1 in zip(df["extra_info"], extra, strict=True)]
    df.to_parquet(dst)
    return dst
