"""Sampled-token SDPO shaping as an advantage term (Composer seed 003, Recipe B).

Papers: SDPO, Huebotter et al., arXiv 2601.20802; OPSD, Zhao et al., arXiv 2601.18734 (its sampled-token form).
The teacher is the same model scoring the student's own response tokens under the hint-augmented context, without
gradient. At error-site tokens (the post-hint tokens of the turn the hint targets):

    A_t += alpha_sdpo * (logp_teacher_t - logp_student_t)

logp_student_t is the rollout policy's log-prob of the sampled token (verl's `old_log_probs`). A positive term
means the hint made the sampled token more likely, so the update pushes towards it. Tokens outside the error mask
get nothing. Assumes teacher and student log-probs are aligned on the response tokens (see `hints.py`).
"""

from __future__ import annotations

import torch


def sdpo_advantage_term(
    teacher_logp: torch.Tensor,
    student_logp: torch.Tensor,
    error_mask: torch.Tensor,
    alpha: float,
) -> torch.Tensor:
    """alpha * (teacher_logp - student_logp) at error-mask tokens, 0 elsewhere; all (B, T), no gradient."""
    if not (teacher_logp.shape == student_logp.shape == error_mask.shape):
        raise ValueError(
            "teacher_logp, student_logp and error_mask must share one shape, got "
            f"{tuple(teacher_logp.shape)}, {tuple(student_logp.shape)}, {tuple(error_mask.shape)}"
        )
    if not alpha >= 0:
        raise ValueError(f"alpha must be >= 0, got {alpha}")
    with torch.no_grad():
        diff = teacher_logp.float() - student_logp.float()
        # where(), not a product: a masked -inf log-prob (padding) must give 0, not NaN.
        return torch.where(error_mask.bool(), alpha * diff, torch.zeros_like(diff))
