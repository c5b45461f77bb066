"""One training step of the project's trainer on a generated batch (`TrainStepMixin`, mixed into
`ExtRayPPOTrainer`, verl_ext/trainer/ppo_trainer.py): reward -> old and reference log-probs -> values -> advantages
-> critic and actor updates, as verl 0.9.1's `fit` does them, with the estimator inputs the project's pipeline needs
(old log-probs, true per-token entropies, planning masks, the step, the SEPA lambda), rollout correction in decoupled
and bypass mode, and the step's data metrics. The hooks a recipe may override here: `new_step`, `prepare_batch`,
`compute_advantages`, `update_actor`, `actor_update_flags`, `after_update`, `responses_per_prompt`.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import numpy as np
import torch
from omegaconf import open_dict
from verl import DataProto
from verl.trainer.ppo import core_algos
from verl.trainer.ppo.core_algos import agg_loss
from verl.trainer.ppo.metric_utils import compute_data_metrics, compute_variance_proxy_metrics
from verl.trainer.ppo.ray_trainer import (
    apply_kl_penalty,
    compute_advantage,
    compute_response_mask,
    compute_spec_decode_metrics,
)
from verl.trainer.ppo.reward import extract_reward
from verl.trainer.ppo.rollout_corr_helper import apply_bypass_mode, compute_rollout_correction_and_add_to_batch
from verl.utils.debug import marked_timer
from verl.utils.metric import reduce_metrics

from verl_ext.shared_prefix import FLAG as SHARED_PREFIX_FLAG
from verl_ext.trainer.update_flags import update_flags


@dataclass
class StepState:
    """One training step as its hooks see it: the step's metrics row so far and its timings (`marked_timer`'s dict).
    A recipe that carries more through a step subclasses it and returns its own from `new_step`."""

    metrics: dict
    timing_raw: dict


def images_seqlens(batch: DataProto) -> list[int]:
    """Image token counts of a multimodal batch, as verl's fit collects them for the actor's sequence packing (empty
    for text-only rows and for a batch without `multi_modal_inputs`)."""
    out: list[int] = []
    for inputs in batch.non_tensor_batch.get("multi_modal_inputs", ()):
        if "image_grid_thw" in inputs:
            out.extend(inputs["images_seqlens"].tolist())
    return out


def gdpo_metrics(batch: DataProto, algo) -> dict:
    """verl's per-component reward statistics for the GDPO estimator (`algorithm.gdpo_reward_keys`)."""
    keys = algo.get("gdpo_reward_keys", None)
    if not keys or algo.adv_estimator != "gdpo":
        return {}
    out = {}
    for key in keys:
        if key in batch.non_tensor_batch:
            vals = np.asarray(batch.non_tensor_batch[key], dtype=np.float32)
            out.update(
                {
                    f"gdpo/{key}/{name}": float(fn(vals))
                    for name, fn in (("mean", np.mean), ("std", np.std), ("max", np.max), ("min", np.min))
                }
            )
    return out


class TrainStepMixin:
    """The step (module docstring); needs `RayPPOTrainer`'s workers and the trainer's `adv_config`, `sepa` and
    `planning_detector`."""

    def _bypass_loss_for_workers(self) -> None:
        """Rollout-correction bypass mode: give the actor workers verl's `bypass_mode` policy loss and the correction
        settings before they are built. verl 0.9.1's fit sets them (`apply_bypass_mode`) on the driver's copy of the
        actor config at every step, after `init_workers` shipped that config to the workers, so there the workers keep
        `vanilla`: `loss_type=reinforce`, rejection sampling and the loss-side `rollout_corr/*` metrics are then
        silently lost. Set here (the workers do not exist yet), they take effect; the per-step call stays harmless."""
        rollout_corr = self._rollout_corr()
        if not self._bypass_mode():
            return
        with open_dict(self.config):
            policy_loss = self.config.actor_rollout_ref.actor.policy_loss
            policy_loss.loss_mode = "bypass_mode"
            policy_loss.rollout_correction = rollout_corr

    def _rollout_corr(self):
        """`algorithm.rollout_correction` (None when unset)."""
        return self.config.algorithm.get("rollout_correction", None)

    def _bypass_mode(self) -> bool:
        """Rollout correction in bypass mode (2 policies: the rollout's log-probs are the old ones)."""
        rollout_corr = self._rollout_corr()
        return bool(rollout_corr and rollout_corr.get("bypass_mode", False))

    def new_step(self, metrics: dict, timing_raw: dict) -> StepState:
        """Hook: the state this step hands `prepare_batch`, `compute_advantages`, `update_actor` and `after_update`."""
        return StepState(metrics, timing_raw)

    def prepare_batch(self, batch: DataProto, step: StepState) -> DataProto:
        """Hook: the generated batch before its reward and log-probs are computed."""
        return batch

    def train_on_batch(self, batch: DataProto, metrics: dict, timing_raw: dict) -> DataProto:
        """Reward -> old/ref log-probs -> values -> advantages -> critic/actor updates, through the hooks (module
        docstring); the weight sync follows in the loop."""
        cfg = self.config
        step = self.new_step(metrics, timing_raw)
        batch = self.prepare_batch(batch, step)
        self.sleep_rollout()
        if "response_mask" not in batch.batch.keys():
            batch.batch["response_mask"] = compute_response_mask(batch)
        if cfg.trainer.balance_batch:
            # reorders rows: everything below groups by uid (use_prefix_grouper: each uid's rows stay together)
            self._balance_batch(batch, metrics=metrics)
        # the actor and reference engines compute each group's prompt once (verl_ext/shared_prefix): every TensorDict
        # verl builds from this batch carries meta_info as its non-tensor data
        batch.meta_info[SHARED_PREFIX_FLAG] = bool(cfg.actor_rollout_ref.actor.get("use_prefix_grouper", False))
        batch.meta_info["global_token_num"] = torch.sum(batch.batch["attention_mask"], dim=-1).tolist()
        batch.meta_info["images_seqlens"] = images_seqlens(batch)
        with marked_timer("reward", timing_raw, color="yellow"):
            reward_tensor, reward_extra = extract_reward(batch)
        with marked_timer("old_log_prob", timing_raw, color="blue"):
            batch = self._old_log_probs(batch, metrics)
        if self.use_reference_policy:
            with marked_timer("ref", timing_raw, color="olive"):
                batch = batch.union(self._compute_ref_log_prob(batch))
        if self.use_critic:
            with marked_timer("values", timing_raw, color="cyan"):
                batch = batch.union(self._compute_values(batch))
        with marked_timer("adv", timing_raw, color="brown"):
            batch.batch["token_level_scores"] = reward_tensor
            batch.non_tensor_batch.update({k: np.array(v) for k, v in reward_extra.items()})
            if cfg.algorithm.use_kl_in_reward:
                batch, kl_metrics = apply_kl_penalty(batch, self.kl_ctrl_in_reward, cfg.algorithm.kl_penalty)
                metrics.update(kl_metrics)
            else:
                batch.batch["token_level_rewards"] = batch.batch["token_level_scores"]
            batch = self._rollout_correction(batch, metrics)
            batch = self.compute_advantages(batch, step)
        if self.use_critic:
            with marked_timer("update_critic", timing_raw, color="pink"):
                metrics.update(reduce_metrics(self._update_critic(batch).meta_info["metrics"]))
        # During critic warmup the actor is unchanged (sync_weights still wakes the replicas).
        if cfg.trainer.critic_warmup <= self.global_steps:
            with marked_timer("update_actor", timing_raw, color="red"):
                actor_output = self.update_actor(batch, step)
            metrics.update(reduce_metrics(actor_output.meta_info["metrics"]))
        rollout_data_dir = cfg.trainer.get("rollout_data_dir", None)
        if rollout_data_dir:
            self._log_rollout_data(batch, reward_extra, timing_raw, rollout_data_dir)
        self.after_update(batch, step)
        return batch

    def _old_log_probs(self, batch: DataProto, metrics: dict) -> DataProto:
        if self._bypass_mode():
            # Bypass mode (2 policies): the rollout's log-probs are the old ones; no actor forward pass.
            apply_bypass_mode(
                batch=batch,
                rollout_corr_config=self._rollout_corr(),
                policy_loss_config=self.config.actor_rollout_ref.actor.policy_loss,
            )
            return batch
        old, mfu = self._compute_old_log_prob(batch)
        entropys = old.batch["entropys"]
        actor_cfg = self.config.actor_rollout_ref.actor
        metrics["actor/entropy"] = agg_loss(
            loss_mat=entropys,
            loss_mask=batch.batch["response_mask"],
            loss_agg_mode=actor_cfg.loss_agg_mode,
            loss_scale_factor=actor_cfg.loss_scale_factor,
        ).item()
        metrics["perf/mfu/actor_infer"] = mfu
        if not (self.adv_config and self.adv_config.needs_entropys):
            old.batch.pop("entropys")  # as verl does: 4 bytes per token the update does not need
        if "routed_experts" in batch.batch.keys() and "routed_experts" in old.batch.keys():
            raise ValueError(
                "router_replay.mode='R2' and enable_rollout_routing_replay=True cannot be enabled "
                "together (the latter is for R3 mode only)"
            )
        batch = batch.union(old)
        if "rollout_log_probs" in batch.batch.keys():
            from verl.utils.debug.metrics import calculate_debug_metrics

            metrics.update(calculate_debug_metrics(batch))
        return batch

    def _rollout_correction(self, batch: DataProto, metrics: dict) -> DataProto:
        """Decoupled rollout correction (3 policies), as verl's fit: IS weights and rejection sampling (which narrows
        response_mask) from old vs rollout log-probs, and the `rollout_corr/*` metrics. Skipped in bypass mode (the
        actor loss handles it) and when the rollout returned no log-probs (the config check rejects that case when
        a correction is configured)."""
        rollout_corr = self._rollout_corr()
        if rollout_corr is None or self._bypass_mode():
            return batch
        if "rollout_log_probs" not in batch.batch.keys():
            return batch
        batch, is_metrics = compute_rollout_correction_and_add_to_batch(batch, rollout_corr)
        metrics.update(is_metrics)
        return batch

    def compute_advantages(self, batch: DataProto, step: StepState) -> DataProto:
        """Hook: the batch with `advantages` and `returns`: verl's estimator for its own names, else the project's
        pipeline (old log-probs, entropies, planning masks, the SEPA lambda); its metrics go into `step.metrics`."""
        algo = self.config.algorithm
        if self.adv_config is None:
            return compute_advantage(
                batch,
                adv_estimator=algo.adv_estimator,
                gamma=algo.gamma,
                lam=algo.lam,
                num_repeat=self.config.actor_rollout_ref.rollout.n,
                norm_adv_by_std_in_grpo=algo.get("norm_adv_by_std_in_grpo", True),
                config=algo,
            )
        mask = batch.batch["response_mask"]
        planning = None
        if self.planning_detector is not None:
            planning = self.planning_detector(batch.batch["responses"], mask)
        sepa_lambda = self.sepa.resolve(self.global_steps) if self.sepa else None
        adv_metrics: dict = {}
        fn = core_algos.get_adv_estimator_fn(algo.adv_estimator)
        advantages, returns = fn(
            token_level_rewards=batch.batch["token_level_rewards"],
            response_mask=mask,
            index=batch.non_tensor_batch["uid"],
            config=algo,
            old_log_probs=batch.batch["old_log_probs"],
            entropys=batch.batch.get("entropys"),
            planning_mask=planning,
            step=self.global_steps,
            sepa_lambda=sepa_lambda,
            metrics=adv_metrics,
        )
        batch.batch["advantages"], batch.batch["returns"] = advantages, returns
        step.metrics.update(adv_metrics)
        if self.sepa is not None:
            # SEPA's gate and EMA see this step's rollouts after its lambda was resolved (ALGORITHMS.md section 3).
            self.sepa.observe(adv_metrics.get("adv/exec_u_var_before"), adv_metrics.get("adv/correct_rate"))
        return batch

    @property
    def responses_per_prompt(self) -> int:
        """Responses per training group. verl sizes mini-batches as ppo_mini_batch_size x rollout.n; a recipe whose
        groups are larger than rollout.n (fast DAPO: N = n + n_continue) overrides this."""
        return int(self.config.actor_rollout_ref.rollout.n)

    @contextlib.contextmanager
    def _rollout_n_as_group_size(self):
        rollout = self.config.actor_rollout_ref.rollout
        saved = rollout.n
        with open_dict(self.config):
            rollout.n = self.responses_per_prompt
        try:
            yield
        finally:
            with open_dict(self.config):
                rollout.n = saved

    def actor_update_flags(self) -> dict:
        """Hook: extra non-tensor flags for the actor update's TensorDict (e.g. the Composer's `distillation_use_topk`,
        which makes verl's engine call the installed loss function as a logits processor)."""
        return {}

    def update_actor(self, batch: DataProto, step: StepState) -> DataProto:
        """Hook: verl's actor update on `batch` (mini-batches of `responses_per_prompt`-row groups, with
        `actor_update_flags()`); returns verl's output, its metrics in `meta_info["metrics"]`."""
        with self._rollout_n_as_group_size(), update_flags(self.actor_rollout_wg, self.actor_update_flags()):
            return super()._update_actor(batch)

    def _update_critic(self, batch: DataProto) -> DataProto:
        with self._rollout_n_as_group_size():
            return super()._update_critic(batch)

    def after_update(self, batch: DataProto, step: StepState) -> None:
        """Hook: metrics of the trained batch, added to `step.metrics` once the update is done."""

    def _batch_metrics(self, batch: DataProto, metrics: dict) -> dict:
        """The step's metrics known once its update is done (all but the times)."""
        m = {"training/global_step": self.global_steps, "rollout/generate_calls": self.generate_calls}
        m.update(compute_data_metrics(batch=batch, use_critic=self.use_critic))
        m.update(compute_variance_proxy_metrics(batch=batch, gradient_norm=metrics.get("actor/grad_norm", None)))
        nt = batch.non_tensor_batch
        m.update(
            compute_spec_decode_metrics(
                nt.get("spec_num_draft_tokens"), nt.get("spec_num_accepted_tokens"), nt.get("spec_num_verify_steps")
            )
        )
        m.update(gdpo_metrics(batch, self.config.algorithm))
        return m
