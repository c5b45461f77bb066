"""Composer recipe, pure parts: GRPO + SDPO hint self-distillation + N-teacher trace-replay DPO
(docs/ALGORITHMS.md section 6).

    total_loss = grpo_loss + alpha_sdpo * sdpo_loss + beta_replay * replay_loss

Modules (the Ray trainer lives in recipe/composer/; the `grpo_composer` estimator of channels 1 and 2, with the
sampled-token SDPO term, in verl_ext/advantage/grpo_composer.py):
    jsd            generalized_jsd_loss: full-logit JSD, chunked over tokens
    sdpo           topk_generalized_jsd (full-logit SDPO on the teacher's top-k support); SdpoPlan: one step's error
                   sites, teacher rows and either form's inputs
    dpo            dpo_loss for the trace-replay pairs; dpo_row_losses (each row against its partner's fixed log-ratio)
    actor_loss     ComposerActorLoss: verl's ppo_loss + alpha_sdpo * JSD + beta_replay * DPO, installed on the actor
                   with set_loss_fn; also the teacher pass's top-k collection, and the update's means (update_means)
    replay         the replay rows' layout: slots, DPO columns, rows first on every rank; one step's block from its
                   scored pairs, the update batch, loss/grpo without the replay mini-batch
    rows           extra rows in verl's padded layout, padded to whole worker batches
    teacher_pool   parallel, cached, capped, fault-tolerant OpenAI-compatible teacher queries
    teacher_servers  real LM teachers: one vLLM OpenAI server per model on CPU, started, awaited, stopped (not
                   imported here: `python scripts/serve_teachers.py`): settings, processes, server, cli, and env
                   (the served teachers handed to a command, `serve_teachers.py ... -- COMMAND`, and read back by
                   `${served_teachers:}`)
    disagreement   teacher answers -> DPO pairs, JSONL writer/reader; a step's prompt groups and their step records;
                   the channel's running counts (agreement, pairs built)
    hints          error sites (env step metadata, error_kind, acc), hint templates, teacher rows and their alignment
    agent_trace    an agent episode as the gateway recorded it (each turn's request and reply, calls and results); the
                   calculator expression's normal form
    tool_errors    error sites from an agent's tool results, the agent unchanged (composer.sdpo.tool_error_rules)
    turn_replay    trace replay on an agent's turns: each turn's teacher request as the policy saw it, actions,
                   pairs, and the turns' tokens for their rows

Wiring the full-logit JSD into verl 0.9.1's actor: a registered policy loss only sees (B, T) log-probs of the
sampled tokens. Logits are reachable only in the engine's loss callable (`actor.set_loss_fn`), which verl's FSDP
engine also calls as a logits processor, `loss_fn(student_logits=(1, nnz, V), data=micro_batch)`, when the micro
batch's non-tensor flag `distillation_use_topk` is True; whatever per-token tensors it returns land in
`model_output` for the final `loss_fn(model_output=..., data=..., dp_group=...)` call (see
verl/workers/engine/fsdp/transformer_impl.py prepare_model_outputs and verl/trainer/distillation/losses.py).
`actor_loss.ComposerActorLoss` uses exactly that contract, for the update and for the teacher pass.
"""

from verl_ext.composer.disagreement import (
    DisagreementConfig,
    DPOPair,
    PairReader,
    PairWriter,
    StepRecord,
    extract_pairs,
    pair_from_step,
)
from verl_ext.composer.dpo import dpo_loss, sequence_log_probs
from verl_ext.composer.hints import (
    DEFAULT_HINT_TEMPLATES,
    ErrorSite,
    TeacherContext,
    build_teacher_context,
    error_sites_from_step_meta,
    math_error_sites,
    render_hint,
    response_token_log_probs,
    sdpo_loss_mask,
)
from verl_ext.composer.jsd import generalized_jsd_loss
from verl_ext.composer.teacher_pool import (
    TeacherAnswer,
    TeacherConfig,
    TeacherPool,
    TeacherPoolConfig,
    TeacherRequest,
)

__all__ = [
    "DEFAULT_HINT_TEMPLATES",
    "DPOPair",
    "DisagreementConfig",
    "ErrorSite",
    "PairReader",
    "PairWriter",
    "StepRecord",
    "TeacherAnswer",
    "TeacherConfig",
    "TeacherContext",
    "TeacherPool",
    "TeacherPoolConfig",
    "TeacherRequest",
    "build_teacher_context",
    "dpo_loss",
    "error_sites_from_step_meta",
    "extract_pairs",
    "generalized_jsd_loss",
    "math_error_sites",
    "pair_from_step",
    "render_hint",
    "response_token_log_probs",
    "sdpo_loss_mask",
    "sequence_log_probs",
]
