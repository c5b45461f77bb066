"""RayFastDAPOTrainer: two-phase curriculum sampling with ONE fused generation call per iteration (SPEED-RL).

Each iteration that does not yet have a full training batch draws `data.gen_batch_size` fresh prompts, asks the
DataController for the fused generation batch (fresh prompts x n for screening + prompts kept earlier x (N - n) for
continuation), pads it so verl's agent-loop workers get equal chunks, generates once, and hands the rows back to the
controller. Whenever the controller holds `train_batch_size` complete groups, one training step runs on them.
`global_steps` counts training steps only. The controller's buffers are part of the checkpoint.

`curriculum.enable=false` is plain sampling (N per prompt, no filter); `curriculum.mode=dapo` is verl-recipe DAPO
dynamic sampling (N per prompt, drop uniform groups, generate again until the batch is full). Same loop, same
controller, so the three are compared side by side.
"""

from __future__ import annotations

import os

import numpy as np
import torch
from omegaconf import OmegaConf, open_dict
from torchdata.stateful_dataloader import StatefulDataLoader
from verl import DataProto
from verl.utils.debug import marked_timer

from recipe.fast_dapo.config_check import FIDELITY, CurriculumSettings, curriculum_settings
from verl_ext.curriculum import PAD_KEY, PHASE_KEY, DataController, pad_to_multiple
from verl_ext.curriculum.memory import probe_outcome
from verl_ext.curriculum.staleness import (
    VERSION_KEY,
    probs_diff_by_staleness,
    rescreen_stale,
    staleness,
    staleness_metrics,
)
from verl_ext.metrics_log.keys import CURRICULUM_PREFIX, MIXED_FRAC_KEY, TRAIN_BATCH_GROUPS_KEY
from verl_ext.trainer.agent_episodes import AgentEpisodesMixin, ok_episode_rows
from verl_ext.trainer.ppo_trainer import ExtRayPPOTrainer
from verl_ext.trainer.probe import read_pass_rates
from verl_ext.trainer.step import StepState
from verl_ext.trainer.uids import assign_uids


class GenerationBudgetExceeded(RuntimeError):
    pass


def data_controller(s: CurriculumSettings) -> DataController:
    """The curriculum's DataController as the run's `curriculum` settings configure it."""
    return DataController(
        train_batch_size=s.train_batch_size,
        n=s.n,
        n_continue=s.n_continue,
        mode=s.mode,
        filter_metric=s.filter_metric,
        memory=s.memory,
    )


class RayFastDAPOTrainer(ExtRayPPOTrainer):
    fidelity = FIDELITY

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        s = curriculum_settings(self.config)
        self.max_num_gen_batches = s.max_num_gen_batches
        self.auto_gen_batch = s.auto_gen_batch
        self.gen_batch_size = s.gen_batch_size
        self.controller = data_controller(s)
        if self.controller.memory is not None and s.memory.init_file:
            # a pass-rate probe's outcomes as each prompt's first screening (a resumed run restores its own memory)
            keys, correct, k = read_pass_rates(s.memory.init_file)
            self.controller.memory.record(keys, probe_outcome(correct, k))
        self.data_epoch = 0  # epochs of the prompt dataloader consumed (independent of training steps)
        self.pad_rows = 0  # rows added so the fused batch splits evenly over agent-loop workers
        self._batch_stats: dict = {}
        # Re-screen kept prompts whose screening responses are older than this many updates (None = never).
        self.max_screen_staleness = s.max_screen_staleness
        self.rescreened_prompts = 0

    def _create_dataloader(self, train_dataset, val_dataset, collate_fn, train_sampler):
        super()._create_dataloader(train_dataset, val_dataset, collate_fn, train_sampler)
        # verl drops the last partial batch of every epoch; the curriculum must see every prompt.
        dl = self.train_dataloader
        self.train_dataloader = StatefulDataLoader(
            dataset=dl.dataset,
            batch_size=dl.batch_size,
            num_workers=dl.num_workers,
            drop_last=False,
            collate_fn=dl.collate_fn,
            sampler=dl.sampler,
        )
        if self.config.trainer.total_training_steps is None:
            # verl counts dataloader batches; here a step is train_batch_size kept prompts. Without an explicit
            # total, plan the LR schedule for the most steps the data can give (every prompt kept).
            steps = len(dl.dataset) * self.config.trainer.total_epochs // self.config.data.train_batch_size
            self.total_training_steps = max(steps, 1)
            with open_dict(self.config):
                self.config.actor_rollout_ref.actor.optim.total_training_steps = self.total_training_steps
                if OmegaConf.select(self.config, "critic.optim"):
                    self.config.critic.optim.total_training_steps = self.total_training_steps

    # ---------------------------------------------------------------- checkpointed state beyond verl's
    def extra_state_dict(self) -> dict:
        return {
            **super().extra_state_dict(),
            "controller": self.controller.state_dict(),
            "data_epoch": self.data_epoch,
            "pad_rows": self.pad_rows,
            "rescreened_prompts": self.rescreened_prompts,
        }

    def load_extra_state_dict(self, state: dict) -> None:
        super().load_extra_state_dict(state)
        self.controller.load_state_dict(state["controller"])
        self.data_epoch = int(state.get("data_epoch", 0))
        self.pad_rows = int(state.get("pad_rows", 0))
        self.rescreened_prompts = int(state.get("rescreened_prompts", 0))

    def on_resume(self, folder: str) -> None:
        # verl skips the dataloader restore when global_steps is a multiple of len(dataloader): true for plain PPO,
        # meaningless here (steps are not batches). Restore it unconditionally.
        path = os.path.join(folder, "data.pt")
        if os.path.exists(path):
            self.train_dataloader.load_state_dict(torch.load(path, weights_only=False))

    @property
    def responses_per_prompt(self) -> int:
        return self.controller.N

    def _controller_metrics(self) -> dict:
        """The controller's counters and what the step's batch was made of (`curriculum/*`)."""
        m = {f"{CURRICULUM_PREFIX}{k}": float(v) for k, v in self.controller.counters.items()}
        m["curriculum/rescreened_prompts"] = float(self.rescreened_prompts)
        if self.auto_gen_batch.enable:
            m["curriculum/screen_prompts_last_call"] = float(self.controller.generation_counts.get("screen_prompts", 0))
        m.update(self._batch_stats)
        return m

    # ---------------------------------------------------------------- the curriculum loop
    def _fresh_prompts(self, it):
        """Next dataloader batch with uids, moving to the next epoch when one ends; None when all epochs are done."""
        while self.data_epoch < self.config.trainer.total_epochs:
            if it[0] is None:
                it[0] = iter(self.train_dataloader)
            try:
                batch = DataProto.from_single_dict(next(it[0]))
            except StopIteration:
                it[0] = None
                self.data_epoch += 1
                continue
            assign_uids(batch)
            return batch
        return None

    def training_batches(self):
        it = [None]
        num_workers = self.config.actor_rollout_ref.rollout.agent.num_workers
        timing_raw: dict = {}
        while True:
            if self.controller.is_ready_for_training():
                batch = self.controller.get_training_data()
                self._batch_stats = self._describe(batch)
                batch.meta_info["temperature"] = self.config.actor_rollout_ref.rollout.temperature
                yield batch, {"training/epoch": self.data_epoch}, timing_raw
                timing_raw = {}
                continue
            screen = self._screening_target()
            data_left = self._queue_fresh_prompts(it, screen)
            c = self.controller.counters
            if not data_left and c["prompts_awaiting_screening"] == 0 and c["prompts_awaiting_continuation"] == 0:
                return  # every prompt of every epoch has been used; fewer than a batch of groups remain
            self._check_generation_budget()
            self._rescreen_stale()
            if not self.controller.has_generation_inputs:
                continue  # the pass-rate memory skipped every fresh prompt of this batch: draw the next one
            with marked_timer("gen_total", timing_raw):
                fused = self.controller.get_generation_inputs(max_fresh=screen)
                padded, n_pad = pad_to_multiple(fused, num_workers)
                self.pad_rows += n_pad
                # verl's _get_gen_batch moves every non-reward column into the generation batch; the controller's
                # markers must come back beside the responses.
                markers = {k: padded.non_tensor_batch[k] for k in (PHASE_KEY, PAD_KEY)}
                gen_batch = self._get_gen_batch(padded)
                gen_batch.meta_info.update(
                    global_steps=self.global_steps, temperature=self.config.actor_rollout_ref.rollout.temperature
                )
                out = self.generate(gen_batch, timing_raw)
                rows = padded.union(out)
                rows.non_tensor_batch.update(markers)
                # The policy that sampled these rows: step global_steps trains with the weights generating now.
                rows.non_tensor_batch[VERSION_KEY] = np.full(len(rows), self.global_steps, dtype=np.int64)
                self.controller.update(
                    rows, metric_values=self._filter_metric_values(out), valid=self.screening_valid_rows(rows)
                )

    def _screening_target(self) -> int | None:
        """Fresh prompts the next call screens: None (every queued one: a dataloader batch of data.gen_batch_size)
        unless curriculum.auto_gen_batch is on."""
        a = self.auto_gen_batch
        if not a.enable:
            return None
        return self.controller.screening_target(self.gen_batch_size, confidence=a.confidence, window=a.window)

    def _queue_fresh_prompts(self, it, screen: int | None) -> bool:
        """Queue fresh prompts for the next call: one dataloader batch, or (auto) batches until ``screen`` are
        queued; prompts beyond it stay queued in the controller (checkpointed) for later calls. False when the data
        is used up."""
        while True:
            if screen is not None and self.controller.counters["prompts_awaiting_screening"] >= screen:
                return True
            fresh = self._fresh_prompts(it)
            if fresh is None:
                return False
            self.controller.add_fresh_prompts(fresh)
            if screen is None:
                return True

    def _rescreen_stale(self) -> None:
        if self.max_screen_staleness is not None:
            self.rescreened_prompts += rescreen_stale(self.controller, self.global_steps, self.max_screen_staleness)

    def after_update(self, batch: DataProto, step: StepState) -> None:
        keys = batch.batch.keys()
        if VERSION_KEY in batch.non_tensor_batch and "rollout_log_probs" in keys and "old_log_probs" in keys:
            age = staleness(batch.non_tensor_batch[VERSION_KEY], self.global_steps)
            step.metrics.update(
                probs_diff_by_staleness(
                    batch.batch["rollout_log_probs"], batch.batch["old_log_probs"], batch.batch["response_mask"], age
                )
            )
        step.metrics.update(self._controller_metrics())

    def _describe(self, batch: DataProto) -> dict:
        """What the training step receives: its size, groups, and the share of groups whose filter metric varies."""
        uids = batch.non_tensor_batch["uid"]
        metric = np.asarray(batch.non_tensor_batch[self.controller.filter_metric], dtype=float)
        _, gid = np.unique(uids, return_inverse=True)
        lo = np.full(gid.max() + 1, np.inf)
        hi = np.full(gid.max() + 1, -np.inf)
        np.minimum.at(lo, gid, metric)
        np.maximum.at(hi, gid, metric)
        return {
            "curriculum/train_batch_responses": float(len(batch)),
            TRAIN_BATCH_GROUPS_KEY: float(len(lo)),
            MIXED_FRAC_KEY: float(np.mean(hi > lo)),
            "curriculum/pad_rows_total": float(self.pad_rows),
            # Rows restored from a checkpoint written before the tag existed carry no version.
            **(
                staleness_metrics(batch.non_tensor_batch[VERSION_KEY], self.global_steps)
                if VERSION_KEY in batch.non_tensor_batch
                else {}
            ),
        }

    def screening_valid_rows(self, rows: DataProto) -> np.ndarray | None:
        """Rows the keep rule may judge a prompt by (None: all). The agent trainer leaves out dropped episodes."""
        return None

    def _filter_metric_values(self, out: DataProto):
        """The filter metric per row: a reward extra key (acc, ...) if the reward returns it, else the sequence
        score."""
        metric = self.controller.filter_metric
        if metric in out.non_tensor_batch:
            return None
        if metric in ("score", "seq_reward", "seq_final_reward"):
            return out.batch["rm_scores"].sum(-1).numpy()
        raise KeyError(
            f"curriculum.filter_metric={metric!r} is neither returned by the reward function "
            f"(extra keys: {sorted(out.meta_info.get('reward_extra_keys', []))}) nor a sequence score (score)"
        )

    def _check_generation_budget(self):
        calls = self.controller.counters["generation_calls_since_training"]
        if self.max_num_gen_batches > 0 and calls >= self.max_num_gen_batches:
            c = self.controller.counters
            raise GenerationBudgetExceeded(
                f"{calls} generation calls (max_num_gen_batches={self.max_num_gen_batches}) without filling a "
                f"training batch of {self.controller.train_batch_size} groups: keep rate {c['keep_rate']:.3f} "
                f"({c['prompts_kept']:.0f} of {c['prompts_screened']:.0f} prompts; all-correct "
                f"{c['discarded_all_correct']:.0f}, all-wrong {c['discarded_all_wrong']:.0f}). Raise "
                f"data.gen_batch_size or max_num_gen_batches (0 = no limit), raise n to screen more reliably, or use "
                f"prompts of a difficulty nearer the model's level."
            )


class AgentFastDAPOTrainer(AgentEpisodesMixin, RayFastDAPOTrainer):
    """Fast DAPO on agent episodes (`external_agent`, docs/AGENT.md): select with
    `trainer.trainer_cls=recipe.fast_dapo.fast_dapo_ray_trainer.AgentFastDAPOTrainer`."""

    def screening_valid_rows(self, rows: DataProto) -> np.ndarray | None:
        # the keep rule judges a prompt by its finished episodes only: a crashed or timed-out one says nothing about
        # the task's difficulty
        return ok_episode_rows(rows)
