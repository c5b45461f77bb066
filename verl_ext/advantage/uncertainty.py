"""Token-level uncertainty u_t, the signal GTPO weights by (retrain's `uncertainty_kind`).

Built-in kinds (every value capped at U_CAP = 50):
- `surprisal` (default): `u_t = min(-logp_t, 50)`, logp_t the log-prob of the sampled token (verl's
  `old_log_probs`). Cheap; noisy for tail samples from a confident distribution.
- `predictive_variance` (aliases `pred_var`, `bernoulli_variance`): `p = exp(max(logp_t, -50))`,
  `u_t = p (1 - p)`, in [0, 0.25], peaks at p = 0.5 and decays for confident and tail-sample tokens alike.
- `shannon_entropy` (aliases `shannon`, `entropy`): `u_t = min(H_t, 50)` with `H_t = -sum_v p_v log p_v` over
  the whole vocabulary, as verl's actor computes it (`entropy_from_logits`). It must be passed in (`entropys`);
  its absence is an error, never a fallback to surprisal.
- a dotted path `pkg.module.fn`: `fn(log_probs, entropys, mask, params) -> Tensor` of the same shape (see
  `plugins.load_uncertainty_plugin`); its output is capped at 50 like the built-ins.
Padding positions (mask 0) get u = 0 so they never reach a mean or a variance. Built-in values are also floored at
0 (log-probs above 0 or entropies below 0 are rounding noise), so GTPO can rely on u >= 0.
"""

from __future__ import annotations

import torch

U_CAP = 50.0

KIND_ALIASES = {
    "surprisal": "surprisal",
    "predictive_variance": "predictive_variance",
    "pred_var": "predictive_variance",
    "bernoulli_variance": "predictive_variance",
    "shannon_entropy": "shannon_entropy",
    "shannon": "shannon_entropy",
    "entropy": "shannon_entropy",
}


def canonical_kind(kind: str) -> str:
    """The canonical name of a built-in kind, the dotted path itself for a plugin; ValueError otherwise."""
    if not isinstance(kind, str):
        raise ValueError(f"uncertainty_kind must be a string, got {kind!r}")
    name = kind.strip()
    if name.lower() in KIND_ALIASES:
        return KIND_ALIASES[name.lower()]
    if "." in name:
        return name
    raise ValueError(
        f"unknown uncertainty_kind {kind!r}: use one of {sorted(KIND_ALIASES)} or a dotted path 'pkg.module.fn'"
    )


def surprisal(log_probs: torch.Tensor) -> torch.Tensor:
    return torch.clamp(log_probs, min=-U_CAP, max=0.0).neg_()


def predictive_variance(log_probs: torch.Tensor) -> torch.Tensor:
    p = log_probs.clamp(min=-U_CAP, max=0.0).exp_()
    return p.mul_(1.0 - p)


def shannon_entropy(entropys: torch.Tensor) -> torch.Tensor:
    return entropys.clamp(min=0.0, max=U_CAP)


def builtin_uncertainty(kind: str, log_probs: torch.Tensor | None, entropys: torch.Tensor | None) -> torch.Tensor:
    """u (a fresh float32 tensor) for a canonical built-in kind; padding positions are masked by the caller."""
    if kind == "shannon_entropy":
        if entropys is None:
            raise ValueError(
                "uncertainty_kind=shannon_entropy needs the per-token entropies (`entropys`, computed by verl's "
                "actor with calculate_entropy=True and kept by verl_ext.trainer.ExtRayPPOTrainer); none were passed"
            )
        return shannon_entropy(entropys.float())
    if log_probs is None:
        raise ValueError(f"uncertainty_kind={kind} needs old_log_probs; none were passed")
    log_probs = log_probs.float()
    return surprisal(log_probs) if kind == "surprisal" else predictive_variance(log_probs)


_STATS_CHUNK = 1 << 18  # elements per chunk: big enough for BLAS, small enough to stay in cache


def uncertainty_sums(u: torch.Tensor, p: torch.Tensor | None) -> tuple[float, float, float, float, float]:
    """(sum, sum of squares) of u over all tokens, and (count, sum, sum of squares) over planning tokens.

    u is 0 on padding, so sums over everything are sums over masked-in tokens; p (float 0/1) marks planning tokens.
    Dot products over row chunks in float32, totals in float64, and no fresh (bs, T) tensor.
    """
    total = total_sq = plan_n = plan_sum = plan_sq = 0.0
    rows = max(1, _STATS_CHUNK // max(u.shape[1], 1))
    for r in range(0, u.shape[0], rows):
        uc = u[r : r + rows].reshape(-1)
        total += float(uc.sum())
        total_sq += float(torch.dot(uc, uc))
        if p is not None:
            pc = p[r : r + rows].reshape(-1)
            plan_n += float(pc.sum())
            plan_sum += float(torch.dot(uc, pc))
            plan_sq += float(torch.dot(uc * pc, uc))
    return total, total_sq, plan_n, plan_sum, plan_sq
