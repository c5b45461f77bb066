"""The project's training loop (`TrainLoopMixin`, mixed into `ExtRayPPOTrainer`): the run's start (tracker,
resume, rollout weights, the validation and held-out evaluation before training), the steps (data from
`training_batches()`, the step, checkpoint, weight sync, validation, profiling), and the run's end, which closes
the run log whatever failed (`_close_run`: the curves and summary when it finished; where and why it failed and where
a resume starts when it did not). Hooks: `training_batches`, `generate`, `sync_weights`, `sleep_rollout`,
`on_run_end`.
"""

from __future__ import annotations

import os
import time
import traceback

from verl import DataProto
from verl.trainer.ppo.metric_utils import compute_throughout_metrics, compute_timing_metrics
from verl.utils.debug import marked_timer
from verl.utils.skip.skip_manager import SkipManager

from verl_ext.metrics_log.failure import failed_line, failure_cause, resume_line
from verl_ext.metrics_log.terminal import phase
from verl_ext.trainer.sampled_eval import pass_at_k_metrics, sample_counts
from verl_ext.trainer.uids import assign_uids

EVALUATION_TIMERS = ("testing", "pass_at_k", "heldout")  # a step's evaluations, as _run_step times them


class TrainLoopMixin:
    """The loop (module docstring); the step is `train_on_batch` (step.py), the saves `_maybe_save_checkpoint`
    (checkpoints.py)."""

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

    def sync_weights(self, timing_raw: dict) -> None:
        """Hook: the trained weights to the rollout replicas (and wake them)."""
        with marked_timer("update_weights", timing_raw, color="red"):
            self.checkpoint_manager.update_weights(self.global_steps)  # also wakes the replicas
        self._rollout_awake = True

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
        fresh, metrics, started = self.global_steps == 0, {}, time.monotonic()
        if (self.config.trainer.get("val_before_train", True) and fresh) or val_only:
            phase(f"validating on {len(self.val_dataset)} validation prompts")
            metrics = self._validate()
            if val_only:
                metrics.update(self.held_out_pass_at_k())
        if (fresh or val_only) and self.heldout.due_first(val_only):
            metrics.update(self.heldout.evaluate(self))
        if metrics:
            self.run_log.first_validation(self.global_steps, metrics)
            # not training time, but the first estimate of what an evaluating step adds (TrainClock.ends_budget)
            self.clock.note_evaluation(time.monotonic() - started)

    def _train(self) -> None:
        """The training loop, from the step after the checkpoint's to the last (`total_training_steps`, or the one
        expected to reach `trainer.max_train_minutes` of training time) or until the data runs out."""
        self.run_log.start_progress(self.global_steps, self.clock.total_s)
        self.clock.start()  # the whole loop (generation included) counts as training time
        self.global_steps += 1
        self._in_loop = True
        first_step = self.global_steps
        budget = self.max_train_s  # trainer.max_train_minutes: the step expected to reach it is the last
        if self.global_steps > self.total_training_steps or (budget is not None and self.clock.read() >= budget):
            return
        batches = self.training_batches()
        while True:
            is_last = self.global_steps >= self.total_training_steps or self.clock.ends_budget(
                budget, self._evaluates(self.global_steps, is_last=False)
            )
            started = self._start_step(batches, first_step)
            if started is None:
                return  # the data ran out
            batch, metrics, timing_raw = started
            batch = self._run_step(batch, metrics, timing_raw, is_last)
            # since the previous row (a checkpoint save also reads the clock), its evaluations' share told apart
            evaluations = [timing_raw[name] for name in EVALUATION_TIMERS if name in timing_raw]
            seconds = self.clock.lap(sum(evaluations) if evaluations else None)
            metrics.update(self._timing_metrics(batch, timing_raw))
            self.run_log.step(self.global_steps, metrics, seconds)
            if is_last:
                return
            self._end_step(batch)

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

    def _validates(self, step: int, is_last: bool) -> bool:
        """Whether training step `step` validates: every `trainer.test_freq` steps and the last (0 or less: never)."""
        test_freq = self.config.trainer.test_freq
        return test_freq > 0 and (is_last or step % test_freq == 0)

    def _evaluates(self, step: int, is_last: bool) -> bool:
        """Whether training step `step` validates or runs the held-out evaluation."""
        return self._validates(step, is_last) or self.heldout.due_after(step, is_last)

    def _run_step(self, batch: DataProto, metrics: dict, timing_raw: dict, is_last: bool) -> DataProto:
        """Train on the batch (returned as trained, its metrics added to `metrics`), save a checkpoint when one is
        due, sync the rollout's weights, validate when due, and close the step's profile window."""
        validates = self._validates(self.global_steps, is_last)
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
        if self.heldout.due_after(self.global_steps, is_last):
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

    def _timing_metrics(self, batch: DataProto, timing_raw: dict) -> dict:
        n_gpus = self.resource_pool_manager.get_n_gpus()
        return {
            "time/wall": time.time(),
            "time/train_total_s": self.clock.total_s,
            **compute_timing_metrics(batch=batch, timing_raw=timing_raw),
            **compute_throughout_metrics(batch=batch, timing_raw=timing_raw, n_gpus=n_gpus),
        }
