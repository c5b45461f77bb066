"""The pre-flight's memory estimate (verl_ext/config/preflight/memory.py): the model's size read from its config.json
as its weights file has it, the estimate held to the measured peaks of the shipped presets, and the warning before a
run that would not fit, naming the settings that bring it under, with what each saves."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from verl_ext.config.compose import compose_config
from verl_ext.config.preflight.memory import (
    ModelShape,
    RunShape,
    estimate,
    kv_cache_gib,
    memory_lines,
    run_shape,
)
from verl_ext.trainer.launch import register_lazy_resolvers

# Peaks measured with scripts/measure_memory.py on this machine (PSS of every process of the run; docs/FAULTS.md,
# "Memory"): (recipe, overrides, GiB). The teacher servers of a Composer run are outside its estimate: they run before
# the driver starts, so the memory available to the driver already lacks them.
SMALL_UPDATES = [
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=8",
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=8",
]
MEASURED = {
    "the agent preset (fast DAPO), 3 runs, 2026-11-28": ("fast_dapo", ["+preset=agent_real_cpu"], 17.4),
    "make demo-real, 2026-11-28": ("fast_dapo", ["+preset=real_cpu"], 12.8),
    "the agent Composer's baseline arm, updates of 4 rows, 16 steps (19.2 GiB less its teachers' 4.3)": (
        "composer",
        ["+preset=agent_real_cpu", "+arm=baseline", *SMALL_UPDATES],
        14.9,
    ),
    "the agent Composer's full arm, updates of 4 rows, at its kill (21.4 GiB less its teachers' 4.3)": (
        "composer",
        ["+preset=agent_real_cpu", "+arm=full", *SMALL_UPDATES],
        17.1,
    ),
}


def _smollm2_config() -> dict:
    from verl_ext.pretrained.smollm2 import ensure_smollm2

    return json.loads((Path(ensure_smollm2()) / "config.json").read_text())


def test_the_model_size_from_config_json_is_its_weights_files():
    from safetensors import safe_open

    from verl_ext.pretrained.smollm2 import ensure_smollm2

    with safe_open(str(Path(ensure_smollm2()) / "model.safetensors"), "pt") as f:
        params = sum(math.prod(f.get_slice(k).get_shape()) for k in f.keys())
    shape = ModelShape.from_hf_config(_smollm2_config())
    assert shape.params == params == 134_515_008
    assert (shape.hidden, shape.kv, shape.mlp, shape.heads, shape.layers) == (576, 192, 1536, 9, 30)
    # untied embeddings count the output layer once more
    untied = ModelShape.from_hf_config({**_smollm2_config(), "tie_word_embeddings": False})
    assert untied.params - shape.params == 49152 * 576


@pytest.mark.parametrize("name", list(MEASURED))
def test_the_estimate_is_near_each_measured_peak_and_rarely_under(name):
    recipe, overrides, measured = MEASURED[name]
    register_lazy_resolvers()
    cfg = compose_config(recipe, overrides, config_module=f"recipe.{recipe}.config")
    OmegaConf.resolve(cfg)
    est = estimate(run_shape(cfg, _smollm2_config()))
    assert 0.95 <= est.total_gib / measured <= 1.2, (est.render(), measured)


def base_shape() -> RunShape:
    """The agent preset's shape: 416 tokens, update micro-batches of 8 rows, log-probs 16, 1 GiB of KV cache."""
    return RunShape(ModelShape.from_hf_config(_smollm2_config()), 416, 8, 16, False, 1.0, 32)


def _shape(**changes) -> RunShape:
    return replace(base_shape(), **changes)


def test_the_parts_follow_the_settings():
    base = estimate(_shape())
    # the reference's weights: 4 bytes a parameter in the actor's worker
    assert estimate(_shape(reference=True)).total_gib - base.total_gib == pytest.approx(134_515_008 * 4 / 2**30)
    # the update's activations scale with the micro-batch's rows; at 8 rows of 416 tokens they are the largest
    # passing part, and at 2 rows a log-prob pass of 16 rows is
    assert estimate(_shape(update_rows=4)).update_gib == pytest.approx(base.update_gib / 2)
    assert "the update's activations" in base.parts_gib
    assert "a log-prob pass's logits" in estimate(_shape(update_rows=2)).parts_gib
    # the KV cache counts whole GiB
    assert estimate(_shape(kv_cache_gib=3.0)).total_gib - base.total_gib == pytest.approx(2.0)
    # activation checkpointing keeps a layer's input (hidden floats a token) and one layer's activations
    m, tokens = base_shape().model, 0.8 * 8 * 416
    layer = 6 * 576 + 2 * 192 + 4 * 1536 + 9 * 416
    assert estimate(_shape(checkpointing=True)).update_gib == pytest.approx(
        tokens * (30 * m.hidden + layer + 3 * m.vocab) * 4 / 2**30
    )
    assert base.update_gib == pytest.approx(tokens * (30 * layer + 3 * m.vocab) * 4 / 2**30)


def test_a_run_that_would_not_fit_is_warned_with_the_settings_that_bring_it_under():
    shape = _shape(kv_cache_gib=3.0)
    est = estimate(shape)
    line, warning = memory_lines(est, shape, available=est.total_gib + 3.0, total=24.0)
    assert warning is None and line.startswith(f"~{est.total_gib:.1f} GiB at the peak (actor+ref ")
    line, warning = memory_lines(est, shape, available=est.total_gib, total=24.0)  # Ray kills past 95% of 24 GiB
    assert warning is not None and warning.startswith("WARNING: this run may not fit this machine")
    assert f"its estimated peak {est.total_gib:.1f} GiB is over the {est.total_gib - 1.2:.1f} GiB" in warning
    saved = est.total_gib - estimate(replace(shape, update_rows=4)).total_gib
    assert f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4 (-{saved:.1f} GiB; the same update)" in warning
    assert "VLLM_CPU_KVCACHE_SPACE=1 (-2.0 GiB of KV cache)" in warning
    saved = est.total_gib - estimate(replace(shape, checkpointing=True)).total_gib
    assert f"enable_gradient_checkpointing=true (-{saved:.1f} GiB; slower backward passes)" in warning
    _, warning = memory_lines(est, replace(shape, checkpointing=True), available=5.0, total=24.0)
    assert "enable_gradient_checkpointing" not in warning  # already on
    # where a log-prob pass is the largest part, its micro-batches are the setting named
    shape = _shape(update_rows=1)
    _, warning = memory_lines(estimate(shape), shape, available=5.0, total=24.0)
    assert "log_prob_micro_batch_size_per_gpu=8" in warning and "ppo_micro_batch_size_per_gpu" not in warning


def test_the_kv_cache_is_the_backends_unless_the_environment_says(monkeypatch):
    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE", raising=False)
    assert kv_cache_gib() == 1.0  # verl_ext/config/backend/cpu.yaml
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "2")
    assert kv_cache_gib() == 2.0


def test_this_machines_memory_is_read():
    from verl_ext.metrics_log.memory_watch import meminfo_gib

    available, total = meminfo_gib()
    assert 0 < available <= total
