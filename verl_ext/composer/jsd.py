"""Generalized Jensen-Shannon divergence between student and teacher logits, chunked over tokens.

Paper: GKD, Agarwal et al., "On-Policy Distillation of Language Models", arXiv 2306.13649; used for hint
self-distillation by OPSD (Zhao et al., arXiv 2601.18734, `generalized_jsd_loss`) and the Composer recipe
(docs/ALGORITHMS.md section 6).

Per token, over the vocabulary, with S = log_softmax(student_logits / T) and Tt = log_softmax(teacher_logits / T):

    beta = 0:  sum_v exp(Tt_v) (Tt_v - S_v)                          forward KL(teacher || student)
    beta = 1:  sum_v exp(S_v) (S_v - Tt_v)                           reverse KL(student || teacher)
    else:      M = log(beta exp(Tt) + (1 - beta) exp(S))
               sum_v beta exp(Tt_v)(Tt_v - M_v) + (1 - beta) exp(S_v)(S_v - M_v)

`token_clip` clips each per-vocabulary summand from above before the sum over v (the reference behaviour).
Tokens whose label is -100 (or False in a boolean mask) are excluded. Reductions:
    batchmean: sum over valid tokens and vocabulary / number of valid tokens (0 when no token is valid, so a
               batch without error sites adds nothing instead of NaN)
    sum:       sum over valid tokens and vocabulary
    mean:      sum / (valid tokens * vocabulary), as torch's kl_div "mean"
    none:      per-token loss (summed over the vocabulary), shaped like the logits' leading dims, 0 at masked
               positions. (TRL's "none" keeps the vocabulary axis; that is a tokens x vocab tensor, which this
               module exists to avoid.)

Memory: at vocabulary 150k, one (tokens x vocab) fp32 tensor is 0.6 MB per token, and the plain autograd form
allocates about a dozen of them for forward + backward. Here only valid tokens are processed, `chunk_size` at a
time, in float32 (float64 inputs stay float64); each chunk's loss and its gradient w.r.t. the chunk's logits are
computed together in the forward pass (local autograd on the chunk), and the gradient rows are written into one
preallocated buffer shaped like the logits. Backward only scales that buffer in place by the incoming per-token
gradient. So at any time at most one chunk of intermediates is alive, and backward allocates nothing of vocabulary
size (scripts/bench_composer.py: 4.4x-8.4x lower peak at 256-1024 tokens). Logits are indexed where they are, so a
non-contiguous view (logits[:, a:b]) is never copied whole. Limits: the gradient buffer is consumed by the first
backward (a second backward through the same graph raises); double backward is not supported; the gradient is
computed in forward whenever an input requires grad, even if backward never runs.
"""

from __future__ import annotations

import math

import torch

IGNORE_INDEX = -100
_REDUCTIONS = ("batchmean", "sum", "mean", "none")
# Default chunk: about 2**22 logits (16 MiB in fp32) per tensor; 27 tokens at vocabulary 150k. A chunk keeps about
# 15 such tensors alive while its loss and gradient are computed, so ~250 MiB, and each chunk is still large enough
# that the per-chunk overhead is negligible.
_DEFAULT_CHUNK_ELEMENTS = 1 << 22


def generalized_jsd_loss(
    student_logits: torch.Tensor,
    teacher_logits: torch.Tensor,
    labels: torch.Tensor | None = None,
    beta: float = 0.5,
    temperature: float = 1.0,
    token_clip: float | None = None,
    reduction: str = "batchmean",
    chunk_size: int | None = None,
) -> torch.Tensor:
    """Generalized JSD between student and teacher next-token distributions (see module docstring).

    Args:
        student_logits: (..., V) logits; gradients flow into it.
        teacher_logits: (..., V) logits at the same positions (usually detached: the hint-conditioned teacher).
        labels: (...) integer labels with -100 at excluded positions, or a boolean mask (True = included), or None.
        beta: 0 forward KL(teacher||student), 1 reverse KL(student||teacher), in between the beta-mixture JSD.
        temperature: both logit sets are divided by it before the softmax.
        token_clip: if set, every per-vocabulary summand is clipped to at most this value.
        reduction: "batchmean" (recommended), "sum", "mean" or "none".
        chunk_size: tokens per chunk; None picks about 2**22 logits per chunk.
    """
    _check_args(student_logits, teacher_logits, labels, beta, temperature, token_clip, reduction, chunk_size)
    vocab = student_logits.shape[-1]
    # Positions (n_valid, ndim - 1) index the logits as they are: no reshape, which would copy a non-contiguous
    # (tokens x vocab) view such as logits[:, start:end] in full.
    positions = _valid_mask(labels, student_logits.shape[:-1], student_logits.device).nonzero()
    chunk = chunk_size or max(1, _DEFAULT_CHUNK_ELEMENTS // vocab)
    params = (float(beta), float(temperature), None if token_clip is None else float(token_clip), chunk)

    needs_grad = torch.is_grad_enabled() and (student_logits.requires_grad or teacher_logits.requires_grad)
    if needs_grad:
        per_token = _ChunkedJSD.apply(student_logits, teacher_logits, positions, params)
    else:
        per_token, _, _ = _chunked_forward(student_logits, teacher_logits, positions, params, want_grads=(False, False))

    n_valid = positions.shape[0]
    if reduction == "none":
        return per_token
    total = per_token.sum()
    if reduction == "sum":
        return total
    if reduction == "batchmean":
        return total / max(n_valid, 1)
    return total / max(n_valid * vocab, 1)  # "mean"


def _check_args(student, teacher, labels, beta, temperature, token_clip, reduction, chunk_size):
    if student.shape != teacher.shape:
        raise ValueError(f"student_logits {tuple(student.shape)} and teacher_logits {tuple(teacher.shape)} differ")
    if student.dim() < 2:
        raise ValueError(f"logits need a vocabulary axis, got shape {tuple(student.shape)}")
    if not student.is_floating_point() or not teacher.is_floating_point():
        raise TypeError("logits must be floating point tensors")
    if labels is not None and labels.shape != student.shape[:-1]:
        raise ValueError(f"labels shape {tuple(labels.shape)} != logits leading shape {tuple(student.shape[:-1])}")
    if labels is not None and labels.is_floating_point():
        raise TypeError("labels must be integer labels (-100 = ignore) or a boolean mask, not floats")
    if not 0.0 <= beta <= 1.0:
        raise ValueError(f"beta must be in [0, 1], got {beta}")
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    if token_clip is not None and not math.isfinite(token_clip):
        raise ValueError(f"token_clip must be finite or None, got {token_clip}")
    if reduction not in _REDUCTIONS:
        raise ValueError(f"reduction must be one of {_REDUCTIONS}, got {reduction!r}")
    if chunk_size is not None and (not isinstance(chunk_size, int) or chunk_size < 1):
        raise ValueError(f"chunk_size must be a positive int or None, got {chunk_size!r}")


def _valid_mask(labels, lead_shape, device) -> torch.Tensor:
    if labels is None:
        return torch.ones(lead_shape, dtype=torch.bool, device=device)
    if labels.dtype == torch.bool:
        return labels.to(device)
    return (labels != IGNORE_INDEX).to(device)


def _jsd_rows(student: torch.Tensor, teacher: torch.Tensor, beta: float, temperature: float, token_clip):
    """Per-row generalized JSD of (rows, V) logits; the dense formula, used on one chunk at a time."""
    if temperature != 1.0:  # skip the division at T = 1: two fewer chunk-sized tensors
        student, teacher = student / temperature, teacher / temperature
    s = torch.log_softmax(student, dim=-1)
    t = torch.log_softmax(teacher, dim=-1)
    if beta == 0.0:
        terms = t.exp() * (t - s)
    elif beta == 1.0:
        terms = s.exp() * (s - t)
    else:
        m = torch.logaddexp(t + math.log(beta), s + math.log1p(-beta))
        terms = beta * t.exp() * (t - m) + (1.0 - beta) * s.exp() * (s - m)
    if token_clip is not None:
        terms = terms.clamp(max=token_clip)
    return terms.sum(dim=-1)


def _chunked_forward(student, teacher, positions, params, want_grads):
    """Per-token losses (shaped like the leading dims) and, if asked, d loss_i / d logits_i for each input."""
    beta, temperature, token_clip, chunk = params
    work = torch.float64 if student.dtype == torch.float64 else torch.float32  # never compute below fp32
    per_token = torch.zeros(student.shape[:-1], dtype=work, device=student.device)
    grads = [torch.zeros_like(x) if want else None for x, want in zip((student, teacher), want_grads)]
    for start in range(0, positions.shape[0], chunk):
        index = tuple(positions[start : start + chunk].T)
        # advanced indexing copies only this chunk's rows; the upcast keeps bf16 inputs accurate.
        s = student.detach()[index].to(work).requires_grad_(want_grads[0])
        t = teacher.detach()[index].to(work).requires_grad_(want_grads[1])
        with torch.enable_grad() if any(want_grads) else torch.no_grad():
            rows = _jsd_rows(s, t, beta, temperature, token_clip)
            if any(want_grads):
                leaves = [x for x, want in zip((s, t), want_grads) if want]
                chunk_grads = iter(torch.autograd.grad(rows.sum(), leaves))
                for buf, want in zip(grads, want_grads):
                    if want:
                        buf[index] = next(chunk_grads).to(buf.dtype)
        per_token[index] = rows.detach()
    return per_token, grads[0], grads[1]


class _ChunkedJSD(torch.autograd.Function):
    """Per-token JSD whose gradient is computed chunk by chunk in forward (see module docstring)."""

    @staticmethod
    def forward(ctx, student, teacher, positions, params):
        want = (ctx.needs_input_grad[0], ctx.needs_input_grad[1])
        per_token, grad_s, grad_t = _chunked_forward(student, teacher, positions, params, want)
        ctx.grads = [grad_s, grad_t]
        return per_token

    @staticmethod
    def backward(ctx, grad_per_token):
        if ctx.grads is None:
            raise RuntimeError("generalized_jsd_loss: backward called twice; its gradient buffer is used in place")
        scale = grad_per_token.unsqueeze(-1)
        out = [None if g is None else g.mul_(scale.to(g.dtype)) for g in ctx.grads]
        ctx.grads = None  # hand the buffers to autograd; keep no reference
        return out[0], out[1], None, None
