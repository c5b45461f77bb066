"""RayComposerTrainer: GRPO + SDPO hint self-distillation + N-teacher trace-replay DPO in one verl step.

    total = grpo_loss + alpha_sdpo * sdpo_loss + beta_replay * replay_loss

One training step (through ExtRayPPOTrainer's hooks: reward -> old/ref log-probs -> advantages -> update):

1. GRPO (channel 1): the `grpo_composer` estimator's group-relative advantage; the actor's PPO loss is `loss/grpo`.
2. SDPO (channel 2), only if alpha_sdpo > 0. Error sites come from the batch (hints.error_sites_for_batch): the
   environment's per-step metadata (`step_metas`: an error at step t targets assistant turn t + 1), with
   `composer.sdpo.tool_error_rules` also the tool results of agent episodes (the `agent_turns` column: a failed tool
   result at turn t targets turn t + 1, verl_ext/composer/tool_errors.py; an explicit step_meta wins), an
   `error_kind` column from the reward function, or a failed answer (`acc` == 0: hint "The correct answer is
   <ground truth>", or with `sibling_solution` a successful sibling's response). The hint goes into the context
   just before the targeted turn (hints.build_teacher_context), and the actor scores the student's tokens from that
   turn on under it, without gradient (one extra forward pass per error site). Only the targeted turn's tokens
   carry the term; with `sites: answer` only its final \\boxed{} answer's tokens (hints.answer_columns), and a site
   without a box is dropped (counted in sdpo/sites_without_answer). Two forms (composer.sdpo.form):
   - `full_logit` (default): the teacher pass stores the top-k log-probs and ids of each site token
     (`teacher_topk`; null = the whole vocabulary) and the actor loss (verl_ext/composer/actor_loss.py, installed
     with set_loss_fn) adds alpha_sdpo * generalized JSD(student logits, teacher top-k) at those tokens.
     `loss/sdpo` is the batchmean JSD measured during the update.
   - `sampled_token` (Recipe B): A_t += alpha_sdpo * (logp_teacher_t - logp_student_t) through the estimator;
     `loss/sdpo` is the masked mean of (logp_student - logp_teacher), the sampled-token estimate of
     KL(student || teacher).
3. Trace replay (channel 3), only if beta_replay > 0: after the step's rewards, each prompt group goes to the
   teacher pool (submit_many: a Future, never waited on; the last step asks nothing and waits for the answers
   still pending instead); at a later step the answers that have arrived become DPO
   pairs by the disagreement rule (answers compared after \\boxed{} extraction), appended to `pairs_path`, and up to
   `max_pairs_per_step` queued pairs are used: chosen/rejected responses are tokenized after their prompt, scored by
   the actor and the reference worker (`loss/replay_dpo` = dpo_loss before the update), and enter the update as
   one extra mini-batch, first on every rank (verl_ext/composer/replay.py), whose rows carry the DPO columns; the
   actor loss adds beta_replay * DPO loss (zero advantages: the PPO term ignores them). A step with pairs makes one
   more optimizer step than a step without. On agent episodes with the gateway's record (the `agent_turns` column)
   a trace's step is an assistant turn (verl_ext/composer/turn_replay.py): each tool-call turn and final answer of a
   trained episode is asked as the policy saw it (the recorded messages and tools; the same state is asked once a
   step), actions are compared by call (the calculator's normal form) or final answer, and a pair's rows are the
   turn's context as sampled, the action its only loss tokens (the chosen action written in the policy's call format,
   `external_agent.tool_parser`: line or hermes).

alpha_sdpo = 0 skips the teacher pass; beta_replay = 0 creates no teacher pool and adds no rows; with both 0 the
actor keeps verl's own loss function and the step is plain GRPO.

Logged per step: loss/grpo (= actor/pg_loss averaged over the rollout mini-batches; actor/pg_loss itself includes
the replay mini-batch's zero),
loss/sdpo, loss/replay_dpo, loss/total = grpo + alpha_sdpo * sdpo + beta_replay * replay_dpo, sdpo/error_sites (the
sites the teacher pass hinted at), in every arm sdpo/sites_found (the batch's error sites), sdpo/sites/<kind> for each
tool-error rule's kind (0 included), sdpo/failed_rows and sdpo/failed_covered_frac (the failed rows with a site),
sdpo/tokens (site tokens), sdpo/teacher_tokens (tokens the teacher pass scored), sdpo/sibling_site_frac (every arm:
the share of failed responses whose group has a successful one), replay/pairs_used,
replay/pairs_queued, replay/pairs_built (this step) and replay/pairs_built_total, replay/dpo_loss_update (the DPO
loss the actor saw), replay/reward_margin..., teacher/calls, teacher/failures, teacher/cache_hits, teacher/tokens
(the pool's counts since the trainer started), teacher/pending_queries, teacher/queries_answered and
teacher/agreement (the share of pairs of answering teachers that agreed, over the run; disagreement.ReplayTally);
timings timing_s/sdpo_teacher and timing_s/replay.

Pending teacher queries are not checkpointed (queued pairs and the pairs file offset are): after a restart their
answers come from the teacher cache only if the same (trace, step) is asked again.
"""

from __future__ import annotations

from collections import deque
from dataclasses import asdict, dataclass, field

import torch
from verl import DataProto
from verl.utils import tensordict_utils as tu
from verl.utils.config import omega_conf_to_dataclass
from verl.utils.debug import marked_timer
from verl.workers.utils.padding import left_right_2_no_padding, no_padding_2_padding

from recipe.composer.config_check import FIDELITY, composer_settings
from verl_ext.advantage.grpo_composer import composer_advantages
from verl_ext.composer.actor_loss import TOPK_PREFIX, ComposerActorLoss, unpack_topk, update_means
from verl_ext.composer.disagreement import (
    DisagreementConfig,
    DPOPair,
    PairReader,
    PairWriter,
    ReplayTally,
    answer_key,
    extract_pairs,
    prompt_groups,
    step_records,
)
from verl_ext.composer.hints import (
    answer_columns,
    error_sites_for_batch,
    failed_coverage,
    hint_templates,
    plan_teacher_rows,
    restrict_rows,
    sibling_site_share,
)
from verl_ext.composer.replay import grpo_pg_loss, pair_rows, replay_block, update_batch
from verl_ext.composer.rows import pad_rows, prompt_response_tokens
from verl_ext.composer.sdpo import SdpoInputs, SdpoPlan
from verl_ext.composer.teacher_pool import TeacherPool, TeacherRequest, check_teachers_up
from verl_ext.composer.turn_replay import TOOL_PARSERS, EpisodeTurns, answer_keys, episode_turns, turn_pairs
from verl_ext.config.errors import ConfigError
from verl_ext.trainer.agent_episodes import AgentEpisodesMixin
from verl_ext.trainer.ppo_trainer import ExtRayPPOTrainer
from verl_ext.trainer.step import StepState


@dataclass(frozen=True)
class TurnQueries:
    """One step's teacher queries on agent turns: the episodes asked, and the distinct requests sent (by trace id, in
    the order of the pool's answers)."""

    episodes: list[EpisodeTurns]
    requests: list[TeacherRequest]


@dataclass
class ComposerStep(StepState):
    """What one step's parts hand on to its metrics row: created by `new_step`, filled by its phases."""

    channel: dict = field(default_factory=dict)  # the channels' metrics: loss/sdpo, sdpo/*, replay/*, teacher/*
    replay_block: DataProto | None = None  # the replay rows of this step's actor update (None: no pairs)
    grpo_loss: float | None = None  # the PPO loss without the replay mini-batch (see update_actor)


class RayComposerTrainer(ExtRayPPOTrainer):
    fidelity = FIDELITY

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.settings = composer_settings(self.config)
        # Rows of one rollout mini-batch of the actor update (verl: ppo_mini_batch_size x group size).
        self.minibatch_rows = int(self.config.actor_rollout_ref.actor.ppo_mini_batch_size) * self.responses_per_prompt
        self.pool: TeacherPool | None = None
        self.pair_writer: PairWriter | None = None
        self.pair_reader: PairReader | None = None
        if self.settings.replay_on:
            self.pool = TeacherPool(self.settings.pool)
            self.pair_writer = PairWriter(self.settings.replay.pairs_path)
            self.pair_reader = PairReader(self.settings.replay.pairs_path)
            self.disagreement = DisagreementConfig(
                rule=self.settings.replay.rule, min_agree=self.settings.replay.min_agree, normalize=answer_key
            )
        self._pending: list = []  # (Future, step, prompt groups) of teacher queries not yet turned into pairs
        self._pair_queue: deque[DPOPair] = deque()
        self.tally = ReplayTally()

    @property
    def full_logit_sdpo(self) -> bool:
        return self.settings.sdpo_on and self.settings.sdpo.form == "full_logit"

    def init_workers(self):
        super().init_workers()
        if self.full_logit_sdpo or self.settings.replay_on:
            s = self.settings
            self.actor_rollout_wg.set_loss_fn(
                ComposerActorLoss(
                    omega_conf_to_dataclass(self.config.actor_rollout_ref.actor),
                    alpha_sdpo=s.alpha_sdpo if self.full_logit_sdpo else 0.0,
                    jsd_beta=s.sdpo.jsd_beta,
                    token_clip=s.sdpo.token_clip,
                    beta_replay=s.beta_replay,
                    beta_dpo=s.replay.beta_dpo,
                )
            )

    def actor_update_flags(self) -> dict:
        # verl's engine calls the loss function as a logits processor only with this flag (actor_loss.py).
        return {"distillation_use_topk": True} if self.full_logit_sdpo else {}

    # ------------------------------------------------------------------ checkpointed state
    def extra_state_dict(self) -> dict:
        state = super().extra_state_dict()
        if self.pair_reader is not None:
            state["replay"] = {
                "offset": self.pair_reader.offset,
                "queue": [asdict(p) for p in self._pair_queue],
                "tally": asdict(self.tally),
            }
        return state

    def load_extra_state_dict(self, state: dict) -> None:
        super().load_extra_state_dict(state)
        replay = state.get("replay")
        if replay and self.pair_reader is not None:
            self.pair_reader.offset = int(replay["offset"])
            self._pair_queue = deque(DPOPair(**p) for p in replay["queue"])
            self.tally = ReplayTally(**replay.get("tally", {}))  # absent in checkpoints written before it

    # ------------------------------------------------------------------ the step
    def new_step(self, metrics: dict, timing_raw: dict) -> ComposerStep:
        return ComposerStep(metrics, timing_raw)

    def after_update(self, batch: DataProto, step: ComposerStep) -> None:
        step.metrics.update(self._loss_metrics(step, step.metrics))

    def _loss_metrics(self, step: ComposerStep, metrics: dict) -> dict:
        """The channels' metrics and loss/grpo, loss/total; the actor loss's sums (popped from `metrics`) become
        loss/sdpo (full_logit) and replay/dpo_loss_update."""
        jsd, dpo = update_means(metrics)
        if self.full_logit_sdpo:
            step.channel["loss/sdpo"] = jsd
        if dpo is not None:
            step.channel["replay/dpo_loss_update"] = dpo
        grpo = step.grpo_loss if step.grpo_loss is not None else float(metrics.get("actor/pg_loss", 0.0))
        total = (
            grpo
            + self.settings.alpha_sdpo * step.channel["loss/sdpo"]
            + self.settings.beta_replay * step.channel["loss/replay_dpo"]
        )
        return {**step.channel, "loss/grpo": grpo, "loss/total": total}

    def compute_advantages(self, batch: DataProto, step: ComposerStep) -> DataProto:
        """Channel 1 with channel 2's term (the SDPO teacher pass first), then channel 3's teacher step: the replay
        rows need this step's reference log-probs and rollout correction, and the actor before its update."""
        step.channel.update({"loss/sdpo": 0.0, "sdpo/error_sites": 0.0, "sdpo/tokens": 0.0, "sdpo/teacher_tokens": 0.0})
        share = sibling_site_share(batch.non_tensor_batch)  # in every arm: a property of the batch, not the channel
        if share is not None:
            step.channel["sdpo/sibling_site_frac"] = share
        sites, site_metrics = self._error_sites(batch)  # in every arm too: the arms compare their error sites
        step.channel.update(site_metrics)
        sdpo = SdpoInputs(metrics={})
        if self.settings.sdpo_on:
            with marked_timer("sdpo_teacher", step.timing_raw, color="purple"):
                sdpo = self._sdpo_inputs(batch, sites)
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

    def update_actor(self, batch: DataProto, step: ComposerStep) -> DataProto:
        if step.replay_block is None:
            return super().update_actor(batch, step)
        merged = update_batch(batch, step.replay_block, self.actor_rollout_wg.world_size)
        output = super().update_actor(merged, step)
        # verl reports pg_loss per mini-batch; the replay mini-batch (first of each epoch) has zero advantages, so
        # loss/grpo averages the others only.
        pg = output.meta_info["metrics"].get("actor/pg_loss")
        step.grpo_loss = grpo_pg_loss(pg, len(merged), self.minibatch_rows)
        return output

    def on_run_end(self) -> None:
        super().on_run_end()
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
        tensors = pad_rows(tensors, wg.world_size * micro)
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

    def _decode_responses(self, batch: DataProto) -> list[str]:
        responses, mask = batch.batch["responses"], batch.batch["response_mask"].bool()
        return self.tokenizer.batch_decode(
            responses.masked_fill(~mask, self.tokenizer.pad_token_id), skip_special_tokens=True
        )

    # ------------------------------------------------------------------ channel 2: SDPO
    def _error_sites(self, batch: DataProto) -> tuple[list, dict[str, float]]:
        """The batch's error sites (hints.error_sites_for_batch) and what they cover: `sdpo/sites_found`, the sites
        found, `sdpo/sites/<kind>` per tool-error rule, `sdpo/failed_rows` and `sdpo/failed_covered_frac`. Found in
        every arm (a property of the batch; cheap: no model pass), used by channel 2 only."""
        texts = self._decode_responses(batch) if self.settings.sdpo.sibling_solution else None
        rules = self.settings.sdpo.tool_error_rules
        sites = error_sites_for_batch(batch.non_tensor_batch, texts, tool_error_rules=rules)
        kinds = [site.error_kind for row in sites for site in row]
        metrics = {"sdpo/sites_found": float(len(kinds))}
        metrics.update({f"sdpo/sites/{r.kind}": float(kinds.count(r.kind)) for r in rules})
        metrics.update(failed_coverage(sites, batch.non_tensor_batch.get("acc")))
        return sites, metrics

    def _sdpo_inputs(self, batch: DataProto, sites: list) -> SdpoInputs:
        """Error sites -> teacher rows -> the full-logit columns or the sampled-token inputs (sdpo.SdpoPlan)."""
        b = batch.batch
        rules = self.settings.sdpo.tool_error_rules
        prompt_ids, response_ids = prompt_response_tokens(b["prompts"], b["responses"], b["attention_mask"])
        rows = plan_teacher_rows(
            prompt_ids,
            response_ids,
            b["response_mask"],
            sites,
            self.tokenizer,
            mode=self.settings.sdpo.hint_mode,
            templates=hint_templates(rules),
        )
        answer_metrics = {}
        if self.settings.sdpo.sites == "answer":  # only the final answer's tokens; a site without one is dropped
            kept = restrict_rows(rows, answer_columns(response_ids, b["response_mask"].shape[1], self.tokenizer))
            answer_metrics["sdpo/sites_without_answer"] = float(len(rows) - len(kept))
            rows = kept
        plan = SdpoPlan.of(rows, b["response_mask"])
        if not plan.rows:
            inputs = plan.without_teacher(b["old_log_probs"], full_logit=self.full_logit_sdpo)
        else:
            teacher_rows = plan.teacher_rows(b["response_mask"], self.tokenizer.pad_token_id)
            if self.full_logit_sdpo:
                lp, ids = self._score_topk(teacher_rows, self.settings.sdpo.teacher_topk)
                # Each rollout mini-batch's term is then its sites' batchmean JSD in expectation (actor_loss.py).
                inputs = plan.full_logit(teacher_rows, lp, ids, n_minibatches=len(batch) / self.minibatch_rows)
            else:
                inputs = plan.sampled_token(teacher_rows, self._score_rows(teacher_rows), b["old_log_probs"])
        inputs.metrics.update(answer_metrics)
        return inputs

    # ------------------------------------------------------------------ channel 3: trace replay
    def _teacher_step(self, batch: DataProto, timing_raw: dict) -> tuple[DataProto | None, dict]:
        """The teacher answers that have arrived become DPO pairs, up to max_pairs_per_step queued pairs become this
        step's replay rows (None without pairs), and this step's groups go to the teacher pool, after the pairs of
        earlier steps: never waited on here. Except at the run's last step: no later step could use its queries'
        answers, so it asks nothing (no teacher call is paid for nothing) and waits for the answers still pending,
        which it can still use. Returns the rows and the channel's metrics."""
        last = self.global_steps >= self.total_training_steps
        with marked_timer("replay", timing_raw, color="orange"):
            built = self._collect_teacher_answers(wait=last)
            block, replay_metrics = self._replay_rows(batch)
            if not last:
                self._submit_teacher_queries(batch)
        stats = self.pool.stats()
        check_teachers_up(stats, self.settings.pool.on_teacher_down)
        return block, {
            **replay_metrics,
            **self.tally.metrics(built),
            "teacher/calls": float(stats["calls"]),
            "teacher/failures": float(sum(stats["failures"].values())),
            **{f"teacher/failures/{name}": float(n) for name, n in stats["failures_by_teacher"].items()},
            "teacher/down": float(len(stats["down"])),
            "teacher/cache_hits": float(stats["cache_hits"]),
            "teacher/tokens": float(stats["tokens"]),
            "teacher/pending_queries": float(len(self._pending)),
            "replay/pairs_queued": float(len(self._pair_queue)),
        }

    @property
    def tool_parser(self) -> str | None:
        """The call format the policy writes its agent turns in (`external_agent.tool_parser`, read by the agent
        trainer's settings; None without them), for the chosen actions of agent-turn pairs."""
        settings = getattr(self, "agent_settings", None)
        return None if settings is None else settings.tool_parser

    def _submit_teacher_queries(self, batch: DataProto) -> None:
        """One teacher request per prompt group of this step, or on agent episodes with the gateway's record per
        asked turn (`_submit_turn_queries`); the answers are collected at a later step."""
        b, nt = batch.batch, batch.non_tensor_batch
        if "agent_turns" in nt:
            return self._submit_turn_queries(batch)
        prompt_ids, _ = prompt_response_tokens(b["prompts"], b["responses"], b["attention_mask"])
        groups = prompt_groups(nt["uid"], nt["raw_prompt"], prompt_ids, self._decode_responses(batch))
        requests = [TeacherRequest(g.trace_id, self.global_steps, g.messages) for g in groups]
        self._pending.append((self.pool.submit_many(requests), self.global_steps, groups))

    def _submit_turn_queries(self, batch: DataProto) -> None:
        """The asked turns (tool calls, final answer) of this step's trained episodes (status ok, one segment), each
        distinct state once (turn_replay.episode_turns)."""
        if self.tool_parser not in TOOL_PARSERS:
            raise ConfigError(
                f"composer.beta_replay > 0 on agent turns writes the teachers' actions in the policy's call format: "
                f"external_agent.tool_parser must be one of {TOOL_PARSERS}, got {self.tool_parser!r} (agent episodes "
                "train with trainer.trainer_cls=recipe.composer.composer_ray_trainer.AgentComposerTrainer)"
            )
        b, nt = batch.batch, batch.non_tensor_batch
        prompt_ids, response_ids = prompt_response_tokens(b["prompts"], b["responses"], b["attention_mask"])
        status = nt.get("agent_status", ["ok"] * len(batch))
        segments = nt.get("agent_segments", [1] * len(batch))
        names = nt.get("agent_episode_id", [str(i) for i in range(len(batch))])
        episodes, requests = [], {}
        for i, record in enumerate(nt["agent_turns"]):
            if str(status[i]) != "ok" or int(segments[i] or 1) > 1:
                continue  # a dropped episode trains nothing; a split one's record does not number its turns
            mask = b["response_mask"][i, : len(response_ids[i])].tolist()
            ep = episode_turns(str(names[i]), record, self.global_steps, prompt_ids[i], response_ids[i], mask)
            if ep is None or not ep.requests:
                continue
            episodes.append(ep)
            for request in ep.requests.values():
                requests.setdefault(request.trace_id, request)
        queries = TurnQueries(episodes, list(requests.values()))
        self._pending.append((self.pool.submit_many(queries.requests), self.global_steps, queries))

    def _collect_teacher_answers(self, wait: bool = False) -> int:
        """Turn the teacher answers that have arrived (`wait`: all pending ones, waiting for them; the pool bounds
        each query's time) into DPO pairs (one per distinct wrong student answer), counting the teachers' agreement
        on each query (self.tally); returns the pairs built."""
        still, built = [], 0
        for future, step, groups in self._pending:
            if not (wait or future.done()):
                still.append((future, step, groups))
                continue
            results = future.result()
            if isinstance(groups, TurnQueries):
                built += self.pair_writer.write(self._turn_pairs(groups, step, results))
                continue
            for answers in results:
                texts = {name: (a.text if a is not None else None) for name, a in answers.items()}
                self.tally.add_query(texts, self.disagreement.normalize)
            records = [r for g, answers in zip(groups, results) for r in step_records(g, step, answers)]
            built += self.pair_writer.write(extract_pairs(records, self.disagreement))
        self.tally.pairs_built += built
        self._pending = still
        self._pair_queue.extend(self.pair_reader.read_new())
        return built

    def _turn_pairs(self, queries: TurnQueries, step: int, results: list) -> list[DPOPair]:
        """The pairs of agent-turn queries' answers, and their agreement counts (on action keys)."""
        by_id = {r.trace_id: answers for r, answers in zip(queries.requests, results)}
        for r in queries.requests:
            self.tally.add_query(answer_keys(by_id[r.trace_id], r.tools, self.tool_parser), lambda key: key)
        pairs = []
        for ep in queries.episodes:
            answers = {t: by_id[r.trace_id] for t, r in ep.requests.items()}
            pairs += turn_pairs(ep.trace, step, answers, self.disagreement, self.tool_parser, ep.episode, ep.tokens)
        return pairs

    def _replay_rows(self, batch: DataProto) -> tuple[DataProto | None, dict]:
        """Up to max_pairs_per_step queued pairs as one extra actor mini-batch with DPO columns, and their metrics
        (the DPO loss before the update); (None, {}) with no queued pair."""
        n_pairs = min(len(self._pair_queue), self.settings.replay.max_pairs_per_step)
        if n_pairs == 0:
            return None, {}
        pairs = [self._pair_queue.popleft() for _ in range(n_pairs)]
        b = batch.batch
        rows = pair_rows(pairs, self.tokenizer, b["prompts"].shape[1], b["responses"].shape[1])
        block, metrics = replay_block(
            rows,
            self._score_rows(rows),
            self._score_rows(rows, ref=True),
            beta_dpo=self.settings.replay.beta_dpo,
            n_slots=self.minibatch_rows // 2,
            batch_keys=b.keys(),
        )
        return DataProto.from_dict(tensors=block), metrics


class AgentComposerTrainer(AgentEpisodesMixin, RayComposerTrainer):
    """The Composer on agent episodes (`external_agent`, docs/AGENT.md): select with
    `trainer.trainer_cls=recipe.composer.composer_ray_trainer.AgentComposerTrainer`."""
