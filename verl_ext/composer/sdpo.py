"""Sampled-token SDPO shaping as an advantage term (Composer "Recipe B", docs/ALGORITHMS.md section 6).

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

from verl_ext.composer.jsd import generalized_jsd_loss


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


def topk_generalized_jsd(
    student_logits: torch.Tensor,
    teacher_topk_log_probs: torch.Tensor,
    teacher_topk_ids: torch.Tensor,
    beta: float = 0.5,
    token_clip: float | None = None,
) -> torch.Tensor:
    """Per-token generalized JSD (docs/ALGORITHMS.md section 6) on the teacher's top-k support:
    (N, V), (N, k), (N, k) -> (N,).

    Both distributions are restricted to the k token ids the teacher ranks highest and renormalised there: the
    student's logits are gathered at those ids, the teacher's stored log-probs are renormalised by the same
    log-softmax (a shift, which softmax ignores). With k = V (every id once) this is exactly
    `generalized_jsd_loss(student_logits, teacher_logits, reduction="none")`; with k < V the mass outside the
    teacher's top k is ignored on both sides (the usual top-k distillation approximation: storing V log-probs per
    token is 0.6 MB at V = 150k). Gradients flow into student_logits only; temperature is already applied to both
    (verl's engine divides the logits by the rollout temperature before the loss sees them).
    """
    if student_logits.dim() != 2 or teacher_topk_log_probs.shape != teacher_topk_ids.shape:
        raise ValueError(
            f"need student (N, V) and teacher top-k log-probs / ids (N, k), got {tuple(student_logits.shape)}, "
            f"{tuple(teacher_topk_log_probs.shape)}, {tuple(teacher_topk_ids.shape)}"
        )
    if teacher_topk_ids.shape[0] != student_logits.shape[0]:
        raise ValueError(f"{teacher_topk_ids.shape[0]} teacher rows for {student_logits.shape[0]} student rows")
    student_k = student_logits.gather(-1, teacher_topk_ids.long())
    teacher_k = teacher_topk_log_probs.detach().to(student_k.dtype)
    return generalized_jsd_loss(student_k, teacher_k, beta=beta, token_clip=token_clip, reduction="none")
