"""Fast DAPO on a real pretrained model, end to end on the test backend, through the driver a user runs
(`python -m recipe.fast_dapo.main +preset=real...`, as `make demo-real` does: its own Ray, the compact console):
SmolLM2-135M-Instruct as released (its real tokenizer, chat template and Llama weights) on the generated math task,
one training step (screening, continuation and update in fused generation calls) through vLLM and FSDP2, the model's
own answers scored by math_verify; the closing summary reaches the driver's stdout last.

The step trains with the advantage pipeline's MaxRL + GTPO + HICRA (`gtpo_hicra`) on the "steps" task, whose replies
are worked steps, with the strategic grams mined from this model's replies (preset real_steps): what only a real
model exercises is that its own text holds planning tokens (the tiny model's one-digit answers never do) and that
the token advantages move off the episode advantages (GTPO on its real surprisal, HICRA on the planning tokens).
The run also samples the held-out pass@k at its last step (`trainer.pass_at_k`).

The trainer runs inside a Ray actor; lines printed there just before Ray shuts down can be dropped by Ray's log
forwarding (a `make demo` ended on its last step line). The summary is returned by the task and printed by the
driver after Ray is down. The workers run this checkout's code: the subprocess gets it first on PYTHONPATH, which
Ray's workers inherit. One run carries both checks (a verl start-up costs minutes on 2 cores).
"""

from __future__ import annotations

import json
import math
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.conftest import backend_overrides, run_driver
from verl_ext.metrics_log import read_jsonl
from verl_ext.metrics_log.console import run_summary, val_accuracy
from verl_ext.metrics_log.terminal import user_line

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[3]
TRAIN_BATCH, N_SCREEN, N_CONTINUE = 2, 4, 2


def _overrides(out: Path) -> list[str]:
    return [
        *backend_overrides(),
        "+preset=real_steps",
        "algorithm.adv_estimator=gtpo_hicra",
        "trainer.pass_at_k=2",
        f"data.train_batch_size={TRAIN_BATCH}",
        "data.gen_batch_size=6",
        "data.max_response_length=64",
        "data.val_max_samples=8",  # a fixed subset (data.seed) of the preset's two modules
        "data.seed=0",
        f"actor_rollout_ref.rollout.n={N_SCREEN}",
        f"actor_rollout_ref.rollout.n_continue={N_CONTINUE}",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={TRAIN_BATCH}",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=12",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=12",
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=12",
        "trainer.total_training_steps=1",
        "trainer.test_freq=1",
        "trainer.save_freq=-1",
        "trainer.val_before_train=false",
        "trainer.heldout.files=null",  # 1,024 more greedy answers: the tiny fast DAPO run tests it
        f"trainer.default_local_dir={out}",
        f"trainer.rollout_data_dir={out / 'rollouts'}",
        f"trainer.validation_data_dir={out / 'validation'}",
        f"hydra.run.dir={out / 'hydra'}",
    ]


def run_real_driver(out: Path) -> subprocess.CompletedProcess:
    r = run_driver("recipe.fast_dapo.main", _overrides(out))
    (out / "driver.log").write_text(r.stdout + "\n--- stderr ---\n" + r.stderr)
    assert r.returncode == 0, (r.stdout + r.stderr)[-5000:]
    return r


def test_fast_dapo_step_on_smollm2_through_the_driver(tmp_path):
    from transformers import AutoTokenizer

    from verl_ext.pretrained.smollm2 import ensure_smollm2
    from verl_ext.reward.math_reward import compute_score

    r = run_real_driver(tmp_path)
    (row,) = read_jsonl(tmp_path / "metrics.jsonl")
    N = N_SCREEN + N_CONTINUE
    assert row["step"] == 1
    assert row["curriculum/train_batch_responses"] == TRAIN_BATCH * N
    assert row["curriculum/train_groups_mixed_frac"] == 1.0, "the real model's own mixed prompts, nothing hand-set"
    assert row["rollout/generate_calls"] == row["curriculum/generation_calls"] >= 2, "screen, then continue"
    for key in ("critic/score/mean", "actor/pg_loss", "actor/grad_norm", "val-core/all/acc/mean@1"):
        assert math.isfinite(row[key]), key
    # fp32 end to end on the CPU backend: vLLM's sampling log-probs and the FSDP actor's agree closely (a bf16
    # actor differs by ~1e-2 in probability on this model)
    assert row["training/rollout_probs_diff_max"] < 1e-3, row["training/rollout_probs_diff_max"]  # measured 1.6e-5
    # validation reports every module and their pooled accuracy
    modules = [k for k in row if k.startswith("val-core/mathgen/") and k.endswith("/acc/mean@1")]
    assert len(modules) >= 2
    # held-out pass@k at the last step: 2 samples a question at the training temperature, per module and pooled
    assert 0 <= row["val-pass/all/pass@1"] <= row["val-pass/all/pass@2"] <= 1
    assert {k.split("/")[1] for k in row if k.startswith("val-pass/")} == {k.split("/")[1] for k in modules} | {"all"}
    # HICRA found planning tokens in the model's own replies, and the token advantages moved off the episode ones:
    # every planning token of a trained response (all mixed: MaxRL's A_i != 0) moved, and GTPO moved more
    assert 0 < row["adv/planning_token_frac"] < 1, row["adv/planning_token_frac"]
    assert row["adv/token_moved_frac"] >= row["adv/planning_token_frac"], row
    assert row["adv/plan_u_mean_before"] > 0 and row["adv/exec_u_mean_before"] > 0

    tok = AutoTokenizer.from_pretrained(ensure_smollm2())
    dumped = [json.loads(line) for p in sorted((tmp_path / "rollouts").glob("*.jsonl")) for line in open(p)]
    assert len(dumped) == TRAIN_BATCH * N
    boxed = 0
    preset = yaml.safe_load((ROOT / "recipe/fast_dapo/config/preset/real_steps.yaml").read_text())
    grams = preset["algorithm"]["strategic_grams"]
    with_gram = 0
    for d in dumped:
        # the chat template as the model was released (verl's dump drops the special tokens): its default system
        # line, the worked example, the question, the assistant's turn
        assert d["input"].startswith("system\nYou are a helpful AI assistant named SmolLM")
        assert d["input"].endswith("\nassistant\n") and "\\boxed{4}" in d["input"]
        ids = tok(d["output"], add_special_tokens=False)["input_ids"]
        assert tok.decode(ids) == d["output"], "the real tokenizer round-trips the model's text"
        # the trainer's score is math_verify's on the model's own answer
        assert compute_score("mathgen", d["output"], d["gts"])["score"] == d["score"]
        boxed += "\\boxed{" in d["output"]
        with_gram += any(re.search(rf"\b{re.escape(g)}\b", d["output"], re.IGNORECASE) for g in grams)
    assert boxed > 0 and 0 < sum(d["score"] for d in dumped) < len(dumped)
    assert with_gram > 0, "the mined grams are in the model's own text"
    val = [json.loads(line) for p in (tmp_path / "validation").glob("*.jsonl") for line in open(p)]
    assert len(val) == 8 and {d["score"] for d in val} <= {0.0, 1.0}

    # What the user reads (docs/TERMINAL.md): the log's path, the plan, the start-up phases, the step line and the
    # closing summary, nothing else; everything else is in the run's log.
    lines = r.stdout.splitlines()
    run_log = tmp_path / "run.log"
    assert lines[0] == f"[verl_ext] full log: {run_log}" and lines[1] == "[preflight] fast_dapo: the run's plan"
    after_plan = lines[
        next(i for i, line in enumerate(lines) if not line.startswith(("[preflight]", "  ", "[verl_ext] full"))) :
    ]
    assert all(user_line(line) == line for line in after_plan), after_plan
    # the start-up phases as they completed, each with the seconds since the driver started
    phases = [re.sub(r" \(\d+ s\)$", "", line) for line in after_plan if line.startswith("[verl_ext]")][:3]
    assert phases == [
        "[verl_ext] Ray started, task runner up",
        "[verl_ext] data: 2048 training prompts, 8 validation prompts",
        "[verl_ext] workers up: the actor (FSDP) and the rollout server (vLLM)",
    ], after_plan
    acc = val_accuracy(row)
    steps = [line for line in after_plan if line.startswith("step ")]
    assert len(steps) == 1 and steps[0].startswith("step 1/1 |") and f"val acc {acc:.3f}" in steps[0]
    # the closing summary (validation accuracy, the log, the curves) comes last, printed once, by the driver
    summary = lines[-3:]
    assert summary[0].startswith(f"[verl_ext] validation accuracy {acc:.3f} -> {acc:.3f} ("), lines[-20:]
    log, plot = str(tmp_path / "metrics.jsonl"), str(tmp_path / "metrics.png")
    assert summary[1:] == run_summary(acc, acc, None, log, plot).splitlines()[1:], lines[-20:]
    assert sum("[verl_ext] metrics log:" in line for line in lines) == 1, "the driver's only"
    assert (tmp_path / "metrics.png").exists()
    # the chatter a user cannot act on (what a fresh clone's `make demo-real` printed): in the log, not on screen
    noise = ["engine is not available", "Legacy trainer is deprecated", "[validate_config]", "Triton", "(WorkerDict"]
    full = run_log.read_text()
    for text in noise:
        assert text not in r.stdout + r.stderr, text
    assert sum(text in full for text in noise) >= 4, "the log keeps what the terminal leaves out"
    assert "Traceback" not in r.stderr
