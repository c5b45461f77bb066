"""`trainer.val_only` through the project's trainer base: validate, log as step 0, stop (no training step, no
checkpoint), with the held-out pass@k of `trainer.pass_at_k` beside the greedy accuracy. The project validates under
val_only whatever `val_before_train` says (verl's fit would skip both without val_before_train and then train, which
is not what a user asking for val_only wants)."""

from __future__ import annotations

import pytest

from tests.conftest import e2e_config, read_file_logger, run_task_runner, tiny_run_overrides
from verl_ext.metrics_log import read_jsonl

pytestmark = pytest.mark.e2e


def test_val_only_validates_and_stops(ray_cpu, tiny_assets, tmp_path):
    from verl_ext.trainer.task_runner import ExtTaskRunner

    log = tmp_path / "verl_log.jsonl"
    cfg = e2e_config(
        "ppo_trainer",
        tiny_run_overrides(tiny_assets, tmp_path, 2)
        + [
            "algorithm.adv_estimator=grpo",
            "actor_rollout_ref.actor.use_kl_loss=false",
            "data.val_max_samples=8",
            "data.seed=0",  # the same 8 validation prompts in every process
            "trainer.val_only=true",
            "trainer.val_before_train=false",
            "trainer.save_freq=1",
            "trainer.logger=[console,file]",
            "+trainer.pass_at_k=4",  # and the held-out pass@k, sampled at the training temperature
            f"+trainer.jsonl_metrics_path={tmp_path / 'metrics.jsonl'}",
        ],
    )
    run_task_runner(ExtTaskRunner, cfg, env={"VERL_FILE_LOGGER_PATH": str(log)})

    (row,) = read_file_logger(log)
    assert row["step"] == 0
    val = {k: v for k, v in row["data"].items() if k.startswith("val-core/")}
    assert val and all(0.0 <= v <= 1.0 for v in val.values()), row["data"]
    assert not any(k.startswith(("actor/", "training/")) for k in row["data"])
    # pass@1 <= pass@2 <= pass@4 per source (unbiased estimates from the same 4 responses a prompt), and pass@1 is
    # a sampled accuracy, not the greedy one
    sources = {k.split("/")[1] for k in row["data"] if k.startswith("val-pass/")}
    assert sources and sources == {k.split("/")[1] for k in val}, (sources, sorted(val))
    for source in sources:
        at = [row["data"][f"val-pass/{source}/pass@{j}"] for j in (1, 2, 4)]
        assert 0.0 <= at[0] <= at[1] <= at[2] <= 1.0, (source, at)
    assert [r["step"] for r in read_jsonl(tmp_path / "metrics.jsonl")] == [0]
    assert not (tmp_path / "ckpt").exists()  # save_freq=1, but no step ran
