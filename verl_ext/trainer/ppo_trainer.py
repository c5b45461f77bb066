"""The project's trainer base: verl 0.9.1's legacy RayPPOTrainer with a step that feeds token-level estimators.

verl's `fit()` is one long loop that (a) passes estimators only rewards, masks and uids and (b) pops the per-token
entropies. This class keeps verl's workers, rollout, checkpointing and validation, and splits the loop into
`training_batches()` (where the data for one step comes from: one dataloader batch here; the fast DAPO curriculum
in recipe/fast_dapo) and `train_on_batch()` (reward -> log-probs -> advantages -> updates), which every recipe
shares. On top of verl it adds:

- estimator inputs: old log-probs, true per-token entropies (kept, not popped, when `uncertainty_kind` needs them),
  planning-token masks from `PlanningDetector`, the step, and the SEPA lambda from a controller whose state is saved
  in and restored from verl checkpoints (`global_step_N/verl_ext_state.pt`);
- the run log (`verl_ext/metrics_log/run_log.py`, `RunLog`): the tracker, a streaming JSONL metrics log
  (`trainer.jsonl_metrics_path`) cut back to the checkpoint's step on resume, the compact console, with
  `trainer.plot_keys` a PNG of those metrics' curves next to it when the run ends, and no step missing from that log
  when a crash falls between a step's checkpoint and its row (the checkpoint holds the row so far and the resumed run
  writes it); its closing lines are returned to the driver process (`closing_lines`, the TaskRunner's result);
- cumulative training time that survives resume (`verl_ext/trainer/clock.py`, `TrainClock`).

Every other feature of verl's `fit` is either carried over here by calling verl's own function for it (rollout
correction in decoupled and bypass mode, val_only, rollout dumps, the profiler, ESI saves, images_seqlens, the
variance-proxy / spec-decode / GDPO metrics, `on_batch_end`) or rejected before Ray starts: the table and the checks
are in `verl_ext/trainer/fidelity.py`.

A recipe changes the step through the public hooks below and nothing else of this class (docs/ARCHITECTURE.md,
"Trainer hooks"); each default keeps verl's behaviour:

- `training_batches()`: where each step's (batch, metrics, timing_raw) comes from; `generate()` is its rollout call;
- `new_step(metrics, timing_raw) -> StepState`: the state one step hands its hooks (a recipe subclasses `StepState`);
- `prepare_batch(batch, step)`: the generated batch before reward and log-probs (agent episodes' outcomes);
- `compute_advantages(batch, step)`: the estimator's advantages and returns (the Composer's channels);
- `update_actor(batch, step)` and `actor_update_flags()`: the actor update and its extra TensorDict flags;
- `after_update(batch, step)`: what the trained batch adds to the step's metrics;
- `extra_state_dict()` / `load_extra_state_dict(state)` / `on_resume(folder)`: checkpointed state beyond verl's;
- `sync_weights(timing_raw)` / `sleep_rollout()`: the rollout's weight sync and its sleep before a training step;
- `responses_per_prompt`: the training group size, when a recipe's groups are larger than rollout.n;
- `on_run_end()`: after every run, finished, failed or interrupted (close what the recipe opened).
"""

from __future__ import annotations

import contextlib
import os
import time
import traceback
from dataclasses import dataclass

import numpy as np
import torch
from omegaconf import open_dict
from verl import DataProto
from verl.trainer.ppo import core_algos
from verl.trainer.ppo.core_algos import agg_loss
from verl.trainer.ppo.metric_utils import (
    compute_data_metrics,
    compute_throughout_metrics,
    compute_timing_metrics,
    compute_variance_proxy_metrics,
)
from verl.trainer.ppo.ray_trainer import (
    RayPPOTrainer,
    apply_kl_penalty,
    compute_advantage,
    compute_response_mask,
    compute_spec_decode_metrics,
)
from verl.trainer.ppo.reward import extract_reward
from verl.trainer.ppo.rollout_corr_helper import apply_bypass_mode, compute_rollout_correction_and_add_to_batch
from verl.utils.checkpoint.checkpoint_manager import find_latest_ckpt_path, should_save_ckpt_esi
from verl.utils.debug import marked_timer
from verl.utils.metric import reduce_metrics
from verl.utils.skip.skip_manager import SkipManager

from verl_ext.advantage import AdvantageConfig, PlanningDetector, SepaController, validate_algorithm_config
from verl_ext.config.preflight.config_checks import check_pass_at_k
from verl_ext.config.trainer_settings import read_heldout
from verl_ext.metrics_log.console import ALL_SOURCES
from verl_ext.metrics_log.failure import failed_line, failure_cause, resume_line
from verl_ext.metrics_log.run_log import RunLog
from verl_ext.metrics_log.terminal import phase
from verl_ext.shared_prefix import FLAG as SHARED_PREFIX_FLAG
from verl_ext.trainer.clock import TrainClock
from verl_ext.trainer.fidelity import BASE_FIDELITY, TrainerFidelity, check_fidelity
from verl_ext.trainer.heldout import HeldoutEval
from verl_ext.trainer.profiling import ProfileSchedule
from verl_ext.trainer.sampled_eval import pass_at_k_metrics, sample_counts
from verl_ext.trainer.uids import assign_uids
from verl_ext.trainer.update_flags import update_flags

EXTRA_STATE_FILE = "verl_ext_state.pt"


# The methods of ExtRayPPOTrainer a recipe (or a mixin) may override: the hooks of the module docstring, and verl's
# own `init_workers` and `_create_dataloader` (tests/trainer/test_hooks.py holds every trainer of the project to it).
HOOKS = frozenset(
    {
        "training_batches",
        "generate",
        "new_step",
        "prepare_batch",
        "compute_advantages",
        "update_actor",
        "actor_update_flags",
        "after_update",
        "extra_state_dict",
        "load_extra_state_dict",
        "on_resume",
        "sync_weights",
        "sleep_rollout",
        "responses_per_prompt",
        "on_run_end",
        "init_workers",
        "_create_dataloader",
    }
)


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


class ExtRayPPOTrainer(RayPPOTrainer):
    # what this trainer changes of verl's step, for verl_ext/trainer/fidelity.py's checks (a recipe's trainer
    # declares its own; the recipes' config checks run the same check in the driver)
    fidelity: TrainerFidelity = BASE_FIDELITY

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        check_fidelity(self.config, self.fidelity)
        self._bypass_loss_for_workers()
        # None when adv_estimator is one of verl's own (gae, grpo, rloo, ...): the step then calls verl's path.
        self.adv_config: AdvantageConfig | None = validate_algorithm_config(self.config.algorithm)
        uses_sepa = self.adv_config is not None and self.adv_config.uses_sepa
        self.sepa = SepaController.from_config(self.adv_config.sepa) if uses_sepa else None
        self.planning_detector = (
            PlanningDetector(self.tokenizer, self.adv_config.strategic_grams)
            if self.adv_config and self.adv_config.needs_planning
            else None
        )
        self.clock = TrainClock()  # the training loop's wall time, carried across resumes by the checkpoint
        self._rollout_awake = False
        self.generate_calls = 0  # rollout calls since the run began (logged as rollout/generate_calls)
        # the tracker, JSONL log, console, crash-row recovery, summary and plot; its settings are checked here,
        # before the workers start, not when the run ends
        self.run_log = RunLog(self.config.trainer)
        # what the driver process prints when the run ends (the TaskRunner returns them: verl_ext/trainer/launch.py)
        self.closing_lines: list[str] = []
        self.profile = ProfileSchedule.from_config(self.config.get("global_profiler"))
        self._profiling_step = False  # the current step is profiled: generate() profiles the rollout servers too
        self.max_steps_duration = 0.0  # longest step so far, for the ESI expiry check
        self.resume_epoch = 0
        # responses per held-out prompt for pass@k at the last step and under val_only (sampled_eval.py); 0 = off
        self.pass_at_k = check_pass_at_k(self.config.trainer.get("pass_at_k"))
        # the large held-out evaluation at the first and last step (`trainer.heldout`, heldout.py); off when unset
        self.heldout = HeldoutEval(read_heldout(self.config))

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

    # ------------------------------------------------------------------ state that verl's checkpoints do not hold
    def extra_state_dict(self) -> dict:
        return {
            "sepa": self.sepa.state_dict() if self.sepa else None,
            "train_time_s": self.clock.total_s,
            "generate_calls": self.generate_calls,
            "row_so_far": self.run_log.row_so_far,
        }

    def load_extra_state_dict(self, state: dict) -> None:
        if self.sepa and state.get("sepa") is not None:
            self.sepa.load_state_dict(state["sepa"])
        self.clock = TrainClock(float(state.get("train_time_s", 0.0)))
        self.generate_calls = int(state.get("generate_calls", 0))
        self.run_log.resumed_row = state.get("row_so_far")

    def _save_checkpoint(self):
        # Written before verl's part: verl writes `latest_checkpointed_iteration.txt` last, and that file is what a
        # resume trusts, so everything of the checkpoint must be on disk when it appears.
        folder = os.path.join(self.config.trainer.default_local_dir, f"global_step_{self.global_steps}")
        os.makedirs(folder, exist_ok=True)
        tmp = os.path.join(folder, EXTRA_STATE_FILE + ".tmp")
        torch.save(self.extra_state_dict(), tmp)
        os.replace(tmp, os.path.join(folder, EXTRA_STATE_FILE))  # atomic: a crash never leaves half a file
        super()._save_checkpoint()

    def _load_checkpoint(self):
        super()._load_checkpoint()
        self.resume_epoch = self.global_steps // len(self.train_dataloader)  # as verl: the dataloader epoch to resume
        if self.global_steps == 0:
            return
        folder = self._resumed_step_folder()
        path = os.path.join(folder, EXTRA_STATE_FILE) if folder else None
        if path and os.path.exists(path):
            self.load_extra_state_dict(torch.load(path, weights_only=False))
        else:
            print(f"[verl_ext] warning: no {EXTRA_STATE_FILE} beside the checkpoint; extension state starts fresh")
        if folder:
            self.on_resume(folder)
        # the resume point, on the terminal and in a cluster job's log (the user's only view of a job)
        phase(f"resumed from {folder or 'the checkpoint'} at step {self.global_steps}")

    def on_resume(self, folder: str) -> None:
        """Hook: after a resumed run loaded the checkpoint in `folder` (verl's state and `load_extra_state_dict`)."""

    def _resumed_step_folder(self) -> str | None:
        if self.config.trainer.resume_mode == "resume_path":
            return self.config.trainer.resume_from_path
        root = self.config.trainer.default_local_dir
        return find_latest_ckpt_path(root if os.path.isabs(root) else os.path.join(os.getcwd(), root))

    # ------------------------------------------------------------------ where a step's data comes from
    def generate(self, gen_batch: DataProto, timing_raw: dict) -> DataProto:
        """One call to verl's rollout (AgentLoopManager -> vLLM servers).

        Replicas are put to sleep (to free accelerator memory for training) only when a training step starts, not
        after every call as verl does: a curriculum makes several calls in a row, and a sleeping replica parks
        requests until the next weight sync wakes it, which would never come.
        """
        with marked_timer("gen", timing_raw, color="red"):
            if self._profiling_step:
                self.llm_server_manager.start_profile()
            out = self.async_rollout_manager.generate_sequences(gen_batch)
            if self._profiling_step:
                self.llm_server_manager.stop_profile()
        self.generate_calls += 1
        timing_raw.update(out.meta_info.pop("timing", {}))
        return out

    def sleep_rollout(self) -> None:
        """Hook: put the rollout replicas to sleep before a training step (frees their accelerator memory)."""
        if self._rollout_awake:
            self.checkpoint_manager.sleep_replicas()
            self._rollout_awake = False

    def training_batches(self):
        """Yield (batch, metrics, timing_raw) per training step: here one dataloader batch, N responses per prompt."""
        n = self.config.actor_rollout_ref.rollout.n
        for epoch in range(self.resume_epoch, self.config.trainer.total_epochs):
            for batch_dict in self.train_dataloader:
                metrics, timing_raw = {"training/epoch": epoch}, {}
                batch = DataProto.from_single_dict(batch_dict)
                batch.meta_info["temperature"] = self.config.actor_rollout_ref.rollout.temperature
                assign_uids(batch)
                gen_batch = self._get_gen_batch(batch)
                gen_batch.meta_info["global_steps"] = self.global_steps
                out = self.generate(gen_batch.repeat(repeat_times=n, interleave=True), timing_raw)
                yield batch.repeat(repeat_times=n, interleave=True).union(out), metrics, timing_raw

    # ------------------------------------------------------------------ one training step on a generated batch
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

    def new_step(self, metrics: dict, timing_raw: dict) -> StepState:
        """Hook: the state this step hands `prepare_batch`, `compute_advantages`, `update_actor` and `after_update`."""
        return StepState(metrics, timing_raw)

    def prepare_batch(self, batch: DataProto, step: StepState) -> DataProto:
        """Hook: the generated batch before its reward and log-probs are computed."""
        return batch

    def after_update(self, batch: DataProto, step: StepState) -> None:
        """Hook: metrics of the trained batch, added to `step.metrics` once the update is done."""

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

    def sync_weights(self, timing_raw: dict) -> None:
        """Hook: the trained weights to the rollout replicas (and wake them)."""
        with marked_timer("update_weights", timing_raw, color="red"):
            self.checkpoint_manager.update_weights(self.global_steps)  # also wakes the replicas
        self._rollout_awake = True

    # ------------------------------------------------------------------ the loop
    def on_run_end(self) -> None:
        """Hook: the run is over (finished, failed or interrupted), after the run log closed: close what the recipe
        opened (teacher pools, episode ledgers); it may add to `closing_lines`."""

    def fit(self):
        try:
            self._fit()
        finally:
            self.on_run_end()

    def _fit(self):
        """The run: its start (`_start_run`, `_first_validation`), then the training loop. Whatever happens in any of
        them, the run log closes (`_close_run`): with the curves and the summary when the run finished, with where
        and why it failed and where a resume starts when it did not."""
        val_only = bool(self.config.trainer.get("val_only", False))
        self._in_loop = False
        try:
            self._start_run(val_only)
            self._first_validation(val_only)
            if not val_only:
                self._train()
        except BaseException as exc:
            self._close_run(plot=False, failure=exc)
            raise
        self._close_run(plot=not val_only)

    def _train(self) -> None:
        """The training loop, from the step after the checkpoint's to the last or until the data runs out."""
        self.run_log.start_progress(self.global_steps)
        self.clock.start()  # the whole loop (generation included) counts as training time
        self.global_steps += 1
        self._in_loop = True
        first_step = self.global_steps
        if self.global_steps > self.total_training_steps:
            return
        batches = self.training_batches()
        while True:
            is_last = self.global_steps >= self.total_training_steps
            started = self._start_step(batches, first_step)
            if started is None:
                return  # the data ran out
            batch, metrics, timing_raw = started
            batch = self._run_step(batch, metrics, timing_raw, is_last)
            seconds = self.clock.lap()  # since the previous row (a checkpoint save also reads the clock)
            metrics.update(self._timing_metrics(batch, timing_raw))
            self.run_log.step(self.global_steps, metrics, seconds)
            if is_last:
                return
            self._end_step(batch)

    def _start_run(self, val_only: bool) -> None:
        """Everything before the first step: the tracker, the checkpoint to resume from, the rollout's weights,
        verl's skip manager, the JSONL log, and the row a crash may have lost (`RunLog.recover_row`; not under
        val_only, which validates the checkpoint once and writes no training row)."""
        # Rollout dumps are written by verl's executor, shut down at the end of a run: a second fit() needs a new one.
        if self._dump_executor._shutdown:
            self._init_dump_executor()
        self.run_log.open_tracker(self.config)
        self.global_steps = 0
        self._load_checkpoint()
        self.checkpoint_manager.update_weights(self.global_steps)
        self._rollout_awake = True
        SkipManager.init(self.config)  # skip.rollout: verl's rollout dump/replay, keyed by the step set below
        self.run_log.open(self.global_steps, self.total_training_steps)
        if not val_only:
            self.run_log.recover_row(self.global_steps, validate=self._validate)

    def _first_validation(self, val_only: bool) -> None:
        """Validation before training is logged as step 0 of a fresh run; val_only validates (a resumed checkpoint
        too) and stops, whatever val_before_train says."""
        fresh, metrics = self.global_steps == 0, {}
        if (self.config.trainer.get("val_before_train", True) and fresh) or val_only:
            phase(f"validating on {len(self.val_dataset)} validation prompts")
            metrics = self._validate()
            if val_only:
                metrics.update(self.held_out_pass_at_k())
        if (fresh or val_only) and self.heldout.due("first", val_only):
            metrics.update(self.heldout.evaluate(self))
        if metrics:
            self.run_log.first_validation(self.global_steps, metrics)

    def _start_step(self, batches, first_step: int) -> tuple[DataProto, dict, dict] | None:
        """The step's (batch, metrics, timing_raw) from `batches`, or None when the data ran out. The profile window
        opens before the step's data is generated: a curriculum's generation calls for this step happen inside
        training_batches()."""
        self._finalize_async_calls(blocking=False)
        SkipManager.set_step(self.global_steps)
        self._profiling_step = self.profile.profiled(self.global_steps)
        profile_timing: dict = {}  # the step's timing_raw comes with its data, below
        with marked_timer("start_profile", profile_timing):
            self._start_profiling(self.profile.start(self.global_steps, self.global_steps == first_step))
        try:
            batch, metrics, timing_raw = next(batches)
        except StopIteration:
            self._stop_profiling(self.profile.profiled(self.global_steps), run_command=True)
            return None
        timing_raw.update(profile_timing)
        return batch, metrics, timing_raw

    def _run_step(self, batch: DataProto, metrics: dict, timing_raw: dict, is_last: bool) -> DataProto:
        """Train on the batch (returned as trained, its metrics added to `metrics`), save a checkpoint when one is
        due, sync the rollout's weights, validate when due, and close the step's profile window."""
        test_freq = self.config.trainer.test_freq
        validates = test_freq > 0 and (is_last or self.global_steps % test_freq == 0)
        with marked_timer("step", timing_raw):
            batch = self.train_on_batch(batch, metrics, timing_raw)
            metrics.update(self._batch_metrics(batch, metrics))
            self._maybe_save_checkpoint(is_last, timing_raw, (batch, metrics, validates))
            self.sync_weights(timing_raw)
        if validates:
            with marked_timer("testing", timing_raw, color="green"):
                metrics.update(self._validate())
        if is_last and self.pass_at_k:
            with marked_timer("pass_at_k", timing_raw, color="green"):
                metrics.update(self.held_out_pass_at_k())
        if is_last and self.heldout.due("last"):
            with marked_timer("heldout", timing_raw, color="green"):
                metrics.update(self.heldout.evaluate(self))
        with marked_timer("stop_profile", timing_raw):
            self._stop_profiling(
                self.profile.stop(self.global_steps, is_last),
                run_command=self.profile.run_finish_command(self.global_steps, is_last),
            )
        self._profiling_step = False
        self.max_steps_duration = max(self.max_steps_duration, timing_raw["step"])
        return batch

    def held_out_pass_at_k(self) -> dict:
        """`val-pass/<source>/pass@j` of the current weights: `trainer.pass_at_k` responses per validation prompt at
        the training's sampling settings (sampled_eval.py); {} when off or without validation data."""
        if not self.pass_at_k or self.val_dataset is None:
            return {}
        per_call = self.config.data.get("val_batch_size") or len(self.val_dataset)
        desc = f"held-out pass@k: {self.pass_at_k} responses per prompt"
        sampled = sample_counts(self, self.val_dataset, self.pass_at_k, int(per_call), "acc", desc=desc)
        return pass_at_k_metrics(sampled)

    def _end_step(self, batch: DataProto) -> None:
        self.global_steps += 1
        if hasattr(self.train_dataset, "on_batch_end"):  # verl's experimental hook: the dataset may change
            self.train_dataset.on_batch_end(batch=batch)

    def _maybe_save_checkpoint(
        self, is_last: bool, timing_raw: dict, step_so_far: tuple[DataProto, dict, bool] | None = None
    ) -> None:
        """Save on the last step, every `save_freq` steps, and (verl's ESI check) when the capacity block this job
        runs on is about to expire.

        As in verl, the save comes before the weight sync and validation (the rollout still sleeps: on a GPU shared
        with it the actor has the memory to itself), so before the step's metrics row can be written. The row so far,
        from `step_so_far` = (batch, metrics, whether the step validates), goes into the checkpoint so that a crash
        in between leaves no gap (`RunLog.holding_row`, `RunLog.recover_row`)."""
        save_freq = self.config.trainer.save_freq
        if save_freq <= 0:
            return
        esi = should_save_ckpt_esi(
            max_steps_duration=self.max_steps_duration, redundant_time=self.config.trainer.get("esi_redundant_time", 0)
        )
        if is_last or self.global_steps % save_freq == 0 or esi:
            if esi:
                print("[verl_ext] force saving a checkpoint: the instance's capacity block expires soon")
            with marked_timer("save_checkpoint", timing_raw, color="green"):
                self.clock.read()  # the checkpoint's training time, and the held row's
                holding = contextlib.nullcontext()
                if step_so_far is not None:
                    batch, metrics, validates = step_so_far
                    times = {"time/wall": time.time(), "time/train_total_s": self.clock.total_s}
                    row = {**metrics, **compute_timing_metrics(batch=batch, timing_raw=timing_raw), **times}
                    holding = self.run_log.holding_row(self.global_steps, validates, row)
                with holding:
                    self._save_checkpoint()

    def _finalize_async_calls(self, blocking: bool) -> None:
        """verl's asynchronous checkpoint saves finish here (worker groups that have them)."""
        if hasattr(self.actor_rollout_wg, "async_calls_finalize_fn_exec"):
            self.actor_rollout_wg.async_calls_finalize_fn_exec(blocking=blocking)

    def _val_metrics_update(self, data_sources, sample_uids, reward_extra_infos_dict, sample_turns):
        """verl's per-data-source validation metrics, and with several data sources the same metrics over all of
        them (`val-core/all/...`: each sample weighs the same), which the console line and summary report."""
        metrics = super()._val_metrics_update(data_sources, sample_uids, reward_extra_infos_dict, sample_turns)
        if len(set(np.asarray(data_sources).tolist())) > 1:
            pooled = np.full(len(data_sources), ALL_SOURCES, dtype=object)
            overall = super()._val_metrics_update(pooled, sample_uids, reward_extra_infos_dict, [])
            metrics.update({k: v for k, v in overall.items() if f"/{ALL_SOURCES}/" in k})
        return metrics

    def _close_run(self, plot: bool, failure: BaseException | None = None) -> None:
        """The run's end: verl's asynchronous saves and rollout dumps finish, the run log closes (the curves drawn if
        `plot`), and its closing lines are kept for the driver (`closing_lines`). The run log closes whatever fails
        before (an error finishing the saves or dumps is printed to the log, and raised if the run had not failed).
        A failed run's closing lines say where and why it failed and where a resume starts, never the finished run's
        summary; an error while closing then goes to the log only: the run's first error is the one that
        propagates."""
        error: Exception | None = None
        for finish in (lambda: self._finalize_async_calls(blocking=True), self._shutdown_dump_executor):
            try:
                finish()
            except Exception as e:  # noqa: BLE001 -- the run log must close; printed here, raised below
                traceback.print_exc()
                error = error or e
        failed = failure or error
        try:
            lines = self.run_log.close(plot=plot and failed is None, failed=failed is not None)
        except Exception:
            if failed is None:
                raise
            traceback.print_exc()
            lines = []
        self.closing_lines = lines if failed is None else self._failure_lines(failed)
        if error is not None and failure is None:
            raise error

    def _failure_lines(self, failure: BaseException) -> list[str]:
        """`[verl_ext] run failed at step 5/20: <cause>` (`before step N/T` when the loop had not begun: the start,
        a resume or the validation before training) and the line saying where a resume starts."""
        total = self.total_training_steps
        where = (
            f"at step {self.global_steps}/{total}" if self._in_loop else f"before step {self.global_steps + 1}/{total}"
        )
        trainer = self.config.trainer
        root = trainer.default_local_dir
        run_dir = root if os.path.isabs(root) else os.path.join(os.getcwd(), root)  # as verl's resume finds it
        resume = resume_line(trainer.get("resume_mode", "auto"), run_dir, trainer.get("resume_from_path"))
        return [failed_line(failure_cause(failure), where), resume]

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

    def _timing_metrics(self, batch: DataProto, timing_raw: dict) -> dict:
        n_gpus = self.resource_pool_manager.get_n_gpus()
        return {
            "time/wall": time.time(),
            "time/train_total_s": self.clock.total_s,
            **compute_timing_metrics(batch=batch, timing_raw=timing_raw),
            **compute_throughout_metrics(batch=batch, timing_raw=timing_raw, n_gpus=n_gpus),
        }
