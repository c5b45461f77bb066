"""RayComposerTrainer: GRPO + SDPO hint self-distillation + N-teacher trace-replay DPO in one verl step (seed 003).

    total = grpo_loss + alpha_sdpo * sdpo_loss + beta_replay * replay_loss

One training step (on top of ExtRayPPOTrainer.train_on_batch: reward -> old/ref log-probs -> advantages -> update):

1. GRPO (channel 1): the `grpo_composer` estimator's group-relative advantage; the actor's PPO loss is `loss/grpo`.
2. SDPO, sampled-token form (channel 2, Recipe B), only if alpha_sdpo > 0: error sites are the responses with
   acc == 0 (single-turn math / toy task). Each gets the hint "The correct answer is <ground truth>" (or, with
   `sibling_solution`, a successful sibling's response), inserted as a user turn before the generation prompt
   (hints.build_teacher_context). The actor worker scores the SAME response tokens under that context, without
   gradient (one extra forward pass per error-site row), and the estimator adds
   A_t += alpha_sdpo * (logp_teacher_t - logp_student_t) on the error-site tokens. `loss/sdpo` is the masked mean of
   (logp_student - logp_teacher) over those tokens (the sampled-token estimate of KL(student || teacher)).
3. Trace replay (channel 3), only if beta_replay > 0: after the step's rewards, each prompt of the step goes to the
   teacher pool (submit_many: a Future, never waited on); at a later step the answers that have arrived become DPO
   pairs by the disagreement rule (answers compared after \\boxed{} extraction), appended to `pairs_path`, and up
   to `max_pairs_per_step` queued pairs are used: chosen/rejected responses are tokenized after their prompt,
   scored by the actor (policy log-probs) and the reference worker, `loss/replay_dpo` = dpo_loss, and the pairs
   enter the actor update as ONE extra mini-batch of rows whose advantages are the DPO gradient w.r.t. each
   sequence log-prob (verl_ext/composer/replay.py: "DPO as advantage"). So a step with pairs makes one more
   optimizer step than a step without.

alpha_sdpo = 0 skips the teacher forward pass (the estimator is plain GRPO); beta_replay = 0 creates no teacher pool
and appends no rows.

Logged per step: loss/grpo (= actor/pg_loss, averaged over all update micro-batches, the replay mini-batch included),
loss/sdpo, loss/replay_dpo, loss/total = grpo + alpha_sdpo * sdpo + beta_replay * replay_dpo, sdpo/error_sites,
sdpo/tokens, replay/pairs_used, replay/pairs_queued, replay/reward_margin..., teacher/calls, teacher/failures,
teacher/cache_hits, teacher/tokens, teacher/pending_queries; timings timing_s/sdpo_teacher and timing_s/replay.

Not implemented (both need an engine-level loss: verl 0.9.1's actor calls a registered policy loss with sampled-token
log-probs only; logits reach only the callable installed with `actor.set_loss_fn`, and verl's FSDP engine passes
`student_logits` to it only when the micro-batch flag `distillation_use_topk` is set):
- the full-logit JSD form of SDPO (verl_ext.composer.generalized_jsd_loss is ready): it needs the teacher's logits
  (or top-k log-probs) on the response tokens stored beside the rows, and a loss_fn that adds
  alpha_sdpo * generalized_jsd_loss(student_logits, teacher_logits, labels) to ppo_loss;
- the DPO term as an additive loss: here it is applied as advantages on extra rows (exact gradient of the DPO loss
  at ratio 1, but PPO-clipped and normalised by verl's loss aggregation, see verl_ext/composer/replay.py).
Pending teacher queries are not checkpointed (queued pairs and the pairs file offset are): after a restart their
answers come from the teacher cache only if the same (trace, step) is asked again.
"""

from __future__ import annotations

import hashlib
import json
from collections import deque
from dataclasses import asdict

import numpy as np
import torch
from verl import DataProto
from verl.trainer.ppo import core_algos
from verl.utils import tensordict_utils as tu
from verl.utils.debug import marked_timer
from verl.workers.utils.padding import left_right_2_no_padding, no_padding_2_padding

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
from verl_ext.composer.hints import build_teacher_context, math_error_sites, render_hint
from verl_ext.composer.replay import dpo_advantages, fill_slots
from verl_ext.composer.rows import pack_rows, valid_tokens
from verl_ext.composer.teacher_pool import TeacherPool, TeacherRequest
from verl_ext.reward.answer_extraction import last_boxed
from verl_ext.trainer.ppo_trainer import ExtRayPPOTrainer

from recipe.composer.config_check import composer_settings

# Columns the actor update reads; the replay rows carry exactly these (plus the optional ones the batch has).
_UPDATE_KEYS = ("prompts", "responses", "input_ids", "attention_mask", "position_ids", "response_mask",
                "old_log_probs", "advantages")
_OPTIONAL_UPDATE_KEYS = ("ref_log_prob", "rollout_log_probs")


def answer_key(text: str) -> str:
    """Comparison key of an action: the last \\boxed{} content if any, else the whole text (normalised)."""
    return default_normalize(last_boxed(text) or text)


def composer_advantages(batch: DataProto, algo, sdpo: dict | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Channel 1 (+ channel 2 when `sdpo` holds sdpo_teacher_log_probs / sdpo_error_mask): the grpo_composer
    estimator on a batch with token_level_rewards, response_mask, uid (and old_log_probs for SDPO)."""
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


def append_rows(batch: DataProto, block: DataProto) -> DataProto:
    """The actor-update batch: the step's rows (only the columns the update reads) followed by `block`."""
    keys = list(block.batch.keys())
    missing = [k for k in keys if k not in batch.batch.keys()]
    if missing:
        raise KeyError(f"the training batch lacks columns {missing} that the extra rows carry")
    head = DataProto.from_dict(tensors={k: batch.batch[k] for k in keys})
    tail = DataProto.from_dict(tensors={k: block.batch[k].to(batch.batch[k].dtype) for k in keys})
    merged = DataProto.concat([head, tail])
    merged.meta_info = {k: v for k, v in batch.meta_info.items() if k != "global_token_num"}
    merged.meta_info["global_token_num"] = merged.batch["attention_mask"].sum(-1).tolist()
    return merged


class RayComposerTrainer(ExtRayPPOTrainer):
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
        self._replay_block: DataProto | None = None
        self._channel: dict = {}
        self._timing: dict = {}

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
        self._timing, self._channel, self._replay_block = timing_raw, {}, None
        batch = super().train_on_batch(batch, metrics, timing_raw)
        metrics.update(self._channel)
        grpo = float(metrics.get("actor/pg_loss", 0.0))
        metrics["loss/grpo"] = grpo
        metrics["loss/total"] = (grpo + self.settings.alpha_sdpo * self._channel["loss/sdpo"]
                                 + self.settings.beta_replay * self._channel["loss/replay_dpo"])
        self._replay_block = None
        return batch

    def _advantages(self, batch: DataProto, metrics: dict) -> DataProto:
        sdpo = None
        self._channel.update({"loss/sdpo": 0.0, "sdpo/error_sites": 0.0, "sdpo/tokens": 0.0})
        if self.settings.sdpo_on:
            with marked_timer("sdpo_teacher", self._timing, color="purple"):
                sdpo = self._sdpo_inputs(batch)
        adv, ret = composer_advantages(batch, self.config.algorithm, sdpo)
        batch.batch["advantages"], batch.batch["returns"] = adv, ret
        self._channel.update({"loss/replay_dpo": 0.0, "replay/pairs_used": 0.0})
        if self.settings.replay_on:
            with marked_timer("replay", self._timing, color="orange"):
                self._collect_teacher_answers()
                self._replay_block = self._replay_rows(batch)
                self._submit_teacher_queries(batch)  # after the pairs of earlier steps: never waited on here
            stats = self.pool.stats()
            self._channel.update({
                "teacher/calls": float(stats["calls"]),
                "teacher/failures": float(sum(stats["failures"].values())),
                "teacher/cache_hits": float(stats["cache_hits"]),
                "teacher/tokens": float(stats["tokens"]),
                "teacher/pending_queries": float(len(self._pending)),
                "replay/pairs_queued": float(len(self._pair_queue)),
            })
        return batch

    def _update_actor(self, batch: DataProto) -> DataProto:
        if self._replay_block is None:
            return super()._update_actor(batch)
        return super()._update_actor(append_rows(batch, self._replay_block))

    def fit(self):
        try:
            return super().fit()
        finally:
            if self.pool is not None:
                self.pool.close()
                self.pair_writer.close()

    # ------------------------------------------------------------------ worker calls on extra rows
    def _score_rows(self, tensors: dict[str, torch.Tensor], ref: bool = False) -> torch.Tensor:
        """(n, R) log-probs of the rows' response tokens: the actor (current policy, no gradient) or the reference.

        Rows are padded (repeating the last) to a multiple of worker count x log-prob micro-batch size: verl's
        dispatch splits the batch evenly over data-parallel ranks and, without dynamic batch sizes, its engine
        needs whole micro-batches. The padded rows cost forward passes too.
        """
        n = tensors["input_ids"].shape[0]
        wg = self.actor_rollout_wg if (not ref or self.ref_in_actor) else self.ref_policy_wg
        section = self.config.actor_rollout_ref.ref if ref else self.config.actor_rollout_ref.rollout
        micro = 1 if section.get("log_prob_use_dynamic_bsz", False) else int(
            section.get("log_prob_micro_batch_size_per_gpu") or 1)
        pad = (-n) % (wg.world_size * micro)
        if pad:
            tensors = {k: torch.cat([v, v[-1:].expand(pad, *v.shape[1:])]) for k, v in tensors.items()}
        meta = {"temperature": self.config.actor_rollout_ref.rollout.temperature,
                "global_token_num": tensors["attention_mask"].sum(-1).tolist(), "images_seqlens": []}
        data = DataProto.from_dict(tensors=dict(tensors), meta_info=meta)
        if ref:
            return self._compute_ref_log_prob(data).batch["ref_log_prob"][:n]
        td = left_right_2_no_padding(data.to_tensordict())
        tu.assign_non_tensor(td, calculate_entropy=False, compute_loss=False)
        out = self.actor_rollout_wg.compute_log_prob(td)
        return no_padding_2_padding(tu.get(out, "log_probs"), td).float()[:n]

    # ------------------------------------------------------------------ channel 2: SDPO
    def _sdpo_inputs(self, batch: DataProto) -> dict:
        nt = batch.non_tensor_batch
        if "acc" not in nt:
            raise KeyError("composer SDPO finds error sites from the reward's `acc` (0/1); the reward function "
                           f"returned only {sorted(k for k in nt if k not in ('uid', 'raw_prompt'))}")
        responses, mask = batch.batch["responses"], batch.batch["response_mask"]
        prompt_width = batch.batch["prompts"].shape[1]
        attn = batch.batch["attention_mask"]
        texts = None
        if self.settings.sibling_solution:
            texts = self.tokenizer.batch_decode(responses.masked_fill(~mask.bool(), self.tokenizer.pad_token_id),
                                                skip_special_tokens=True)
        sites = math_error_sites([float(a) for a in nt["acc"]], [str(rm["ground_truth"]) for rm in nt["reward_model"]],
                                 list(nt["uid"]), texts)
        rows = [i for i, s in enumerate(sites) if s is not None]
        teacher = torch.zeros_like(batch.batch["old_log_probs"])
        error_mask = torch.zeros_like(mask, dtype=torch.bool)
        if rows:
            idx = torch.as_tensor(rows)
            prompts = valid_tokens(batch.batch["prompts"][idx], attn[idx, :prompt_width])
            resps = valid_tokens(responses[idx], attn[idx, prompt_width:])
            prefixes = []
            for i, p, r in zip(rows, prompts, resps):
                ctx = build_teacher_context(p, r, render_hint(sites[i]), self.tokenizer, mode=self.settings.hint_mode)
                prefixes.append(ctx.input_ids[: ctx.response_start])
            packed = pack_rows(prefixes, resps, self.tokenizer.pad_token_id, response_width=responses.shape[1])
            packed["response_mask"] = mask[idx].to(packed["response_mask"].dtype)  # keep the rollout's loss mask
            teacher[idx] = self._score_rows(packed)
            error_mask[idx] = mask[idx].bool()
        self._channel.update({
            "loss/sdpo": sdpo_kl_estimate(batch.batch["old_log_probs"], teacher, error_mask),
            "sdpo/error_sites": float(len(rows)),
            "sdpo/tokens": float(error_mask.sum()),
        })
        return {"sdpo_teacher_log_probs": teacher, "sdpo_error_mask": error_mask}

    # ------------------------------------------------------------------ channel 3: trace replay
    def _submit_teacher_queries(self, batch: DataProto) -> None:
        """One teacher request per prompt group of this step; the answers are collected at a later step."""
        nt = batch.non_tensor_batch
        attn, prompt_width = batch.batch["attention_mask"], batch.batch["prompts"].shape[1]
        prompt_ids = valid_tokens(batch.batch["prompts"], attn[:, :prompt_width])
        mask = batch.batch["response_mask"].bool()
        texts = self.tokenizer.batch_decode(batch.batch["responses"].masked_fill(~mask, self.tokenizer.pad_token_id),
                                            skip_special_tokens=True)
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
                    records.append(StepRecord(ctx["trace_id"], step, text, teacher_texts,
                                              prompt={"messages": ctx["messages"], "ids": ctx["ids"]}))
            self.pair_writer.write(extract_pairs(records, self.disagreement))
        self._pending = still
        self._pair_queue.extend(self.pair_reader.read_new())

    def _replay_rows(self, batch: DataProto) -> DataProto | None:
        """Up to max_pairs_per_step queued pairs as one extra actor mini-batch; logs the DPO loss."""
        n_pairs = min(len(self._pair_queue), self.settings.max_pairs_per_step)
        if n_pairs == 0:
            return None
        pairs = [self._pair_queue.popleft() for _ in range(n_pairs)]
        width_p, width_r = batch.batch["prompts"].shape[1], batch.batch["responses"].shape[1]
        eos = self.tokenizer.eos_token_id
        prefixes, responses = [], []
        for pair in pairs:  # rows: chosen_0, rejected_0, chosen_1, ...
            for text in (pair.chosen, pair.rejected):
                prefixes.append(pair.prompt["ids"][-width_p:])
                responses.append((self.tokenizer.encode(text, add_special_tokens=False) + [eos])[:width_r])
        packed = pack_rows(prefixes, responses, self.tokenizer.pad_token_id, response_width=width_r,
                           prefix_width=width_p)
        policy = self._score_rows(packed)
        ref = self._score_rows(packed, ref=True)
        mask = packed["response_mask"]
        seq_pol, seq_ref = sequence_log_probs(policy, mask), sequence_log_probs(ref, mask)
        loss, dpo_metrics = dpo_loss(seq_pol[0::2], seq_pol[1::2], seq_ref[0::2], seq_ref[1::2], self.settings.beta_dpo)
        a_chosen, a_rejected = dpo_advantages(seq_pol[0::2], seq_pol[1::2], seq_ref[0::2], seq_ref[1::2],
                                              self.settings.beta_dpo, self.settings.beta_replay)
        self._channel.update({"loss/replay_dpo": float(loss), "replay/pairs_used": float(n_pairs),
                              **{f"replay/{k.split('/', 1)[1]}": v for k, v in dpo_metrics.items()}})

        rows_per_minibatch = int(self.config.actor_rollout_ref.actor.ppo_mini_batch_size) * self.responses_per_prompt
        pair_of_slot, weight = fill_slots(n_pairs, rows_per_minibatch // 2)
        row_index = torch.stack([2 * pair_of_slot, 2 * pair_of_slot + 1], dim=1).reshape(-1)
        seq_adv = torch.stack([a_chosen[pair_of_slot] * weight, a_rejected[pair_of_slot] * weight], dim=1).reshape(-1)
        block = {k: v[row_index] for k, v in packed.items()}
        block["old_log_probs"] = policy[row_index]
        block["advantages"] = seq_adv.unsqueeze(-1) * block["response_mask"].float()
        if "ref_log_prob" in batch.batch.keys():
            block["ref_log_prob"] = ref[row_index]
        if "rollout_log_probs" in batch.batch.keys():
            block["rollout_log_probs"] = policy[row_index]  # not sampled by the rollout: importance weight 1
        return DataProto.from_dict(tensors=block)
