"""Task parquet files for the agent tests: verl's RLHFDataset schema (rows of the toy set, whose ground truth is a
digit 0-4, used as the secret / the answer), plus per-row `extra_info` fields the test agents read."""

from __future__ import annotations

from pathlib import Path

import pandas as pd


def write_tasks(src: Path, dst: Path, n: int, extra: list[dict] | None = None) -> Path:
    df = pd.read_parquet(src).head(n).reset_index(drop=True)
    if extra is not None:
        assert len(extra) == n
        df["extra_info"] = [{**dict(e0), **e1} for e0, e1 in zip(df["extra_info"], extra, strict=True)]
    df.to_parquet(dst)
    return dst
