"""GTPO weighting: token-level credit by normalised uncertainty (retrain's form of arXiv 2508.04349).

Formula, per response i with episode advantage A_i, uncertainty u_t and `mean_u` = mean of u over its own
masked-in tokens:
    w_t = 1                                                if beta == 0 or mean_u < 1e-7
    w_t = max(0, 1 + beta * (u_t / (mean_u + 1e-8) - 1))   otherwise
    A_{i,t} = A_i * w_t.
Before the clamp the weights average 1 over the response (up to the 1e-8), so the response's total credit is
kept and only moved towards uncertain tokens; for beta <= 1 and u >= 0 the clamp never acts. w_t >= 0, so every
A_{i,t} has the sign of A_i. (The paper shapes rewards additively across the group instead; the retrain form is the
one the seeds describe.) Assumptions: u >= 0, capped, zero on padding; padding positions must be masked by the
caller (their weight is not defined).
Registry entry: `transform_mode=gtpo`, and `adv_estimator=gtpo` (advantage_mode's episode advantage, then GTPO).
"""

from __future__ import annotations

import torch

from verl_ext.advantage.base import TokenTransform, TokenWork

MEAN_U_MIN = 1e-7
MEAN_U_EPS = 1e-8


def _scale_offset(u: torch.Tensor, mask: torch.Tensor, beta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Per row (bs, 1): w = offset + u * scale, i.e. 1 + beta * (u / m - 1) = (1 - beta) + u * (beta / m);
    rows whose mean is below MEAN_U_MIN get (offset 1, scale 0)."""
    mean_u = (u.sum(dim=-1) / mask.sum(dim=-1).clamp(min=1)).unsqueeze(-1)
    flat = mean_u < MEAN_U_MIN
    scale = torch.where(flat, 0.0, beta / (mean_u + MEAN_U_EPS))
    offset = torch.full_like(mean_u, 1.0 - beta).masked_fill_(flat, 1.0)
    return scale, offset


def gtpo_weights_(u: torch.Tensor, mask: torch.Tensor, beta: float) -> torch.Tensor:
    """In place: u (bs, T), zero on padding, becomes w. mask is float 0/1 (bs, T)."""
    if beta == 0.0:
        return u.fill_(1.0)
    scale, offset = _scale_offset(u, mask, beta)
    return torch.addcmul(offset, u, scale, out=u).clamp_(min=0.0)


def gtpo_advantages_(
    u: torch.Tensor, mask: torch.Tensor, beta: float, episode: torch.Tensor, nonnegative: bool = False
) -> torch.Tensor:
    """In place: u (bs, T), zero on padding, becomes A_i * w_t (padding not zeroed: the caller masks).

    For beta <= 1 and u >= 0 the clamp cannot act (w >= 1 - beta), so A_i folds into the row's offset and scale and
    the whole step is one pass: A_i * w = A_i * offset + u * (A_i * scale). `nonnegative=True` promises u >= 0 and
    saves the pass that checks it.
    """
    a = episode.to(u.dtype).unsqueeze(-1)
    if beta > 1.0 or (not nonnegative and u.numel() and float(u.min()) < 0.0):
        return gtpo_weights_(u, mask, beta).mul_(a)
    if beta == 0.0:
        return u.copy_(a.expand_as(u))
    scale, offset = _scale_offset(u, mask, beta)
    return torch.addcmul(offset * a, u, scale * a, out=u)


def gtpo_weights(u: torch.Tensor, mask: torch.Tensor, beta: float) -> torch.Tensor:
    """Out-of-place form; u may hold anything on padding (it is zeroed first), mask may be bool."""
    m = mask.to(u.dtype)
    return gtpo_weights_(u * m, m, beta)


def gtpo_transform(work: TokenWork) -> torch.Tensor:
    """The `gtpo` transform, in place on work.u: A_i * w_t (the pipeline masks padding)."""
    return gtpo_advantages_(work.u, work.m, work.gtpo_beta, work.episode, nonnegative=work.nonnegative)


GTPO = TokenTransform("gtpo", gtpo_transform, summary="advantage_mode (default maxrl) + GTPO weighting.")
