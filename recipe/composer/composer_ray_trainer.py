"""RayComposerTrainer: GRPO + SDPO hint self-distillation + N-teacher trace-replay DPO in one verl step.

    total = grpo_loss + alpha_sdpo * sdpo_loss + beta_replay * replay_loss

One training step (on top of ExtRayPPOTrainer.train_on_batch: reward -> old/ref log-probs -> advantages -> update):

1. GRPO (channel 1): the `grpo_composer` estimator's group-relative advantage; the actor's PPO loss is `loss/grpo`.
2. SDPO (channel 2), only if alpha_sdpo > 0. Error sites come from the batch (hints.error_sites_for_batch): the
   environment's per-step metadata (`step_metas`: an error at step t targets assistant turn t + 1), an
   `error_kind` column from the reward function, or a failed answer (`acc` == 0: hint "The correct answer is
   <ground truth>", or with `sibling_solution` a successful sibling's response). The hint goes into the context
   just before the targeted turn (hints.build_teacher_context), and the actor scores the student's tokens from that
   turn on under it, without gradient (one extra forward pass per error site). Only the targeted turn's tokens
   carry the term. Two forms (composer.sdpo.form):
   - `full_logit` (default): the teacher pass stores the top-k log-probs and ids of each site token
     (`teacher_topk`; null = the whole vocabulary) and the actor loss (verl_ext/composer/actor_loss.py, installed
     with set_loss_fn) adds alpha_sdpo * generalized JSD(student logits, teacher top-k) at those tokens.
     `loss/sdpo` is the batchmean JSD measured during the update.
   - `sampled_token` (Recipe B): A_t += alpha_sdpo * (logp_teacher_t - logp_student_t) through the estimator;
     `loss/sdpo` is the masked mean of (logp_student - logp_teacher), the sampled-token estimate of
     KL(student || teacher).
3. Trace replay (channel 3), only if beta_replay > 0: after the step's rewards, each prompt group goes to the
   teacher pool (submit_many: a Future, never waited on); at a later step the answers that have arrived become DPO
   pairs by the disagreement rule (answers compared after \\boxed{} extraction), appended to `pairs_path`, and up to
   `max_pairs_per_step` queued pairs are used: chosen/rejected responses are tokenized after their prompt, scored by
   the actor and the reference worker (`loss/replay_dpo` = dpo_loss before the update), and enter the update as
   one extra mini-batch, first on every rank (verl_ext/composer/replay.py), whose rows carry the DPO columns; the
   actor loss adds beta_replay * DPO loss (zero advantages: the PPO term ignores them). A step with pairs makes one
   more optimizer step than a step without.

alpha_sdpo = 0 skips the teacher pass; beta_replay = 0 creates no teacher pool and adds no rows; with both 0 the
actor keeps verl's own loss function and the step is plain GRPO.

Logged per step: loss/grpo (= actor/pg_loss averaged over the rollout mini-batches; actor/pg_loss itself includes
the replay mini-batch's zero),
loss/sdpo, loss/replay_dpo, loss/total = grpo + alpha_sdpo * sdpo + beta_replay * replay_dpo, sdpo/error_sites,
sdpo/tokens (site tokens), sdpo/teacher_tokens (tokens the teacher pass scored), replay/pairs_used,
replay/pairs_queued, replay/dpo_loss_update (the DPO loss the actor saw),
replay/reward_margin..., teacher/calls, teacher/failures, teacher/cache_hits, teacher/tokens,
teacher/pending_queries; timings timing_s/sdpo_teacher and timing_s/replay.

Pending teacher queries are not checkpointed (queued pairs and the pairs file offset are): after a restart their
answers come from the teacher cache only if the same (trace, step) is asked again.
"""

from __future__ import annotations

import hashlib
import json
from collections import deque
from dataclasses import asdict, dataclass, field

import numpy as np
import torch
from verl import DataProto
from verl.trainer.ppo import core_algos
from verl.utils import tensordict_utils as tu
from verl.utils.config import omega_conf_to_dataclass
from verl.utils.debug import marked_timer
from verl.workers.utils.padding import left_right_2_no_padding, no_padding_2_padding

from recipe.composer.config_check import FIDELITY, composer_settings
from verl_ext.agent.trainer import AgentEpisodesMixin
from verl_ext.composer.actor_loss import DPO_COLUMNS, SDPO_COLUMNS, TOPK_PREFIX, ComposerActorLoss, unpack_topk
from verl_ext.composer.disagreement import (
    DisagreementConfig,
    DPOPair,
    PairReader,
    PairWriter,
    StepRecord,
    default_normalize,
    extract_pairs,
)
from verl_ext.composer.dpo import dpo_loss, sequence_log_probs
from verl_ext.composer.hints import error_sites_for_batch, place_teacher_values, plan_teacher_rows
from verl_ext.composer.replay import replay_columns, rows_first_per_rank
from verl_ext.composer.rows import pack_rows, valid_tokens
from verl_ext.composer.teacher_pool import TeacherPool, TeacherRequest
from verl_ext.reward.answer_extraction import last_boxed
from verl_ext.trainer.ppo_trainer import ExtRayPPOTrainer


def answer_key(text: str) -> str:
    """Comparison key of an action: the last \\boxed{} content if any, else the whole text (normalised)."""
    return default_normalize(last_boxed(text) or text)


def composer_advantages(batch: DataProto, algo, sdpo: dict | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Channel 1 (+ the sampled-token channel 2 when `sdpo` holds sdpo_teacher_log_probs / sdpo_error_mask): the
    grpo_composer estimator on a batch with token_level_rewards, response_mask, uid (and old_log_probs for SDPO)."""
    fn = core_algos.get_adv_estimator_fn("grpo_composer")
    extra = {}
    if sdpo is not None:
        extra = dict(sdpo, old_log_probs=batch.batch["old_log_probs"])
    return fn(
        token_level_rewards=batch.batch["token_level_rewards"],
        response_mask=batch.batch["response_mask"],
        index=batch.non_tensor_batch["uid"],
        config=algo,
        **extra,
    )


def sdpo_kl_estimate(student_lp: torch.Tensor, teacher_lp: torch.Tensor, mask: torch.Tensor) -> float:
    """Masked mean of (student - teacher) log-prob at the sampled tokens; 0.0 with no masked token."""
    m = mask.bool()
    if not m.any():
        return 0.0
    return float((student_lp.float() - teacher_lp.float())[m].mean())


def update_batch(batch: DataProto, block: DataProto, n_ranks: int) -> DataProto:
    """The actor-update batch: `block` (the replay rows) and the step's rows, each rank's chunk starting with its
    share of the block (replay.rows_first_per_rank). Only the columns the update reads are kept: the block's, and
    the SDPO columns the step's rows carry. A column one side lacks is zero there if it is a loss-term column (the
    DPO columns on the step's rows, the SDPO columns on the block), else a KeyError."""
    keys = list(block.batch.keys()) + [k for k in SDPO_COLUMNS if k in batch.batch.keys()]
    optional = {*DPO_COLUMNS, *SDPO_COLUMNS}
    missing = [k for k in keys if k not in batch.batch.keys() and k not in optional]
    if missing:
        raise KeyError(f"the training batch lacks columns {missing} that the extra rows carry")

    def column(side: DataProto, other: DataProto, key: str) -> torch.Tensor:
        if key in side.batch.keys():
            return side.batch[key]
        like = other.batch[key]
        return torch.zeros((len(side), *like.shape[1:]), dtype=like.dtype)

    tensors = {}
    for k in keys:
        head, tail = column(block, batch, k), column(batch, block, k)
        tensors[k] = torch.cat([head.to(tail.dtype), tail])
    order = rows_first_per_rank(len(block), len(batch), n_ranks)
    merged = DataProto.from_dict(tensors={k: v[order] for k, v in tensors.items()})
    merged.meta_info = {k: v for k, v in batch.meta_info.items() if k != "global_token_num"}
    merged.meta_info["global_token_num"] = merged.batch["attention_mask"].sum(-1).tolist()
    return merged


@dataclass
class ComposerStep:
    """What one step's parts hand on to its metrics row: created by `train_on_batch`, filled by its phases."""

    timing_raw: dict
    channel: dict = field(default_factory=dict)  # the channels' metrics: loss/sdpo, sdpo/*, replay/*, teacher/*
    replay_block: DataProto | None = None  # the replay rows of this step's actor update (None: no pairs)
    grpo_loss: float | None = None  # the PPO loss without the replay mini-batch (see _update_actor)


@dataclass
class SdpoInputs:
    """Channel 2 of one step, in either form: its metrics (sdpo/*, and loss/sdpo for sampled_token) and its term's
    inputs, the batch columns the actor loss reads (full_logit: sdpo_topk_log_probs, sdpo_topk_ids, sdpo_weight) or
    the estimator's inputs (sampled_token: sdpo_teacher_log_probs, sdpo_error_mask). Empty: no term this step."""

    metrics: dict
    loss_columns: dict[str, torch.Tensor] = field(default_factory=dict)
    estimator_inputs: dict[str, torch.Tensor] | None = None


class RayComposerTrainer(ExtRayPPOTrainer):
    fidelity = FIDELITY

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.settings = composer_settings(self.config)
        self.pool: TeacherPool | None = None
        self.pair_writer: PairWriter | None = None
        self.pair_reader: PairReader | None = None
        if self.settings.replay_on:
            self.pool = TeacherPool(self.settings.pool)
            self.pair_writer = PairWriter(self.settings.pairs_path)
            self.pair_reader = PairReader(self.settings.pairs_path)
            self.disagreement = DisagreementConfig(
                rule=self.settings.rule, min_agree=self.settings.min_agree, normalize=answer_key
            )
        self._pending: list = []  # (Future, per-request contexts) of teacher queries not yet turned into pairs
        self._pair_queue: deque[DPOPair] = deque()
        # The step being trained, while train_on_batch runs: the base step calls `_advantages` and `_update_actor`
        # with verl's arguments, so the two reach it here.
        self._step: ComposerStep | None = None

    @property
    def full_logit_sdpo(self) -> bool:
        return self.settings.sdpo_on and self.settings.sdpo_form == "full_logit"

    def init_workers(self):
        super().init_workers()
        if self.full_logit_sdpo or self.settings.replay_on:
            s = self.settings
            self.actor_rollout_wg.set_loss_fn(
                ComposerActorLoss(
                    omega_conf_to_dataclass(self.config.actor_rollout_ref.actor),
                    alpha_sdpo=s.alpha_sdpo if self.full_logit_sdpo else 0.0,
                    jsd_beta=s.jsd_beta,
                    token_clip=s.token_clip,
                    beta_replay=s.beta_replay,
                    beta_dpo=s.beta_dpo,
                )
            )

    def actor_update_flags(self) -> dict:
        # verl's engine calls the loss function as a logits processor only with this flag (actor_loss.py).
        return {"distillation_use_topk": True} if self.full_logit_sdpo else {}

    # ------------------------------------------------------------------ checkpointed state
    def extra_state_dict(self) -> dict:
        state = super().extra_state_dict()
        if self.pair_reader is not None:
            state["replay"] = {"offset": self.pair_reader.offset, "queue": [asdict(p) for p in self._pair_queue]}
        return state

    def load_extra_state_dict(self, state: dict) -> None:
        super().load_extra_state_dict(state)
        replay = state.get("replay")
        if replay and self.pair_reader is not None:
            self.pair_reader.offset = int(replay["offset"])
            self._pair_queue = deque(DPOPair(**p) for p in replay["queue"])

    # ------------------------------------------------------------------ the step
    def train_on_batch(self, batch: DataProto, metrics: dict, timing_raw: dict) -> DataProto:
        step = self._step = ComposerStep(timing_raw)
        try:
            batch = super().train_on_batch(batch, metrics, timing_raw)
        finally:
            self._step = None
        metrics.update(self._loss_metrics(step, metrics))
        return batch

    def _loss_metrics(self, step: ComposerStep, metrics: dict) -> dict:
        """The channels' metrics and loss/grpo, loss/total; the actor loss's sums (popped from `metrics`) become
        loss/sdpo (full_logit) and replay/dpo_loss_update."""
        jsd_sum = metrics.pop("actor/composer/sdpo_jsd_sum", None)
        jsd_tokens = metrics.pop("actor/composer/sdpo_tokens", None)
        if self.full_logit_sdpo:
            step.channel["loss/sdpo"] = float(jsd_sum) / float(jsd_tokens) if jsd_tokens else 0.0
        dpo_sum, dpo_pairs = (
            metrics.pop("actor/composer/dpo_loss_sum", None),
            metrics.pop("actor/composer/dpo_pairs", None),
        )
        if dpo_pairs:
            step.channel["replay/dpo_loss_update"] = float(dpo_sum) / float(dpo_pairs)
        grpo = step.grpo_loss if step.grpo_loss is not None else float(metrics.get("actor/pg_loss", 0.0))
        total = (
            grpo
            + self.settings.alpha_sdpo * step.channel["loss/sdpo"]
            + self.settings.beta_replay * step.channel["loss/replay_dpo"]
        )
        return {**step.channel, "loss/grpo": grpo, "loss/total": total}

    def _advantages(self, batch: DataProto, metrics: dict) -> DataProto:
        """Channel 1 with channel 2's term (the SDPO teacher pass first), then channel 3's teacher step: the replay
        rows need this step's reference log-probs and rollout correction, and the actor before its update."""
        step = self._step
        step.channel.update({"loss/sdpo": 0.0, "sdpo/error_sites": 0.0, "sdpo/tokens": 0.0, "sdpo/teacher_tokens": 0.0})
        sdpo = SdpoInputs(metrics={})
        if self.settings.sdpo_on:
            with marked_timer("sdpo_teacher", step.timing_raw, color="purple"):
                sdpo = self._sdpo_inputs(batch)
        step.channel.update(sdpo.metrics)
        for key, column in sdpo.loss_columns.items():
            batch.batch[key] = column
        algo = self.config.algorithm
        if self.full_logit_sdpo:  # the term is in the actor loss, not in the advantages
            algo = {"norm_adv_by_std_in_grpo": algo.get("norm_adv_by_std_in_grpo", True), "alpha_sdpo": 0.0}
        adv, ret = composer_advantages(batch, algo, sdpo.estimator_inputs)
        batch.batch["advantages"], batch.batch["returns"] = adv, ret
        step.channel.update({"loss/replay_dpo": 0.0, "replay/pairs_used": 0.0})
        if self.settings.replay_on:
            step.replay_block, teacher_metrics = self._teacher_step(batch, step.timing_raw)
            step.channel.update(teacher_metrics)
        return batch

    def _update_actor(self, batch: DataProto) -> DataProto:
        step = self._step
        if step is None or step.replay_block is None:
            return super()._update_actor(batch)
        merged = update_batch(batch, step.replay_block, self.actor_rollout_wg.world_size)
        output = super()._update_actor(merged)
        # verl reports pg_loss per mini-batch; the replay mini-batch (first of each epoch) has zero advantages, so
        # loss/grpo averages the others only.
        pg = output.meta_info["metrics"].get("actor/pg_loss")
        per_epoch = len(merged) // (
            int(self.config.actor_rollout_ref.actor.ppo_mini_batch_size) * self.responses_per_prompt
        )
        if isinstance(pg, list) and per_epoch > 1 and len(pg) % per_epoch == 0:
            step.grpo_loss = float(np.mean([v for i, v in enumerate(pg) if i % per_epoch]))
        return output

    def fit(self):
        try:
            return super().fit()
        finally:
            if self.pool is not None:
                self.pool.close()
                self.pair_writer.close()

    # ------------------------------------------------------------------ worker calls on extra rows
    def _padded_rows(self, tensors: dict[str, torch.Tensor], ref: bool = False) -> tuple[DataProto, int]:
        """Extra rows as a DataProto for the actor's (or reference's) log-prob call, and their count before padding.

        Rows are padded (repeating the last) to a multiple of worker count x log-prob micro-batch size: verl's
        dispatch splits the batch evenly over data-parallel ranks and, without dynamic batch sizes, its engine
        needs whole micro-batches. The padded rows cost forward passes too.
        """
        n = tensors["input_ids"].shape[0]
        wg = self.actor_rollout_wg if (not ref or self.ref_in_actor) else self.ref_policy_wg
        section = self.config.actor_rollout_ref.ref if ref else self.config.actor_rollout_ref.rollout
        micro = (
            1
            if section.get("log_prob_use_dynamic_bsz", False)
            else int(section.get("log_prob_micro_batch_size_per_gpu") or 1)
        )
        pad = (-n) % (wg.world_size * micro)
        if pad:
            tensors = {k: torch.cat([v, v[-1:].expand(pad, *v.shape[1:])]) for k, v in tensors.items()}
        meta = {
            "temperature": self.config.actor_rollout_ref.rollout.temperature,
            "global_token_num": tensors["attention_mask"].sum(-1).tolist(),
            "images_seqlens": [],
        }
        return DataProto.from_dict(tensors=dict(tensors), meta_info=meta), n

    def _actor_forward(self, tensors: dict[str, torch.Tensor], **flags):
        """The actor's compute_log_prob on extra rows, without gradient: (output TensorDict, input TensorDict, n)."""
        data, n = self._padded_rows(tensors)
        td = left_right_2_no_padding(data.to_tensordict())
        tu.assign_non_tensor(td, **{"calculate_entropy": False, "compute_loss": False, **flags})
        return self.actor_rollout_wg.compute_log_prob(td), td, n

    def _score_rows(self, tensors: dict[str, torch.Tensor], ref: bool = False) -> torch.Tensor:
        """(n, R) log-probs of the rows' response tokens: the actor (current policy, no gradient) or the reference."""
        if ref:
            data, n = self._padded_rows(tensors, ref=True)
            return self._compute_ref_log_prob(data).batch["ref_log_prob"][:n]
        out, td, n = self._actor_forward(tensors)
        return no_padding_2_padding(tu.get(out, "log_probs"), td).float()[:n]

    def _score_topk(self, tensors: dict[str, torch.Tensor], k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(n, R, k) top-k log-probs and ids at the rows' response positions (k <= 0: the whole vocabulary), from
        the actor's loss function in collect mode (actor_loss.py)."""
        out, td, n = self._actor_forward(
            tensors, compute_loss=True, distillation_use_topk=True, composer_collect_topk=k
        )
        width = sum(1 for key in out.keys() if key.startswith(TOPK_PREFIX))
        # One (nnz, k) tensor through no_padding_2_padding (it keeps trailing dims) instead of k slicing loops.
        flat = torch.stack([out[f"{TOPK_PREFIX}{j}"].values() for j in range(width)], -1)
        lp, ids = unpack_topk(no_padding_2_padding(flat, td)[:n])
        return lp, ids.to(torch.int32)

    # ------------------------------------------------------------------ channel 2: SDPO
    def _sdpo_inputs(self, batch: DataProto) -> SdpoInputs:
        """Error sites -> teacher rows -> the full-logit columns or the sampled-token inputs."""
        nt = batch.non_tensor_batch
        responses, mask = batch.batch["responses"], batch.batch["response_mask"]
        prompt_width = batch.batch["prompts"].shape[1]
        attn = batch.batch["attention_mask"]
        texts = None
        if self.settings.sibling_solution:
            texts = self.tokenizer.batch_decode(
                responses.masked_fill(~mask.bool(), self.tokenizer.pad_token_id), skip_special_tokens=True
            )
        sites = error_sites_for_batch(nt, texts)
        plan = plan_teacher_rows(
            valid_tokens(batch.batch["prompts"], attn[:, :prompt_width]),
            valid_tokens(responses, attn[:, prompt_width:]),
            mask,
            sites,
            self.tokenizer,
            mode=self.settings.hint_mode,
        )
        error_mask = torch.zeros_like(mask, dtype=torch.bool)
        for t in plan:
            error_mask[t.row] |= t.columns
        sdpo_metrics = {"sdpo/error_sites": float(len(plan)), "sdpo/tokens": float(error_mask.sum())}
        if not plan:
            if self.full_logit_sdpo:
                return SdpoInputs(sdpo_metrics)
            no_teacher = {"sdpo_teacher_log_probs": torch.zeros_like(batch.batch["old_log_probs"])}
            return SdpoInputs(sdpo_metrics, estimator_inputs={**no_teacher, "sdpo_error_mask": error_mask})
        packed = pack_rows(
            [t.prefix for t in plan],
            [t.continuation for t in plan],
            self.tokenizer.pad_token_id,
            response_width=responses.shape[1],
        )
        packed["response_mask"] = torch.stack(
            [  # the rollout's own mask, shifted with the continuation
                torch.cat([mask[t.row, t.start :], mask.new_zeros(t.start)]) for t in plan
            ]
        )
        sdpo_metrics["sdpo/teacher_tokens"] = float(packed["attention_mask"].sum())
        if self.full_logit_sdpo:
            lp, ids = self._score_topk(packed, self.settings.teacher_topk)
            b, width, k = len(batch), responses.shape[1], lp.shape[-1]
            # Each rollout mini-batch's term is then its sites' batchmean JSD in expectation (actor_loss.py).
            n_minibatches = len(batch) / (
                int(self.config.actor_rollout_ref.actor.ppo_mini_batch_size) * self.responses_per_prompt
            )
            columns = {
                "sdpo_topk_log_probs": place_teacher_values(plan, lp, torch.zeros(b, width, k)),
                "sdpo_topk_ids": place_teacher_values(plan, ids, torch.zeros(b, width, k, dtype=torch.int32)),
                "sdpo_weight": error_mask.float() * (n_minibatches / float(error_mask.sum())),
            }
            return SdpoInputs(sdpo_metrics, loss_columns=columns)
        teacher = place_teacher_values(plan, self._score_rows(packed), torch.zeros_like(batch.batch["old_log_probs"]))
        sdpo_metrics["loss/sdpo"] = sdpo_kl_estimate(batch.batch["old_log_probs"], teacher, error_mask)
        return SdpoInputs(
            sdpo_metrics, estimator_inputs={"sdpo_teacher_log_probs": teacher, "sdpo_error_mask": error_mask}
        )

    # ------------------------------------------------------------------ channel 3: trace replay
    def _teacher_step(self, batch: DataProto, timing_raw: dict) -> tuple[DataProto | None, dict]:
        """The teacher answers that have arrived become DPO pairs, up to max_pairs_per_step queued pairs become this
        step's replay rows (None without pairs), and this step's groups go to the teacher pool, after the pairs of
        earlier steps: never waited on here. Returns the rows and the channel's metrics."""
        with marked_timer("replay", timing_raw, color="orange"):
            self._collect_teacher_answers()
            block, replay_metrics = self._replay_rows(batch)
            self._submit_teacher_queries(batch)
        stats = self.pool.stats()
        return block, {
            **replay_metrics,
            "teacher/calls": float(stats["calls"]),
            "teacher/failures": float(sum(stats["failures"].values())),
            "teacher/cache_hits": float(stats["cache_hits"]),
            "teacher/tokens": float(stats["tokens"]),
            "teacher/pending_queries": float(len(self._pending)),
            "replay/pairs_queued": float(len(self._pair_queue)),
        }

    def _submit_teacher_queries(self, batch: DataProto) -> None:
        """One teacher request per prompt group of this step; the answers are collected at a later step."""
        nt = batch.non_tensor_batch
        attn, prompt_width = batch.batch["attention_mask"], batch.batch["prompts"].shape[1]
        prompt_ids = valid_tokens(batch.batch["prompts"], attn[:, :prompt_width])
        mask = batch.batch["response_mask"].bool()
        texts = self.tokenizer.batch_decode(
            batch.batch["responses"].masked_fill(~mask, self.tokenizer.pad_token_id), skip_special_tokens=True
        )
        groups: dict[str, dict] = {}
        for i, uid in enumerate(nt["uid"]):
            if uid not in groups:
                messages = [dict(m) for m in nt["raw_prompt"][i]]
                trace_id = hashlib.sha1(json.dumps(messages, sort_keys=True).encode()).hexdigest()[:16]
                groups[uid] = {"trace_id": trace_id, "messages": messages, "ids": prompt_ids[i], "responses": []}
            groups[uid]["responses"].append(texts[i])
        contexts = list(groups.values())
        requests = [TeacherRequest(c["trace_id"], self.global_steps, c["messages"]) for c in contexts]
        self._pending.append((self.pool.submit_many(requests), self.global_steps, contexts))

    def _collect_teacher_answers(self) -> None:
        """Turn the teacher answers that have arrived into DPO pairs (one per distinct wrong student answer)."""
        still = []
        for future, step, contexts in self._pending:
            if not future.done():
                still.append((future, step, contexts))
                continue
            records = []
            for ctx, answers in zip(contexts, future.result()):
                teacher_texts = {name: (a.text if a is not None else None) for name, a in answers.items()}
                seen = set()
                for text in ctx["responses"]:
                    if answer_key(text) in seen:
                        continue
                    seen.add(answer_key(text))
                    records.append(
                        StepRecord(
                            ctx["trace_id"],
                            step,
                            text,
                            teacher_texts,
                            prompt={"messages": ctx["messages"], "ids": ctx["ids"]},
                        )
                    )
            self.pair_writer.write(extract_pairs(records, self.disagreement))
        self._pending = still
        self._pair_queue.extend(self.pair_reader.read_new())

    def _replay_rows(self, batch: DataProto) -> tuple[DataProto | None, dict]:
        """Up to max_pairs_per_step queued pairs as one extra actor mini-batch with DPO columns, and their metrics
        (the DPO loss before the update); (None, {}) with no queued pair."""
        n_pairs = min(len(self._pair_queue), self.settings.max_pairs_per_step)
        if n_pairs == 0:
            return None, {}
        pairs = [self._pair_queue.popleft() for _ in range(n_pairs)]
        width_p, width_r = batch.batch["prompts"].shape[1], batch.batch["responses"].shape[1]
        eos = self.tokenizer.eos_token_id
        prefixes, responses = [], []
        for pair in pairs:  # rows: chosen_0, rejected_0, chosen_1, ...
            for text in (pair.chosen, pair.rejected):
                prefixes.append(pair.prompt["ids"][-width_p:])
                responses.append((self.tokenizer.encode(text, add_special_tokens=False) + [eos])[:width_r])
        packed = pack_rows(
            prefixes, responses, self.tokenizer.pad_token_id, response_width=width_r, prefix_width=width_p
        )
        policy = self._score_rows(packed)
        ref = self._score_rows(packed, ref=True)
        mask = packed["response_mask"]
        seq_pol, seq_ref = sequence_log_probs(policy, mask), sequence_log_probs(ref, mask)
        loss, dpo_metrics = dpo_loss(
            seq_pol[0::2], seq_pol[1::2], seq_ref[0::2], seq_ref[1::2], beta=self.settings.beta_dpo
        )
        replay_metrics = {
            "loss/replay_dpo": float(loss),
            "replay/pairs_used": float(n_pairs),
            **{f"replay/{k.split('/', 1)[1]}": v for k, v in dpo_metrics.items()},
        }

        rows_per_minibatch = int(self.config.actor_rollout_ref.actor.ppo_mini_batch_size) * self.responses_per_prompt
        cols = replay_columns(seq_pol, seq_ref, rows_per_minibatch // 2)
        row_index = cols.pop("row_index")
        block = {k: v[row_index] for k, v in packed.items()}
        block["old_log_probs"] = policy[row_index]
        block["advantages"] = torch.zeros_like(block["old_log_probs"])  # the DPO term is in the actor loss
        if "ref_log_prob" in batch.batch.keys():
            block["ref_log_prob"] = ref[row_index]
        if "rollout_log_probs" in batch.batch.keys():
            block["rollout_log_probs"] = policy[row_index]  # not sampled by the rollout: importance weight 1
        if "rollout_is_weights" in batch.batch.keys():  # decoupled rollout correction: weight 1, as above
            block["rollout_is_weights"] = torch.ones_like(block["old_log_probs"])
        block.update(cols)
        return DataProto.from_dict(tensors=block), replay_metrics


class AgentComposerTrainer(AgentEpisodesMixin, RayComposerTrainer):
    """The Composer on agent episodes (`external_agent`, docs/AGENT.md): select with
    `trainer.trainer_cls=recipe.composer.composer_ray_trainer.AgentComposerTrainer`."""
