"""Parity of the project's trainer base with verl's own: stock GRPO, 2 steps, same seed, data and responses.

The same task runner (`ExtTaskRunner`: verl's workers, datasets and resource pools) runs the job twice in one Ray
session, once with verl 0.9.1's `RayPPOTrainer` (`trainer.trainer_cls`) and once with the project's
`ExtRayPPOTrainer`. Both runs switch on, as a user would, the verl features the trainer base re-implements:
decoupled rollout correction (token-level importance weights, `rollout_corr/*` metrics), rollout dumps
(`trainer.rollout_data_dir`) and verl's rollout cache (`skip.rollout`).

The rollout cache is what makes the comparison exact: vLLM's sampling is not reproducible across two server
launches (request batching depends on arrival order), so verl's run dumps each step's generated batch and the
project's run replays it. Each step then starts from the same prompts and responses; step 2's responses were sampled
by verl's step-1 policy, so step 2's log-probs and losses compare the two runs' first updates too.

A third run of the project's trainer replays the same responses with shared-prefix actor passes
(`actor.use_prefix_grouper=true`, verl_ext/shared_prefix/) and must log the unshared run's metrics to float tolerance.

Tolerances. Rewards, advantages and the token-level importance weights are computed in the driver from identical
inputs by the same functions: they must agree exactly (up to float32 printing). Losses, entropies, KL and gradient
norms come from FSDP workers running the same kernels on the same rows in the same micro-batches; the only possible
difference is the order of multi-threaded float32 reductions inside the CPU kernels (about 1e-7 relative per
reduction), carried through one Adam step at lr 1e-3. A relative tolerance of 1e-4 (absolute 1e-6 near zero) is
three orders of magnitude above that and orders of magnitude below any real difference (one skipped step, a missing
KL term or a changed mask moves these metrics by 1e-2 or more on this model). Measured on the 2-core CPU test machine:
every compared metric, losses and gradient norms included, was equal to the last bit.
"""

from __future__ import annotations

import json
import math

import pytest
import torch

from tests.conftest import e2e_config, read_file_logger, run_task_runner, tiny_run_overrides

pytestmark = pytest.mark.e2e

STEPS = 2
EXACT = (
    "critic/score/",
    "critic/rewards/",
    "critic/advantages/",
    "critic/returns/",
    "response_length/",
    "prompt_length/",
)
UPDATE = ("actor/pg_loss", "actor/kl_loss", "actor/entropy", "actor/pg_clipfrac", "actor/ppo_kl", "actor/grad_norm")


def _close(a: float, b: float, rel: float, abs_: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=rel, abs_tol=abs_)


def _config(tiny_assets, out, dump_dir, trainer_cls: str | None, shared_prefix: bool = False):
    overrides = tiny_run_overrides(tiny_assets, out, STEPS) + [
        # verl's own trainer computes every row's prompt (it never asks the engine to share): the parity runs do too
        f"actor_rollout_ref.actor.use_prefix_grouper={str(shared_prefix).lower()}",
        "algorithm.adv_estimator=grpo",
        "actor_rollout_ref.actor.use_kl_loss=true",
        "actor_rollout_ref.actor.kl_loss_coef=0.001",
        "actor_rollout_ref.rollout.calculate_log_probs=true",
        "algorithm.rollout_correction.rollout_is=token",
        "algorithm.rollout_correction.rollout_is_threshold=2.0",
        f"trainer.rollout_data_dir={out / 'rollouts'}",
        "skip.rollout.enable=true",
        f"skip.rollout.dump_dir={dump_dir}",
        f"skip.rollout.steps=[{','.join(str(s) for s in range(1, STEPS + 1))}]",
        "trainer.logger=[console,file]",
        f"trainer.save_freq={STEPS}",  # the last step's checkpoint: the trained weights (assert_verl_trains)
    ]
    if trainer_cls:
        overrides.append(f"+trainer.trainer_cls={trainer_cls}")
    return e2e_config("ppo_trainer", overrides)


def _run(tiny_assets, tmp_path, name, trainer_cls=None, shared_prefix=False):
    from verl_ext.trainer.task_runner import ExtTaskRunner

    out = tmp_path / name
    out.mkdir()
    log = out / "metrics.jsonl"
    run_task_runner(
        ExtTaskRunner,
        _config(tiny_assets, out, tmp_path / "rollout_cache", trainer_cls, shared_prefix),
        env={"VERL_FILE_LOGGER_PATH": str(log)},
    )
    return _read(out)


def _read(out):
    rows = {r["step"]: r["data"] for r in read_file_logger(out / "metrics.jsonl")}
    dumps = {
        s: [json.loads(x) for x in (out / "rollouts" / f"{s}.jsonl").read_text().splitlines()]
        for s in range(1, STEPS + 1)
    }
    return rows, dumps


def test_grpo_matches_verls_trainer_with_rollout_correction_and_dumps(ray_cpu, tiny_assets, tmp_path):
    verl_rows, verl_dumps = _run(tiny_assets, tmp_path, "verl", "verl.trainer.ppo.ray_trainer.RayPPOTrainer")
    cache = list((tmp_path / "rollout_cache").rglob("gen_batch.dp"))
    assert len(cache) == STEPS, cache  # verl's run generated and cached each step's responses
    assert_verl_trains(verl_rows, tiny_assets, tmp_path / "verl" / "ckpt")
    ext_rows, ext_dumps = _run(tiny_assets, tmp_path, "ext")
    assert_parity(verl_rows, ext_rows, verl_dumps, ext_dumps)
    # The same two steps with shared-prefix actor passes (verl_ext/shared_prefix), replaying the same responses.
    shared_rows, shared_dumps = _run(tiny_assets, tmp_path, "ext_shared", shared_prefix=True)
    assert_shared_prefix_matches(ext_rows, shared_rows, ext_dumps, shared_dumps)


# Shared-prefix passes reassociate float32 sums in attention (docs/SHARED_PREFIX.md, "Exactness": log-probs within
# ~2e-5 of the unshared pass); the metrics built from log-probs inherit that.
SHARED_REL, SHARED_ABS = 1e-3, 1e-5
# Step 2 runs on the weights after one Adam step, whose bias-corrected m / sqrt(v) is g / |g|: every weight moves by
# +-lr whatever its gradient's size, so a gradient element within float noise of zero can flip its move (2 * lr = 2e-3
# at the tiny model's lr). The weights then differ by more than float noise, and step 2's metrics are compared at 1%
# (CI saw actor/grad_norm 0.2% apart at step 2 on a machine whose step 1 matched to 1e-3).
AFTER_ADAM_REL = 1e-2
# Per-token log-prob bound of the shared pass (tests/shared_prefix/test_engine.py asserts it on real-model rows).
TOKEN_LP_ATOL = 5e-5


def _shared_abs(key: str, step_metrics: dict, weights_differ: bool) -> float:
    """Absolute tolerance of one metric, from the per-token log-prob bound d of a shared pass. Most of these metrics
    are differences of log-probs that agree to float noise (vLLM and the actor serve the same weights; the update
    runs on policy), so their values are that noise and only an absolute bound applies (CI saw pg_loss at 5.4e-5
    beside 7e-9).
    - rollout_corr's per-token statistics (kl, log_ppl_diff and its extremes, the token IS weights) move by up to d;
      chi2_token, mean(rho^2) - 1, by up to 2d.
    - Its sequence-level weights are exp(sum_t log rho_t): a weight near 1 moves by up to L * d, L the longest
      response, and so do their statistics; chi2_seq, mean(w^2) - 1, by up to 2 * L * d.
    - The update's ratio rho = exp(lp - old_lp) compares two shared passes (batched differently), each within d of
      the exact value: ppo_kl, a mean of lp - old_lp, moves by up to 2d; pg_loss, an average of -A * rho whose terms
      cancel on policy (GRPO's advantages sum to zero in each group), by up to max|A| * 2d.
    Every other compared metric (scores, lengths, losses and norms of order 1e-2 and up) keeps SHARED_ABS.

    After the first update (weights_differ) rollout_corr compares each run's actor, on its own weights, with the
    rollout log-probs the cache replays from verl's run; the shared run's weights differ by the flipped Adam moves
    (AFTER_ADAM_REL), so its per-token log-probs move by a fraction of that update's own move as well. The update's
    RMS per-token move is sqrt(2 * kl_loss) (the low-variance KL to the reference, the weights before it, is about
    half the mean squared log-prob change); d grows by AFTER_ADAM_REL of it. (CI saw log_ppl_diff_min -2.1e-4 beside
    2.7e-5 at step 2, a shift of 0.12% of that move, while step 1 matched within d.)"""
    d = TOKEN_LP_ATOL
    if key == "actor/ppo_kl":
        return 2 * d
    if key == "actor/pg_loss":
        largest = max(abs(step_metrics["critic/advantages/max"]), abs(step_metrics["critic/advantages/min"]))
        return 2 * largest * d
    if not key.startswith("rollout_corr/"):
        return SHARED_ABS
    if weights_differ:  # only rollout_corr compares against log-probs from outside the run (the replayed rollout)
        d += AFTER_ADAM_REL * math.sqrt(2 * step_metrics["actor/kl_loss"])
    longest = step_metrics["response_length/max"]
    if key == "rollout_corr/chi2_token":
        return 2 * d
    if key == "rollout_corr/chi2_seq":
        return 2 * longest * d
    if key.startswith("rollout_corr/rollout_is_seq_"):
        return longest * d
    return d


def assert_shared_prefix_matches(ext_rows: dict, shared_rows: dict, ext_dumps: dict, shared_dumps: dict) -> None:
    """A run with shared-prefix passes logs the unshared run's metrics to float tolerance, on the same rows (which
    verl's group-keeping balance may order differently)."""
    fields = ("input", "output", "gts", "score", "step")
    for step in range(1, STEPS + 1):
        rows = sorted(json.dumps({k: r[k] for k in fields}) for r in ext_dumps[step])
        assert sorted(json.dumps({k: r[k] for k in fields}) for r in shared_dumps[step]) == rows
        ext, shared = ext_rows[step], shared_rows[step]
        # the engine did share: it ran on fewer tokens than the rows hold (the key only logged when asked for)
        assert set(shared) - set(ext) == {"actor/shared_prefix/token_frac"} and not set(ext) - set(shared)
        assert 0 < shared["actor/shared_prefix/token_frac"] < 0.9, shared["actor/shared_prefix/token_frac"]
        keys = sorted(k for k in ext if k.startswith((*EXACT, "rollout_corr/")) or k in UPDATE)
        # verl computes this std in float32 as sqrt(E[w^2] - E[w]^2) with every weight within 1e-4 of 1: it can only
        # read 0, sqrt(eps) = 3.45e-4 or sqrt(1.5 eps) = 4.23e-4, so a 1e-6 change in a log-prob flips it
        keys.remove("rollout_corr/rollout_is_std")
        assert len(keys) > 25
        weights_differ = step > 1
        for key in keys:
            tol = _shared_abs(key, ext, weights_differ)
            rel = AFTER_ADAM_REL if weights_differ and not key.startswith(EXACT) else SHARED_REL
            assert _close(shared[key], ext[key], rel, tol), (step, key, shared[key], ext[key], rel, tol)
    # the update moved the policy off the reference the same way in both runs
    kl_ext, kl_shared = ext_rows[2]["actor/kl_loss"], shared_rows[2]["actor/kl_loss"]
    assert kl_ext > 0 and abs(kl_shared - kl_ext) <= AFTER_ADAM_REL * kl_ext, (kl_shared, kl_ext)


def _actor_weights_from_checkpoint(ckpt_dir):
    """Full actor state dict from verl's FSDP checkpoint of the last step (one rank here)."""
    shard = next(ckpt_dir.glob("global_step_*/actor/model_world_size_1_rank_0.pt"))
    state = torch.load(shard, map_location="cpu", weights_only=False)
    return {k: (v.full_tensor() if hasattr(v, "full_tensor") else v) for k, v in state.items()}


def assert_verl_trains(verl_rows: dict, tiny_assets, ckpt_dir) -> None:
    """verl 0.9.1's own trainer, stock GRPO with a KL loss (the reference model runs too), trains on the CPU backend:
    finite losses, a gradient, a rollout serving the actor's current weights, and weights that moved."""
    from transformers import AutoModelForCausalLM

    for step, m in verl_rows.items():
        for key in ("critic/score/mean", "critic/advantages/mean", "actor/pg_loss", "actor/grad_norm"):
            assert math.isfinite(float(m[key])), (step, key, m.get(key))
        assert float(m["actor/grad_norm"]) > 0
        # vLLM and the FSDP actor score the same sampled tokens: with fp32 on both sides their probabilities agree
        # closely only if vLLM serves the actor's current weights
        assert float(m["training/rollout_probs_diff_max"]) < 0.05, (step, m["training/rollout_probs_diff_max"])
    # From step 2 on the actor has moved away from its initial weights (= the reference model's): a rollout still
    # serving the initial weights would disagree with the actor by about the actor-vs-reference KL. It must not.
    for step in range(2, STEPS + 1):
        m = verl_rows[step]
        assert float(m["actor/kl_loss"]) > 0
        assert float(m["rollout_corr/k3_kl"]) < 0.2 * float(m["actor/kl_loss"]), (step, m)
    trained = _actor_weights_from_checkpoint(ckpt_dir)
    initial = AutoModelForCausalLM.from_pretrained(tiny_assets.model_dir).state_dict()
    changed = [k for k, v in initial.items() if k in trained and not torch.allclose(trained[k].float(), v.float())]
    assert len(changed) >= len(initial) // 2, f"only {len(changed)} of {len(initial)} tensors changed"


def assert_parity(verl_rows: dict, ext_rows: dict, verl_dumps: dict, ext_dumps: dict) -> None:
    """verl's and the project's logged metrics ({step: metrics}) and rollout dumps ({step: rows}) agree."""
    assert sorted(verl_rows) == sorted(ext_rows) == list(range(1, STEPS + 1))
    # Rollout dumps (trainer.rollout_data_dir): the same prompts, responses and scores, row for row.
    for step in range(1, STEPS + 1):
        fields = ("input", "output", "gts", "score", "step")
        assert [{k: r[k] for k in fields} for r in ext_dumps[step]] == [
            {k: r[k] for k in fields} for r in verl_dumps[step]
        ]
        assert len(ext_dumps[step]) == 4 * 4  # train_batch_size x n
    for step in range(1, STEPS + 1):
        verl, ext = verl_rows[step], ext_rows[step]
        # Every metric verl's loop logs, the project's logs too (nothing of the loop dropped); it adds its own.
        assert not set(verl) - set(ext), sorted(set(verl) - set(ext))
        assert set(ext) - set(verl) == {"rollout/generate_calls", "time/train_total_s", "time/wall"}
        # Decoupled rollout correction ran in both (importance weights and off-policy statistics), identically.
        corr = sorted(k for k in verl if k.startswith("rollout_corr/"))
        assert corr and sorted(k for k in ext if k.startswith("rollout_corr/")) == corr
        assert "rollout_corr/rollout_is_mean" in corr and "rollout_corr/kl" in corr, corr
        exact = corr + sorted(k for k in verl if k.startswith(EXACT))
        assert len(exact) > 20
        for key in exact:
            assert _close(ext[key], verl[key], 1e-6, 1e-7), (step, key, ext[key], verl[key])
        for key in UPDATE:
            assert key in verl and key in ext, (step, key)
            assert _close(ext[key], verl[key], 1e-4, 1e-6), (step, key, ext[key], verl[key])
    # Step 1 trains the reference policy itself (KL 0); step 2 compares the policies after each run's first update.
    assert abs(ext_rows[1]["actor/kl_loss"]) < 1e-6 < ext_rows[2]["actor/kl_loss"]
