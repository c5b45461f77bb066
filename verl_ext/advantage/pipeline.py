"""The composable advantage pipeline (retrain's, ALGORITHMS.md sections 1-3), for a whole batch at once.

    rewards (sum of token_level_rewards) -> episode advantages (a registry EpisodeMode: grpo | maxrl; or a plugin)
      -> uninformative groups zeroed (and counted)
      -> transform "none": broadcast over the response's tokens
         a registry TokenTransform: u (uncertainty_kind) -> its apply(TokenWork), e.g. gtpo_sepa: SEPA pooling ->
           GTPO weighting; gtpo_hicra: GTPO weighting -> HICRA
         plugin: fn(TransformContext)
    or algorithm_mode: fn(AlgorithmContext) does everything (the uninformative rule included, if it wants it).
Input: one `AdvantageInputs` (base.py) with the batch and what the trainer passed.
Output: (bs, T) token advantages, zero on padding. Metrics (when a dict is given), all floats:
    adv/correct_rate, adv/skipped_all_correct, adv/skipped_all_wrong      always
    adv/sepa_lambda                                                         when SEPA is used
    adv/planning_token_frac                                                 when a planning mask is known
    adv/{exec,plan}_u_{mean,var}_{before,after}                              token-level transforms
    adv/token_moved_frac                                                     token-level transforms
    adv/<key>                                                               a plugin's TransformOutput.extra_metrics
"before" is u as computed, "after" is the u GTPO weights by (after SEPA pooling; equal to before otherwise, and
for plugins, whose use of u the pipeline does not see).
Means and (population) variances pool all masked-in execution (planning mask 0) or planning tokens of the batch;
without a planning mask every token counts as execution; an empty set reports 0.
`adv/exec_u_var_before` and `adv/correct_rate` are what SepaController.observe takes.
`adv/token_moved_frac`: of the masked-in tokens of responses with a non-zero episode advantage A_i, the share whose
token advantage A_t differs from A_i by more than 1e-6 |A_i| (0 when the transform leaves every token at A_i, as
GTPO does where u is constant; HICRA moves every planning token).
"""

from __future__ import annotations

from collections.abc import MutableMapping

import torch

import verl_ext.advantage.registry as registry
from verl_ext.advantage.base import AdvantageInputs, TokenWork
from verl_ext.advantage.config import AdvantageConfig
from verl_ext.advantage.groups import group_ids
from verl_ext.advantage.plugins import (
    AlgorithmContext,
    TransformContext,
    load_context_plugin,
    load_episode_plugin,
    load_uncertainty_plugin,
    run_episode_plugin,
    run_uncertainty_plugin,
    token_advantages_from,
)
from verl_ext.advantage.uncertainty import KIND_ALIASES, U_CAP, builtin_uncertainty, uncertainty_sums
from verl_ext.advantage.uninformative import CORRECT_THRESHOLD, uninformative_groups


def compute_advantages(
    config: AdvantageConfig, inputs: AdvantageInputs, metrics: MutableMapping[str, float] | None = None
) -> torch.Tensor:
    """Token advantages (bs, T) in token_level_rewards' dtype. ValueError if an input the config needs is missing."""
    require_inputs(config, inputs)
    response_mask, token_level_rewards = inputs.response_mask, inputs.token_level_rewards
    bs, T = response_mask.shape
    if token_level_rewards.shape != (bs, T):
        raise ValueError(f"token_level_rewards {tuple(token_level_rewards.shape)} and response_mask {(bs, T)} differ")
    # float32 per-response sum first (exact for outcome rewards), float64 for the per-group statistics
    rewards = token_level_rewards.sum(dim=-1).double()
    gid, n_groups = group_ids(inputs.index, bs)
    flat, n_all_correct, n_all_wrong = uninformative_groups(rewards, gid, n_groups)
    out: dict[str, float] = {
        "adv/correct_rate": float((rewards > CORRECT_THRESHOLD).double().mean()) if bs else 0.0,
        "adv/skipped_all_correct": float(n_all_correct),
        "adv/skipped_all_wrong": float(n_all_wrong),
    }
    if config.uses_sepa:
        out["adv/sepa_lambda"] = min(max(float(inputs.sepa_lambda), 0.0), 1.0)

    if config.algorithm_mode:
        advantages = _algorithm_plugin(config, inputs, rewards, gid, out)
    else:
        episode = _episode_advantages(config, rewards, gid, n_groups)
        episode = torch.where(flat, 0.0, episode).to(token_level_rewards.dtype)
        if config.effective_transform == "none":
            advantages = episode.unsqueeze(-1) * response_mask  # as verl's grpo_vectorized: one fresh (bs, T) tensor
        else:
            advantages = _token_advantages(config, inputs, episode, gid, out, with_stats=metrics is not None)
    if metrics is not None:
        metrics.update(out)
    return advantages.to(token_level_rewards.dtype)


def _token_advantages(
    config: AdvantageConfig, inputs: AdvantageInputs, episode, gid, out, with_stats: bool
) -> torch.Tensor:
    """u -> the transform (a registry TokenTransform, or a plugin). Fresh (bs, T) tensors cost far more than
    in-place passes on CPU (page faults), so a built-in transform works in place on three: the mask m, the planning
    mask p (float 0/1) and u, which becomes the weights and then the advantages."""
    transform = config.effective_transform
    m = inputs.response_mask.to(torch.float32)
    p = None if inputs.planning_mask is None else inputs.planning_mask.to(torch.float32).mul_(m)
    u = _uncertainty(config, inputs, m)
    n_tokens = float(m.sum(dim=-1).double().sum())
    if p is not None:
        out["adv/planning_token_frac"] = float(p.sum(dim=-1).double().sum()) / max(n_tokens, 1.0)
    before = uncertainty_sums(u, p) if with_stats else None
    builtin = registry.transforms().get(transform)
    if builtin is None:
        # "after" = "before": u not transformed
        advantages = _transform_plugin(config, transform, inputs, episode=episode, u=u, p=p, gid=gid, out=out)
        after = before
    else:
        work = TokenWork(
            u=u,
            m=m,
            p=p,
            episode=episode,
            gtpo_beta=config.gtpo_beta,
            hicra_alpha=config.hicra_alpha,
            sepa_lambda=inputs.sepa_lambda,
            nonnegative=config.uncertainty_kind in KIND_ALIASES.values(),  # built-in kinds are >= 0
            before=before,
            after=before,
        )
        advantages = builtin.apply(work).mul_(m)
        after = work.after
    if with_stats:
        _emit_uncertainty_stats(out, "before", n_tokens, before)
        _emit_uncertainty_stats(out, "after", n_tokens, after)
        out["adv/token_moved_frac"] = _moved_frac(advantages, episode, m)
    return advantages


def _moved_frac(advantages: torch.Tensor, episode: torch.Tensor, m: torch.Tensor) -> float:
    """Share of the masked-in tokens of responses with A_i != 0 whose A_t moved from A_i (module docstring)."""
    ep = episode.to(advantages.dtype).unsqueeze(-1)
    informative = (ep != 0) & (m > 0)
    moved = (advantages - ep).abs() > 1e-6 * ep.abs()
    n = float(informative.sum())
    return float((moved & informative).sum()) / n if n else 0.0


TRAINER_HINT = (
    "verl's stock RayPPOTrainer passes only rewards and masks to advantage estimators; run with the project's "
    "trainer verl_ext.trainer.ExtRayPPOTrainer, which passes them"
)


def require_inputs(config: AdvantageConfig, inputs: AdvantageInputs) -> None:
    """Raise a ValueError naming what is missing for this config and which trainer provides it."""
    name = f"adv_estimator={config.adv_estimator}" if config.adv_estimator else "the advantage pipeline"
    missing = []
    if config.needs_log_probs and inputs.old_log_probs is None:
        missing.append("old_log_probs")
    if config.needs_entropys and inputs.entropys is None:
        missing.append(f"entropys (uncertainty_kind={config.uncertainty_kind}; never replaced by surprisal)")
    if config.needs_planning and inputs.planning_mask is None:
        missing.append("planning_mask (or `tokenizer` and `responses` to detect it)")
    if config.uses_sepa and inputs.sepa_lambda is None:
        missing.append("sepa_lambda (the SEPA schedule state lives in the trainer's SepaController)")
    if missing:
        raise ValueError(f"{name} needs {', '.join(missing)}. {TRAINER_HINT}.")


def _lambda(sepa_lambda: float | None) -> float:
    return 0.0 if sepa_lambda is None else float(sepa_lambda)


def _algorithm_plugin(config: AdvantageConfig, inputs: AdvantageInputs, rewards, gid, out) -> torch.Tensor:
    mask = inputs.response_mask.bool()
    planning = None if inputs.planning_mask is None else inputs.planning_mask.bool() & mask
    m = inputs.response_mask.to(torch.float32)
    u = _uncertainty(config, inputs, m)
    n_tokens = float(m.sum(dim=-1).double().sum())
    p = None if planning is None else planning.to(torch.float32)
    if p is not None:
        out["adv/planning_token_frac"] = float(p.sum(dim=-1).double().sum()) / max(n_tokens, 1.0)
    before = uncertainty_sums(u, p)
    _emit_uncertainty_stats(out, "before", n_tokens, before)
    _emit_uncertainty_stats(out, "after", n_tokens, before)
    ctx = AlgorithmContext(
        rewards=rewards,
        index=inputs.index,
        advantage_params=config.advantage_params,
        transform_params=config.transform_params,
        **_batch_view(config, inputs, u=u, mask=mask, planning=planning, gid=gid),
    )
    return _run_context_plugin(config.algorithm_mode, "algorithm_mode", ctx, mask, out)


def _transform_plugin(
    config: AdvantageConfig, transform: str, inputs: AdvantageInputs, *, episode, u, p, gid, out
) -> torch.Tensor:
    mask = inputs.response_mask.bool()
    planning = None if p is None else p.bool()
    ctx = TransformContext(
        episode_advantages=episode,
        params=config.transform_params,
        **_batch_view(config, inputs, u=u, mask=mask, planning=planning, gid=gid),
    )
    return _run_context_plugin(transform, "transform_mode", ctx, mask, out)


def _batch_view(config: AdvantageConfig, inputs: AdvantageInputs, *, u, mask, planning, gid) -> dict:
    """What a transform and a full-algorithm plugin both see of the batch, as their contexts' keyword arguments."""
    return dict(
        logprobs=inputs.old_log_probs,
        uncertainty=u,
        response_mask=mask,
        planning_mask=planning,
        group_ids=gid,
        entropys=inputs.entropys,
        sepa_lambda=_lambda(inputs.sepa_lambda),
        step=inputs.step,
        gtpo_beta=config.gtpo_beta,
        hicra_alpha=config.hicra_alpha,
    )


def _run_context_plugin(path: str, role: str, ctx, mask, out) -> torch.Tensor:
    """Call the plugin `path` (config key `role`) on its context; its extra metrics go to `out` as adv/<key>."""
    plugin = load_context_plugin(path, role)
    advantages, extra = token_advantages_from(plugin.fn(ctx), mask, f"{role}={plugin.path!r}")
    out.update({f"adv/{k}": v for k, v in extra.items()})
    return advantages


def _episode_advantages(config: AdvantageConfig, rewards, gid, n_groups) -> torch.Tensor:
    mode = config.effective_episode_mode
    builtin = registry.episode_modes().get(mode)
    if builtin is not None:
        return builtin.fn(rewards, gid, n_groups)
    return run_episode_plugin(load_episode_plugin(mode), rewards, gid, n_groups, config.advantage_params)


def _uncertainty(config: AdvantageConfig, inputs: AdvantageInputs, m) -> torch.Tensor:
    """u (bs, T), a fresh float32 tensor, capped at U_CAP, 0 on padding."""
    kind = config.uncertainty_kind
    if kind in KIND_ALIASES.values():
        return builtin_uncertainty(kind, inputs.old_log_probs, inputs.entropys).mul_(m)
    plugin = load_uncertainty_plugin(kind)
    response_mask = inputs.response_mask
    u = run_uncertainty_plugin(plugin, inputs.old_log_probs, inputs.entropys, response_mask, config.transform_params)
    u = torch.where(response_mask.bool(), u.float(), 0.0)
    if not torch.isfinite(u).all():
        raise ValueError(f"uncertainty_kind={kind!r} returned non-finite values on response tokens")
    return u.clamp_(max=U_CAP)


def _emit_uncertainty_stats(out: dict, tag: str, n_tokens: float, sums: tuple) -> None:
    """Pooled mean and population variance over execution and planning tokens (see module docstring)."""
    total, total_sq, plan_n, plan_sum, plan_sq = sums
    sets = (("exec", n_tokens - plan_n, total - plan_sum, total_sq - plan_sq), ("plan", plan_n, plan_sum, plan_sq))
    for name, n, s, sq in sets:
        mean = s / n if n else 0.0
        out[f"adv/{name}_u_mean_{tag}"] = mean
        out[f"adv/{name}_u_var_{tag}"] = max(sq / n - mean * mean, 0.0) if n else 0.0
