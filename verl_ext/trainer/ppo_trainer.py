"""The project's trainer base: verl 0.9.1's legacy RayPPOTrainer with a step that feeds token-level estimators.

verl's `fit()` is one long loop that (a) passes estimators only rewards, masks and uids and (b) pops the per-token
entropies. This class keeps verl's workers, rollout, checkpointing and validation, and splits the loop into
`training_batches()` (where the data for one step comes from: one dataloader batch here; the fast DAPO curriculum
in recipe/fast_dapo) and `train_on_batch()` (reward -> log-probs -> advantages -> updates), which every recipe
shares. The class is built from three rooms mixed into verl's trainer: the loop (`loop.py`, `TrainLoopMixin`), one
step on a generated batch (`step.py`, `TrainStepMixin`) and the checkpoint state beyond verl's (`checkpoints.py`,
`CheckpointMixin`); this module holds what they share and the hooks' list. On top of verl it adds:

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

import numpy as np
from verl.trainer.ppo.ray_trainer import RayPPOTrainer

from verl_ext.advantage import AdvantageConfig, PlanningDetector, SepaController, validate_algorithm_config
from verl_ext.config.trainer_settings import read_trainer_extras
from verl_ext.metrics_log.console import ALL_SOURCES
from verl_ext.metrics_log.run_log import RunLog
from verl_ext.trainer.checkpoints import CheckpointMixin
from verl_ext.trainer.clock import TrainClock
from verl_ext.trainer.fidelity import BASE_FIDELITY, TrainerFidelity, check_fidelity
from verl_ext.trainer.heldout import HeldoutEval
from verl_ext.trainer.loop import TrainLoopMixin
from verl_ext.trainer.profiling import ProfileSchedule
from verl_ext.trainer.step import TrainStepMixin

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


class ExtRayPPOTrainer(TrainStepMixin, TrainLoopMixin, CheckpointMixin, RayPPOTrainer):
    """verl's RayPPOTrainer with the project's step (step.py), loop (loop.py) and checkpoint state
    (checkpoints.py); this class builds what they share and keeps verl's validation, pooled over data sources."""

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
        trainer = self.config.trainer
        extras = read_trainer_extras(trainer)
        self.run_log = RunLog(extras, trainer.get("logger"), trainer.experiment_name)
        # what the driver process prints when the run ends (the TaskRunner returns them: verl_ext/trainer/launch.py)
        self.closing_lines: list[str] = []
        self.profile = ProfileSchedule.from_config(self.config.get("global_profiler"))
        self._profiling_step = False  # the current step is profiled: generate() profiles the rollout servers too
        self.max_steps_duration = 0.0  # longest step so far, for the ESI expiry check
        self.resume_epoch = 0
        # responses per held-out prompt for pass@k at the last step and under val_only (sampled_eval.py); 0 = off
        self.pass_at_k = extras.responses_for_pass_at_k
        # the training-time budget in seconds (trainer.max_train_minutes; None: total_training_steps only)
        self.max_train_s = None if extras.max_train_minutes is None else 60.0 * extras.max_train_minutes
        # the large held-out evaluation at the first and last step (`trainer.heldout`, heldout.py); off when unset
        self.heldout = HeldoutEval(extras.heldout)

    def _val_metrics_update(self, data_sources, sample_uids, reward_extra_infos_dict, sample_turns):
        """verl's per-data-source validation metrics, and with several data sources the same metrics over all of
        them (`val-core/all/...`: each sample weighs the same), which the console line and summary report."""
        metrics = super()._val_metrics_update(data_sources, sample_uids, reward_extra_infos_dict, sample_turns)
        if len(set(np.asarray(data_sources).tolist())) > 1:
            pooled = np.full(len(data_sources), ALL_SOURCES, dtype=object)
            overall = super()._val_metrics_update(pooled, sample_uids, reward_extra_infos_dict, [])
            metrics.update({k: v for k, v in overall.items() if f"/{ALL_SOURCES}/" in k})
        return metrics
