"""Validation over several data sources: verl's per-source metrics plus the same metrics over every sample."""

from __future__ import annotations

import numpy as np

from verl_ext.trainer.ppo_trainer import ExtRayPPOTrainer


def _metrics(sources, acc):
    trainer = object.__new__(ExtRayPPOTrainer)  # the method reads only its arguments (verl's metric code)
    uids = [f"u{i}" for i in range(len(sources))]
    extra = {"acc": list(acc), "reward": list(acc)}
    return trainer._val_metrics_update(np.array(sources, dtype=object), uids, extra, [])


def test_pooled_accuracy_weighs_every_sample_the_same():
    sources = ["mathgen/a"] * 3 + ["mathgen/b"] * 1
    acc = [1.0, 0.0, 0.0, 1.0]
    m = _metrics(sources, acc)
    assert m["val-core/mathgen/a/acc/mean@1"] == 1 / 3 and m["val-core/mathgen/b/acc/mean@1"] == 1.0
    assert m["val-core/all/acc/mean@1"] == 0.5  # 2 of 4 samples, not the mean of the two sources (0.67)


def test_one_source_gets_no_pooled_key():
    m = _metrics(["toy"] * 3, [1.0, 0.0, 1.0])
    assert not any("/all/" in k for k in m) and m["val-core/toy/acc/mean@1"] == 2 / 3
