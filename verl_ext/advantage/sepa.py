"""SEPA pooling: selective entropy pooling of execution tokens before GTPO (retrain's SEPA transform).

Formula, per response, with `lam = clip(lambda_t, 0, 1)` (lam == 0 changes nothing):
    mu_exec = mean of u over the response's execution tokens (masked in, planning mask 0)
    execution tokens: u'_t = lam * mu_exec + (1 - lam) * u_t;   planning tokens: u'_t = u_t (bit for bit).
At lam = 1 execution tokens carry no uncertainty variance, so GTPO's weights differentiate only planning tokens.
Assumptions: u is capped and zero on padding; a response without execution tokens is left unchanged (no mean is
formed, no NaN). The schedule of lambda_t lives in `sepa_schedule`.
Registry entry: `transform_mode=gtpo_sepa`, and `adv_estimator=gtpo_sepa` (advantage_mode's episode advantage,
SEPA pooling, then GTPO weighting: the recommended condition).
"""

from __future__ import annotations

import torch

from verl_ext.advantage.base import TokenTransform, TokenWork
from verl_ext.advantage.gtpo import gtpo_transform


def sepa_pool_(u: torch.Tensor, planning: torch.Tensor, mask: torch.Tensor, lam: float) -> torch.Tensor:
    """In place: u (bs, T) becomes u'. planning and mask are float 0/1 (bs, T), planning within mask.

    `planning` is consumed: it is overwritten with the execution mask (scratch space, because a fresh (bs, T)
    tensor costs more than several in-place passes on CPU). Use `sepa_pool` to keep the inputs.
    """
    lam = min(max(float(lam), 0.0), 1.0)
    if lam == 0.0:
        return u
    execution = torch.sub(mask, planning, out=planning)
    n_exec = execution.sum(dim=-1).clamp_(min=1.0)
    mu_exec = torch.bmm(u.unsqueeze(1), execution.unsqueeze(-1)).view(-1) / n_exec
    # u - lam * exec * u + lam * exec * mu: exactly u where exec is 0 (planning tokens, padding)
    u.addcmul_(u, execution, value=-lam)
    return u.addcmul_(execution, mu_exec.unsqueeze(-1), value=lam)


def sepa_pool(u: torch.Tensor, planning: torch.Tensor, mask: torch.Tensor, lam: float) -> torch.Tensor:
    """Out-of-place form; masks may be bool or 0/1, u anything finite on padding (zeroed first)."""
    m = mask.to(u.dtype)
    return sepa_pool_(u * m, planning.to(u.dtype) * m, m, lam)


def gtpo_sepa_transform(work: TokenWork) -> torch.Tensor:
    """SEPA pooling of work.u (consumes work.p), then GTPO."""
    sepa_pool_(work.u, work.p, work.m, work.sepa_lambda)
    work.pooled()
    return gtpo_transform(work)


GTPO_SEPA = TokenTransform(
    "gtpo_sepa",
    gtpo_sepa_transform,
    summary="advantage_mode (default maxrl) + SEPA pooling + GTPO weighting (the recommended condition).",
    needs_planning=True,
    uses_sepa_lambda=True,
)
