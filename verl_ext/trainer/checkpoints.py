"""What the project's checkpoints hold beyond verl's (`CheckpointMixin`, mixed into `ExtRayPPOTrainer`): the
extension state (SEPA's controller, the training clock, the rollout call count, the metrics row so far) in
`global_step_N/verl_ext_state.pt`, written before verl's part so a resume never trusts half a checkpoint; the
resume (`on_resume` hook, the resume line on the terminal); when a save is due (last step, `save_freq`, verl's ESI
expiry check) with the step's row held in it, so a crash between the save and the row leaves no gap.
"""

from __future__ import annotations

import contextlib
import os
import time

import torch
from verl import DataProto
from verl.trainer.ppo.metric_utils import compute_timing_metrics
from verl.utils.checkpoint.checkpoint_manager import find_latest_ckpt_path, should_save_ckpt_esi
from verl.utils.debug import marked_timer

from verl_ext.metrics_log.terminal import phase
from verl_ext.trainer.clock import TrainClock

EXTRA_STATE_FILE = "verl_ext_state.pt"


class CheckpointMixin:
    """Checkpoint state and saves (module docstring). Hooks: `extra_state_dict`, `load_extra_state_dict`,
    `on_resume`."""

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
