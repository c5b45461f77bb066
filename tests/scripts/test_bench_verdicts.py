"""Each benchmark prints its target beside its figure with a verdict: the figures computed from metric rows as the
training benchmarks read them, and the simulated sampling benchmark run for real at a small size."""

from __future__ import annotations

import argparse
import math
import re

import pytest

from verl_ext.curriculum.cost_model import DEFAULT_HISTOGRAM, load_pass_histogram


def _composer_rows(**channel) -> list[dict]:
    step = {"timing_s/step": 10.0, "timing_s/update_actor": 4.0, "timing_s/old_log_prob": 3.2, **channel}
    return [{**step, "timing_s/step": 99.0}, step, step]  # step 1 (vLLM's warm-up) is left out of the means


def test_composer_arms_figures_and_verdicts(load_script, capsys):
    bench = load_script("bench_composer")
    sdpo = bench.arm_figures(
        _composer_rows(
            **{
                "sdpo/error_sites": 4.0,
                "timing_s/sdpo_teacher": 0.5,
                "sdpo/teacher_tokens": 400.0,
                "perf/total_num_tokens": 3200.0,
            }
        )
    )
    # (0.5 s / 4 site rows) against (3.2 s / 32 batch rows); per token: (0.5 / 400) against (3.2 / 3200)
    assert sdpo["step"] == 10.0 and sdpo["per_row"] == pytest.approx(1.25) and sdpo["per_token"] == pytest.approx(1.25)
    assert not sdpo["has_replay"]
    replay = bench.arm_figures(_composer_rows(**{"timing_s/replay": 0.02, "replay/pairs_used": 3.0}))
    assert math.isnan(replay["per_row"]) and replay["has_replay"] and replay["replay_s"] == pytest.approx(0.02)

    bench.print_arm_verdicts(
        {"baseline": bench.arm_figures(_composer_rows()), "sdpo": sdpo, "replay": replay},
        bench.Target("<", 3.0, " s"),
    )
    assert capsys.readouterr().out.splitlines() == [
        "   sdpo: SDPO per-row ratio 1.25x (target <= 1x: MISS)",
        "   replay: replay s 0.020 (target < 3 s: PASS)",
    ]


def _actor_run(old_lp: float, update: float, step_s: float) -> list[dict]:
    timers = {"timing_s/gen": 1.0, "timing_s/old_log_prob": old_lp, "timing_s/update_actor": update}
    return [{"step": s, **timers, "time/train_total_s": s * step_s} for s in (1, 2, 3)]


def test_actor_shared_prefix_ratios_and_verdicts(load_script, capsys):
    bench = load_script("bench_actor_cpu")
    runs = {False: bench._with_step_wall(_actor_run(20.0, 60.0, 150.0))}
    runs[True] = bench._with_step_wall(_actor_run(8.0, 22.0, 80.0))
    assert [r["step_wall_s"] for r in runs[True]] == [80.0, 80.0, 80.0]
    bench.print_run_timers(runs, steps=3)
    out = capsys.readouterr().out
    assert "80.0 s -> 30.0 s = 2.67x faster (target >= 2.5x: PASS)" in out
    assert "shared / unshared = 0.53 (target <= 0.5: MISS)" in out


@pytest.fixture
def sampling_args():
    return argparse.Namespace(
        N=16, n=4, train_batch_size=8, steps=4, workers=2, seed=0, dataset_size=96, epochs=2, sweep=[0.8]
    )


def test_sampling_steps_part_checks_the_default_fast_row_only(load_script, sampling_args, capsys):
    bench = load_script("bench_sampling")
    bench.steps_part(sampling_args, load_pass_histogram(DEFAULT_HISTOGRAM))
    lines = {line.split(":")[0]: line for line in capsys.readouterr().out.splitlines() if "|meas/model - 1|" in line}
    assert len(re.findall(r"\(target [<>]=? [\d.]+%?x?: (PASS|MISS)\)", lines["fast (one call/step)"])) == 3
    assert "target" not in lines["fast (equal call size)"]


def test_sampling_memory_part_gives_the_goals_verdicts(load_script, sampling_args, capsys):
    bench = load_script("bench_sampling")
    bench.memory_part(sampling_args, load_pass_histogram(DEFAULT_HISTOGRAM))
    out = capsys.readouterr().out
    verdict = next(line for line in out.splitlines() if line.startswith("fast + memory (default), epoch 2:"))
    figures = re.findall(r"([\d.]+) (?:responses per training group|of informative)", verdict)
    per_group, share = (float(x) for x in figures)
    met = per_group <= 20 and share >= 0.8
    assert verdict.endswith(f"both {'PASS' if met else 'MISS'}")
    assert "(target <= 20: " in verdict and "(target >= 0.8: " in verdict
    assert "fast + memory b_w=0.8" in out  # the sweep's row


def test_heldout_figures_read_the_evaluation_row_and_give_the_per_1024_verdict(load_script, capsys):
    bench = load_script("bench_heldout")
    rows = [
        {"step": 0, "val-core/all/acc/mean@1": 0.05},
        {"step": 0, "heldout/questions": 512, "heldout/seconds": 100.0, "heldout-core/all/acc/mean@1": 0.0625},
    ]
    fig = bench.figures(rows)
    assert fig == {"questions": 512, "seconds": 100.0, "per_1024_s": 200.0, "accuracy": 0.0625}
    bench.print_verdicts({"steps": {**fig, "wall_s": 300.0}, "arithmetic": {**fig, "per_1024_s": 90.0, "wall_s": 1}})
    out = capsys.readouterr().out.splitlines()
    assert "steps | 512 | 0.062 | 100 | 200 | 300" in out
    assert "steps: 200 s per 1,024 questions (target <= 180 s: MISS)" in out
    assert "arithmetic: 90 s per 1,024 questions (target <= 180 s: PASS)" in out
    with pytest.raises(SystemExit, match="heldout/seconds"):
        bench.figures([{"step": 0, "val-core/all/acc/mean@1": 0.05}])
