"""SDPO, the Composer's channel 2: one step's teacher pass and either form's inputs (docs/ALGORITHMS.md section 6).

The sampled-token form ("Recipe B") is an advantage term, computed by the `grpo_composer` estimator
(verl_ext/advantage/grpo_composer.py: `sdpo_advantage_term`).

Papers: SDPO, Huebotter et al., arXiv 2601.20802; OPSD, Zhao et al., arXiv 2601.18734 (its sampled-token form).
The teacher is the same model scoring the student's own response tokens under the hint-augmented context, without
gradient. At error-site tokens (the post-hint tokens of the turn the hint targets):

    A_t += alpha_sdpo * (logp_teacher_t - logp_student_t)

logp_student_t is the rollout policy's log-prob of the sampled token (verl's `old_log_probs`). A positive term
means the hint made the sampled token more likely, so the update pushes towards it. Tokens outside the error mask
get nothing. Assumes teacher and student log-probs are aligned on the response tokens (see `hints.py`).

One step of the channel, in either form (`SdpoPlan`): the error sites' teacher rows (`hints.plan_teacher_rows`),
the (B, R) mask of their tokens, the rows the teacher scores (`teacher_rows`), and from the teacher's scores the
step's `SdpoInputs`: full_logit puts the teacher's top-k on the site tokens as batch columns for the actor loss
(`actor_loss.ComposerActorLoss`) with weight (rollout mini-batches) / (site tokens), so each mini-batch's term is
its sites' batchmean JSD in expectation; sampled_token hands the teacher's log-probs and the mask to the
`grpo_composer` estimator and measures `sdpo_kl_estimate`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from verl_ext.composer.hints import TeacherRow, place_teacher_values
from verl_ext.composer.jsd import generalized_jsd_loss
from verl_ext.composer.rows import pack_rows


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


def sdpo_kl_estimate(student_lp: torch.Tensor, teacher_lp: torch.Tensor, mask: torch.Tensor) -> float:
    """Masked mean of (student - teacher) log-prob at the sampled tokens; 0.0 with no masked token."""
    m = mask.bool()
    if not m.any():
        return 0.0
    return float((student_lp.float() - teacher_lp.float())[m].mean())


@dataclass(frozen=True)
class SdpoInputs:
    """Channel 2 of one step, in either form: its metrics (sdpo/*, and loss/sdpo for sampled_token) and its term's
    inputs, the batch columns the actor loss reads (full_logit: sdpo_topk_log_probs, sdpo_topk_ids, sdpo_weight) or
    the estimator's inputs (sampled_token: sdpo_teacher_log_probs, sdpo_error_mask). Empty: no term this step."""

    metrics: dict
    loss_columns: dict[str, torch.Tensor] = field(default_factory=dict)
    estimator_inputs: dict[str, torch.Tensor] | None = None


@dataclass(frozen=True)
class SdpoPlan:
    """One step's error sites: their teacher rows and the (B, R) bool mask of the tokens they target."""

    rows: tuple[TeacherRow, ...]
    error_mask: torch.Tensor

    @classmethod
    def of(cls, rows: Sequence[TeacherRow], response_mask: torch.Tensor) -> SdpoPlan:
        error_mask = torch.zeros_like(response_mask, dtype=torch.bool)
        for t in rows:
            error_mask[t.row] |= t.columns
        return cls(tuple(rows), error_mask)

    @property
    def metrics(self) -> dict[str, float]:
        return {"sdpo/error_sites": float(len(self.rows)), "sdpo/tokens": float(self.error_mask.sum())}

    def teacher_rows(self, response_mask: torch.Tensor, pad_token_id: int) -> dict[str, torch.Tensor]:
        """The rows the teacher scores, in verl's padded layout (rows.pack_rows) with the batch's response width:
        prefix (context + hint) and the student's tokens from the targeted turn on, whose response_mask is the
        rollout's own, shifted with them."""
        packed = pack_rows(
            [t.prefix for t in self.rows],
            [t.continuation for t in self.rows],
            pad_token_id,
            response_width=response_mask.shape[1],
        )
        packed["response_mask"] = torch.stack(
            [torch.cat([response_mask[t.row, t.start :], response_mask.new_zeros(t.start)]) for t in self.rows]
        )
        return packed

    def without_teacher(self, old_log_probs: torch.Tensor, full_logit: bool) -> SdpoInputs:
        """No site this step: no term (full_logit), or a teacher equal to zero under an empty mask (sampled_token)."""
        if full_logit:
            return SdpoInputs(self.metrics)
        no_teacher = {"sdpo_teacher_log_probs": torch.zeros_like(old_log_probs)}
        return SdpoInputs(self.metrics, estimator_inputs={**no_teacher, "sdpo_error_mask": self.error_mask})

    def full_logit(
        self,
        teacher_rows: dict[str, torch.Tensor],
        topk_log_probs: torch.Tensor,
        topk_ids: torch.Tensor,
        n_minibatches: float,
    ) -> SdpoInputs:
        """The actor loss's columns from the teacher's (n, R, k) top-k log-probs and ids: both on the site tokens,
        and sdpo_weight = n_minibatches / (site tokens) there."""
        b, width = self.error_mask.shape
        k = topk_log_probs.shape[-1]
        columns = {
            "sdpo_topk_log_probs": place_teacher_values(self.rows, topk_log_probs, torch.zeros(b, width, k)),
            "sdpo_topk_ids": place_teacher_values(self.rows, topk_ids, torch.zeros(b, width, k, dtype=torch.int32)),
            "sdpo_weight": self.error_mask.float() * (n_minibatches / float(self.error_mask.sum())),
        }
        return SdpoInputs(self._metrics_with(teacher_rows), loss_columns=columns)

    def sampled_token(
        self, teacher_rows: dict[str, torch.Tensor], teacher_log_probs: torch.Tensor, old_log_probs: torch.Tensor
    ) -> SdpoInputs:
        """The estimator's inputs from the teacher's (n, R) log-probs, and loss/sdpo = sdpo_kl_estimate."""
        teacher = place_teacher_values(self.rows, teacher_log_probs, torch.zeros_like(old_log_probs))
        metrics = {
            **self._metrics_with(teacher_rows),
            "loss/sdpo": sdpo_kl_estimate(old_log_probs, teacher, self.error_mask),
        }
        return SdpoInputs(
            metrics, estimator_inputs={"sdpo_teacher_log_probs": teacher, "sdpo_error_mask": self.error_mask}
        )

    def _metrics_with(self, teacher_rows: dict[str, torch.Tensor]) -> dict[str, float]:
        return {**self.metrics, "sdpo/teacher_tokens": float(teacher_rows["attention_mask"].sum())}
