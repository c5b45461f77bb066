"""Baselines a validation accuracy is read against."""

from __future__ import annotations


def constant_answer_baseline(path) -> tuple[str, float]:
    """The best constant answer on a data set in verl's schema and its accuracy: the most frequent
    ``reward_model.ground_truth`` and its share. A policy that ignores the prompt cannot do better on that set."""
    import pandas as pd

    truths = pd.read_parquet(path)["reward_model"].map(lambda r: str(r["ground_truth"]).strip())
    counts = truths.value_counts()
    best = sorted(counts[counts == counts.max()].index)[0]  # ties: the smallest, so the result is reproducible
    return best, float(counts.max() / len(truths))
