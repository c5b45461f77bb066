"""A fault a user meets, end to end through the driver a user runs (`python -m recipe.fast_dapo.main`, its own Ray,
the quiet terminal), on the tiny model: the rollout server's process that holds the model (vLLM's engine, the model
worker inside it on the CPU backend) is SIGKILLed before step 2's generation (as the OOM killer does). The run must
notice by itself within 60 s, say on the terminal that it failed, at which step, the cause in one line and the
checkpoint a resume starts from (never the finished run's summary), leave no vLLM process behind, and a resume must
continue from step 1's checkpoint without a lost or repeated step (docs/FAULTS.md).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from tests.conftest import backend_overrides, run_driver
from tests.recipe.fast_dapo.crashing_trainer import vllm_processes
from verl_ext.metrics_log import read_jsonl

pytestmark = pytest.mark.e2e

STEPS = 3
CRASHING = "tests.recipe.fast_dapo.crashing_trainer.CrashingFastDAPOTrainer"


def _overrides(out: Path, *extra: str) -> list[str]:
    return [
        *backend_overrides(),
        "+preset=tiny",
        # plain sampling: one generation call at each step's start, so step 2's is the first after the kill (fast
        # DAPO's fused calls may have generated step 2's batch during step 1)
        "curriculum.enable=false",
        "data.train_batch_size=2",
        "data.gen_batch_size=2",  # each step's prompts in its own generation call
        "data.val_max_samples=4",
        "data.seed=0",
        "actor_rollout_ref.rollout.n=2",
        "actor_rollout_ref.rollout.n_continue=2",  # N = 4 responses a prompt
        "actor_rollout_ref.actor.ppo_mini_batch_size=2",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4",
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=4",
        f"trainer.total_training_steps={STEPS}",
        "trainer.save_freq=1",
        "trainer.test_freq=-1",
        "trainer.val_before_train=true",
        "trainer.resume_mode=auto",
        "trainer.logger=[compact]",
        f"trainer.default_local_dir={out}",
        f"hydra.run.dir={out / 'hydra'}",
        *extra,
    ]


def test_a_killed_rollout_server_fails_the_run_by_name_and_a_resume_continues(tmp_path, monkeypatch):
    out, stamp = tmp_path / "run", tmp_path / "killed_at"
    monkeypatch.setenv("VERL_EXT_TEST_KILL_ROLLOUT_AT_STEP", "2")
    monkeypatch.setenv("VERL_EXT_TEST_KILL_STAMP", str(stamp))
    r = run_driver("recipe.fast_dapo.main", _overrides(out, f"trainer.trainer_cls={CRASHING}"), timeout=900)
    ended = time.time()
    (tmp_path / "driver.log").write_text(r.stdout + "\n--- stderr ---\n" + r.stderr)
    assert stamp.exists(), (r.stdout + r.stderr)[-3000:]
    killed = json.loads(stamp.read_text())
    # the CPU backend's rollout server: the model worker inside vLLM's engine process (its "uni" executor, one process
    # fewer to start), computing on every core
    assert [p["name"] for p in killed["processes"]] == ["VLLM::EngineCore"], killed
    assert killed["killed"] == [{"name": "VLLM::EngineCore", "OMP_NUM_THREADS": str(len(os.sched_getaffinity(0)))}]
    noticed_s = ended - killed["time"]
    print(f"the driver exited {noticed_s:.1f} s after the kill")
    # measured 5.8 s (the next generation call raises), Ray's shutdown included
    assert r.returncode != 0 and noticed_s < 60, (noticed_s, (r.stdout + r.stderr)[-3000:])
    terminal = (r.stdout + r.stderr).splitlines()
    failed = [line for line in terminal if "run failed at step 2/3: " in line]
    assert len(failed) == 1 and len(failed[0].split("run failed at step 2/3: ", 1)[1]) > 10, terminal[-20:]
    assert any(f"a resume (trainer.resume_mode=auto) starts from {out}/global_step_1" in line for line in terminal)
    assert not any("validation accuracy" in line for line in terminal), "a failed run printed the summary"
    deadline = time.monotonic() + 30
    while vllm_processes() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert vllm_processes() == [], "a vLLM process outlived the run"
    assert [row["step"] for row in read_jsonl(out / "metrics.jsonl")] == [0, 1]

    monkeypatch.delenv("VERL_EXT_TEST_KILL_ROLLOUT_AT_STEP")
    resumed = run_driver("recipe.fast_dapo.main", _overrides(out), timeout=900)
    assert resumed.returncode == 0, (resumed.stdout + resumed.stderr)[-3000:]
    assert f"resumed from {out}/global_step_1 at step 1" in resumed.stdout + resumed.stderr
    assert [row["step"] for row in read_jsonl(out / "metrics.jsonl")] == [0, 1, 2, 3], "no step lost or repeated"
    assert f"[verl_ext] metrics log: {out / 'metrics.jsonl'}" in resumed.stdout, "the finished run's closing summary"
