"""The trainer's run (ExtRayPPOTrainer.fit) when it fails, without Ray: verl's real config, the project's real loop,
run log (JSONL, compact console), checkpoint saves (verl's `_save_checkpoint`, which writes the tracker a resume
reads) and closing lines; stubbed are only what needs Ray's workers: the actor worker group's save, the rollout's
weight sync, validation's rollout and the step's batch and update (a tiny DataProto, a stand-in for verl's metrics
of a real batch). A failure anywhere (the start, the validation before training, a step) closes the run log, and the
closing lines say where and why the run failed and where a resume starts, never the finished run's summary."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest
import torch
from omegaconf import open_dict
from verl import DataProto

from verl_ext.config.compose import compose_config
from verl_ext.config.trainer_settings import read_trainer_extras
from verl_ext.metrics_log import read_jsonl
from verl_ext.metrics_log.run_log import RunLog
from verl_ext.trainer.clock import TrainClock
from verl_ext.trainer.heldout import HeldoutEval
from verl_ext.trainer.ppo_trainer import ExtRayPPOTrainer
from verl_ext.trainer.profiling import ProfileSchedule

VAL = "val-core/toy/acc/mean@1"
STEPS = 4


@pytest.fixture(scope="module")
def base_config():
    return compose_config("ppo_trainer", ["trainer.logger=[compact]", "trainer.save_freq=2", "trainer.test_freq=0"])


class ActorWorkers:
    """verl's actor worker group as its checkpoint save uses it (the real one runs in Ray): the actor's folder."""

    def save_checkpoint(self, local_path, remote_path, step, max_ckpt_to_keep=None):
        os.makedirs(local_path, exist_ok=True)

    def load_checkpoint(self, local_path, del_local_after_load=False):
        assert os.path.isdir(local_path), local_path


class Loader(list):
    def state_dict(self):
        return {"consumed": len(self)}

    def load_state_dict(self, state):
        assert state == {"consumed": len(self)}


class Trainer(ExtRayPPOTrainer):
    """Fails where the test says: `fail_at` in "validation" or a step number."""

    fail_at = None

    def _validate(self, *args, **kwargs):
        if self.fail_at == "validation":
            raise RuntimeError("the rollout server is gone")
        return {VAL: 0.25}

    def training_batches(self):
        while True:
            batch = DataProto.from_dict(
                {"responses": torch.ones(2, 3, dtype=torch.long), "attention_mask": torch.ones(2, 5, dtype=torch.long)},
                meta_info={"global_token_num": [5, 5]},
            )
            yield batch, {}, {}

    def train_on_batch(self, batch, metrics, timing_raw):
        if self.global_steps == self.fail_at:
            raise RuntimeError(
                'ray::WorkerDict.actor_rollout_compute_log_prob() (pid=1)\n  File "engine.py", line 9\n'
                "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue."
            )
        return batch

    def _batch_metrics(self, batch, metrics):  # verl's metrics of a full PPO batch
        return {"critic/score/mean": 0.5}


def _trainer(base_config, tmp_path, fail_at) -> Trainer:
    config = base_config.copy()
    with open_dict(config):
        config.trainer.default_local_dir = str(tmp_path / "run")
        config.trainer.jsonl_metrics_path = str(tmp_path / "run" / "metrics.jsonl")
        config.trainer.val_baseline = None
    t = object.__new__(Trainer)  # no workers, no Ray: the attributes the loop reads, as verl's __init__ sets them
    t.config = config
    t.fail_at = fail_at
    t.run_log = RunLog(read_trainer_extras(config.trainer), config.trainer.logger, config.trainer.experiment_name)
    t.closing_lines = []
    t.clock = TrainClock()
    t.profile = ProfileSchedule.from_config(config.get("global_profiler"))
    t._profiling_step = False
    t.max_steps_duration = 0.0
    t.resume_epoch = 0
    t.pass_at_k = 0
    t.max_train_s = None
    t.sepa = None
    t.generate_calls = 0
    t.use_critic = False
    t.total_training_steps = STEPS
    t.train_dataloader = Loader([0, 1, 2, 3])
    t.train_dataset = []
    t.val_dataset = [0] * 10
    t.actor_rollout_wg = ActorWorkers()
    t.checkpoint_manager = SimpleNamespace(update_weights=lambda step: None)
    t.resource_pool_manager = SimpleNamespace(get_n_gpus=lambda: 1)
    # the large held-out evaluation: off, `trainer.heldout` unset
    t.heldout = HeldoutEval(read_trainer_extras(config.trainer).heldout)
    t._init_dump_executor()
    return t


def test_a_run_that_fails_at_a_step_closes_its_log_and_says_where_and_where_a_resume_starts(base_config, tmp_path):
    """Killing vLLM mid-run once printed the finished run's `validation accuracy 0.220 -> 0.220` before the
    failure: the closing lines of a failed run are its failure, at its step, and its resume point."""
    trainer = _trainer(base_config, tmp_path, fail_at=3)
    with pytest.raises(RuntimeError, match="EngineDeadError"):
        trainer.fit()
    run_dir = tmp_path / "run"
    assert trainer.closing_lines == [
        "[verl_ext] run failed at step 3/4: vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an"
        " issue.",
        f"[verl_ext] a resume (trainer.resume_mode=auto) starts from {run_dir}/global_step_2",
    ]
    assert (run_dir / "global_step_2" / "verl_ext_state.pt").is_file()  # the checkpoint it names was written
    assert [r["step"] for r in read_jsonl(run_dir / "metrics.jsonl")] == [0, 1, 2]
    assert trainer.run_log.writer._file.closed
    assert trainer._dump_executor._shutdown


def test_a_run_that_fails_before_its_first_step_still_closes_its_log(base_config, tmp_path):
    """The validation before training fails (as the start can: the tracker, the checkpoint's load): the run log
    closes all the same, and says the run failed before its first step, with no checkpoint to resume from."""
    trainer = _trainer(base_config, tmp_path, fail_at="validation")
    with pytest.raises(RuntimeError, match="the rollout server is gone"):
        trainer.fit()
    assert trainer.run_log.writer._file.closed, "the run log was left open"
    assert trainer._dump_executor._shutdown
    assert trainer.closing_lines == [
        "[verl_ext] run failed before step 1/4: RuntimeError: the rollout server is gone",
        "[verl_ext] no checkpoint yet: a resume starts from step 0",
    ]


def test_a_run_that_finishes_returns_its_summary(base_config, tmp_path):
    trainer = _trainer(base_config, tmp_path, fail_at=None)
    trainer.fit()
    assert trainer.closing_lines == [
        "[verl_ext] validation accuracy 0.250 -> 0.250",
        f"[verl_ext] metrics log: {tmp_path / 'run' / 'metrics.jsonl'}",
    ]
    assert [r["step"] for r in read_jsonl(tmp_path / "run" / "metrics.jsonl")] == [0, 1, 2, 3, 4]
    assert trainer.run_log.writer._file.closed


@pytest.fixture
def now(monkeypatch):
    """The training clock's time.monotonic, advanced by hand."""
    now = [0.0]
    monkeypatch.setattr("verl_ext.trainer.clock.time.monotonic", lambda: now[0])
    return now


def _timed(base_config, tmp_path, now, budget_s: float, validate_s: float = 0.0) -> Trainer:
    """A trainer whose steps take 10 s of `now`, each validation `validate_s`, under a training-time budget."""

    class Timed(Trainer):
        def train_on_batch(self, batch, metrics, timing_raw):
            now[0] += 10.0
            return batch

        def _validate(self, *args, **kwargs):
            now[0] += validate_s
            return super()._validate(*args, **kwargs)

    t = _trainer(base_config, tmp_path, fail_at=None)
    t.__class__ = Timed
    t.max_train_s = budget_s
    return t


def test_a_training_time_budget_ends_the_run_at_the_step_expected_to_reach_it(base_config, tmp_path, now):
    """trainer.max_train_minutes: each step takes 10 s of the training clock; with 25 s the third step is the last
    (after two steps, 20 s + a mean step of 10 s reach 25 s), saved and logged as a last step is; a run resumed from
    it trains no further step."""
    trainer = _timed(base_config, tmp_path, now, budget_s=25.0)
    trainer.fit()
    assert [r["step"] for r in read_jsonl(tmp_path / "run" / "metrics.jsonl")] == [0, 1, 2, 3]
    assert (tmp_path / "run" / "global_step_3" / "verl_ext_state.pt").is_file(), "the last step saves"
    assert trainer.clock.total_s == 30.0 and trainer.global_steps == 3
    resumed = _timed(base_config, tmp_path, now, budget_s=25.0)
    with open_dict(resumed.config):
        resumed.config.trainer.resume_mode = "auto"
    resumed.fit()
    assert [r["step"] for r in read_jsonl(tmp_path / "run" / "metrics.jsonl")] == [0, 1, 2, 3], "no step past it"


def test_an_evaluating_step_expected_to_pass_the_budget_is_the_last(base_config, tmp_path, now):
    """A validation every 2 steps takes 30 s, a step 10 s, the budget 45 s. Step 2 evaluates: 10 s so far + a 10 s
    step + a 30 s evaluation (measured before training) pass 45 s, so step 2 is the last. Counting a mean step alone
    (20 s) once made step 2 an ordinary step that ended past the budget (50 s) and ran a step 3 after it, with a
    second full evaluation, to 90 s."""
    trainer = _timed(base_config, tmp_path, now, budget_s=45.0, validate_s=30.0)
    with open_dict(trainer.config):
        trainer.config.trainer.test_freq = 2
    trainer.fit()
    rows = read_jsonl(tmp_path / "run" / "metrics.jsonl")
    assert [r["step"] for r in rows] == [0, 1, 2]
    assert trainer.clock.total_s == 50.0 and rows[-1]["time/train_total_s"] == 50.0
    assert (tmp_path / "run" / "global_step_2" / "verl_ext_state.pt").is_file(), "the last step saves"
