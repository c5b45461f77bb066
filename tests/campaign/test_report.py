"""Campaign report: seed bands, final-step and cost-to-target tables on synthetic logs with known answers (scipy as
the statistics reference), and the `campaign.py report` CLI on real JSONL logs written by the project's writer."""

from __future__ import annotations

import math
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from verl_ext.campaign.cli import main
from verl_ext.campaign.render import change_markdown, final_markdown, speedup_markdown
from verl_ext.campaign.stats import MIN_BOOTSTRAP_PAIRS, pairs_to_resolve, sign_flip_p
from verl_ext.campaign.summary import (
    change_table,
    cost_band,
    cost_table,
    expand_keys,
    final_table,
    first_reach,
    resolve_target,
    seed_band,
    speedup_table,
)
from verl_ext.metrics_log import JsonlMetricsWriter

ROOT = Path(__file__).resolve().parents[2]
VAL = "val-core/toy/acc/mean@1"
TOK, TIME = "curriculum/tokens_generated", "time/train_total_s"


def synthetic_run(speed: float, seed: int, steps: int = 10, test_freq: int = 5) -> list[dict]:
    """Validation before training (step 0) and every test_freq steps; accuracy rises at `speed` per step; cumulative
    tokens grow 1000 per step, time 2 s per step; a seed-dependent offset gives the seeds a spread."""
    off = 0.01 * seed
    recs = [{"step": 0, VAL: 0.1 + off}]
    for s in range(1, steps + 1):
        r = {"step": s, "critic/score/mean": min(1.0, speed * s + off), TOK: 1000 * s * (1 + seed), TIME: 2.0 * s}
        if s % test_freq == 0:
            r[VAL] = min(1.0, 0.1 + speed * s + off)
        recs.append(r)
    return recs


@pytest.fixture
def campaign():
    return {
        "base": {0: synthetic_run(0.02, 0), 1: synthetic_run(0.02, 1), 2: synthetic_run(0.02, 3)},
        "fast": {0: synthetic_run(0.06, 0), 1: synthetic_run(0.06, 2)},
    }


def write_campaign_logs(root: Path, campaign: dict) -> None:
    """Each run's records as <root>/<condition>_s<seed>/metrics.jsonl, through the real JSONL writer."""
    for cond, runs in campaign.items():
        for seed, recs in runs.items():
            w = JsonlMetricsWriter(root / f"{cond}_s{seed}" / "metrics.jsonl")
            for r in recs:
                w.log(r["step"], {k: v for k, v in r.items() if k != "step"})
            w.close()


def test_seed_band_is_mean_and_std_over_the_seeds_that_logged_the_step(campaign):
    band = seed_band(campaign["base"], VAL)
    assert band.steps == [0, 5, 10]  # sparse validation stays sparse
    for i, step in enumerate(band.steps):
        vals = [next(r[VAL] for r in recs if r["step"] == step) for recs in campaign["base"].values()]
        assert band.mean[i] == pytest.approx(np.mean(vals)) and band.std[i] == pytest.approx(np.std(vals, ddof=1))
        assert band.n[i] == 3
    # A seed missing a step (shorter run, nan logged as null) leaves that step to the others.
    runs = {0: [{"step": 1, "k": 1.0}, {"step": 2, "k": 3.0}], 1: [{"step": 1, "k": 2.0}, {"step": 2, "k": None}]}
    b = seed_band(runs, "k")
    assert b.steps == [1, 2] and b.mean == [1.5, 3.0] and b.n == [2, 1] and b.std[1] == 0.0


def test_final_table_against_scipy(campaign):
    rows = {r.condition: r for r in final_table(campaign, VAL, "base", bootstrap=500)}
    base = [0.1 + 0.2 + 0.01 * s for s in (0, 1, 3)]
    fast = [min(1.0, 0.1 + 0.6 + 0.01 * s) for s in (0, 2)]
    assert rows["base"].summary.n == 3 and rows["base"].summary.mean == pytest.approx(np.mean(base))
    assert math.isnan(rows["base"].p) and rows["base"].ci is None
    assert rows["fast"].diff == pytest.approx(np.mean(fast) - np.mean(base))
    assert rows["fast"].p == pytest.approx(stats.ttest_ind(fast, base, equal_var=False).pvalue, rel=1e-9)
    assert rows["fast"].ci is None  # 2 and 3 runs: no bootstrap interval, though draws were asked for
    # paired by seed key: fast's seeds 0 and 1 against base's seeds 0 and 1 (base's seed 2 has no partner)
    paired = rows["fast"].paired
    d = [f - b for f, b in zip(fast, base[:2])]
    assert paired.n == 2 and paired.value == pytest.approx(np.mean(d))
    half = stats.t.ppf(0.975, 1) * np.std(d, ddof=1) / math.sqrt(2)
    assert (paired.low, paired.high) == pytest.approx((np.mean(d) - half, np.mean(d) + half))
    assert rows["base"].paired is None
    one = {"base": {0: campaign["base"][0]}, "fast": {0: campaign["fast"][0]}}
    single = {r.condition: r for r in final_table(one, VAL, "base", bootstrap=500)}["fast"].paired
    assert single.n == 1 and math.isnan(single.low) and single.value == pytest.approx(fast[0] - base[0])
    with pytest.raises(KeyError, match="baseline"):
        final_table(campaign, VAL, "nope")


def scipy_paired_diff_bca(a, b, n_resamples: int):
    """The reference interval: scipy's BCa bootstrap of mean(a - b) over the pairs, with the project's seed 0."""
    return stats.bootstrap(
        (a, b),
        lambda x, y, axis: np.mean(x, axis=axis) - np.mean(y, axis=axis),
        paired=True,
        n_resamples=n_resamples,
        method="BCa",
        rng=np.random.default_rng(0),
    ).confidence_interval


def _offset_campaign(noise: list[float]) -> dict:
    """fast is base + 0.05 + noise[s] on every seed s, while the seeds spread by 0.1."""
    return {
        "base": {s: [{"step": 10, VAL: 0.1 * s}] for s in range(len(noise))},
        "fast": {s: [{"step": 10, VAL: 0.1 * s + 0.05 + x}] for s, x in enumerate(noise)},
    }


def test_paired_difference_over_common_seeds_with_a_t_interval():
    """Each seed's own offset cancels in the paired difference: the paired t-interval holds 0.05 and excludes 0
    where Welch's unpaired test cannot tell the arms apart; the table shows the difference, its t-interval, the exact
    sign-flip p (5 pairs all above 0: 2/32), the pairs above 0, the half-width and the pairs for 80% power, and at 5
    pairs no bootstrap column even with draws asked for."""
    noise = [0.004, -0.003, 0.001, -0.002, 0.0]
    rows = {r.condition: r for r in final_table(_offset_campaign(noise), VAL, "base", bootstrap=2000)}
    paired = rows["fast"].paired
    diffs = [0.05 + x for x in noise]
    assert paired.n == 5 and paired.value == pytest.approx(np.mean(diffs)) and paired.boot_method == ""
    half = stats.t.ppf(0.975, 4) * np.std(diffs, ddof=1) / math.sqrt(5)
    assert (paired.low, paired.high, paired.half_width) == pytest.approx((0.05 - half, 0.05 + half, half))
    assert 0 < paired.low <= 0.05 <= paired.high and rows["fast"].p > 0.5  # Welch: the seeds' spread swamps it
    assert paired.p == pytest.approx(sign_flip_p(diffs)) == 2 / 32 and (paired.above, paired.below) == (5, 0)
    table = final_markdown(VAL, list(rows.values()), "base")
    head, line = table.splitlines()[2], table.splitlines()[-1]
    assert "bootstrap" not in table and "BCa" not in table
    assert head.endswith(
        "| paired Δ (pairs) | 95% t-interval | sign-flip p (exact) | pairs above 0 | 95% half-width "
        "| pairs for 80% power at this Δ |"
    )
    # beside it, the seed pairs a paired t-test needs to resolve this difference (stats.pairs_to_resolve): with this
    # little noise, the fewest there can be
    assert paired.to_resolve == pairs_to_resolve(diffs) == 2
    assert line.endswith(
        f"| {paired.value:+.3f} (5) | [{paired.low:+.3f}, {paired.high:+.3f}] | 0.0625 | 5 of 5 | {half:.3f} | 2 |"
    )


def test_bootstrap_columns_appear_from_ten_seeds():
    """At MIN_BOOTSTRAP_PAIRS seeds a condition the report adds the unpaired bootstrap CI and the paired BCa
    interval (scipy's, over the pairs, as reference)."""
    noise = list(np.random.default_rng(4).normal(0.0, 0.003, MIN_BOOTSTRAP_PAIRS))
    campaign = _offset_campaign(noise)
    rows = {r.condition: r for r in final_table(campaign, VAL, "base", bootstrap=2000)}
    paired = rows["fast"].paired
    a = [recs[0][VAL] for recs in campaign["fast"].values()]
    b = [recs[0][VAL] for recs in campaign["base"].values()]
    want = scipy_paired_diff_bca(a, b, 2000)
    assert paired.boot_method == "BCa" and (paired.boot_low, paired.boot_high) == pytest.approx((want.low, want.high))
    assert rows["fast"].ci[0] < 0 < rows["fast"].ci[1]  # unpaired: the seeds' spread swamps the effect
    table = final_markdown(VAL, list(rows.values()), "base")
    assert table.splitlines()[2].endswith("| 95% CI of Δ (bootstrap) | paired Δ 95% CI (BCa) |")
    assert table.splitlines()[-1].endswith(f"| [{paired.boot_low:+.3f}, {paired.boot_high:+.3f}] |")


def test_table_at_a_step_compares_arms_step_for_step():
    """Arms that ran different numbers of steps: the final table compares base's step 10 with fast's step 5, the
    table at step 5 compares step 5 with step 5 (scipy as reference); a step nobody validated at has no values."""
    campaign = {
        "base": {s: synthetic_run(0.02, s) for s in (0, 1, 2)},
        "fast": {s: synthetic_run(0.03, s, steps=5) for s in (0, 1, 2)},
    }
    final = {r.condition: r for r in final_table(campaign, VAL, "base")}
    assert final["fast"].diff == pytest.approx((0.1 + 0.15) - (0.1 + 0.2))  # fast behind at its own end
    at5 = {r.condition: r for r in final_table(campaign, VAL, "base", step=5)}
    base5 = [0.1 + 0.1 + 0.01 * s for s in (0, 1, 2)]
    fast5 = [0.1 + 0.15 + 0.01 * s for s in (0, 1, 2)]
    assert at5["base"].summary.mean == pytest.approx(np.mean(base5)) and at5["base"].summary.n == 3
    assert at5["fast"].diff == pytest.approx(0.05)  # ahead step for step
    assert at5["fast"].p == pytest.approx(stats.ttest_ind(fast5, base5, equal_var=False).pvalue, rel=1e-9)
    assert all(r.summary.n == 0 for r in final_table(campaign, VAL, "base", step=3))


def test_table_by_training_time_reads_each_runs_last_value_logged_by_then():
    """--at-minutes: a run's value by T seconds of training time is the last one logged at a row whose time is at most
    T (time 2 s a step here; validation every 5 steps): by 15 s, step 5's; by 20 s, step 10's; before any
    validation in the loop, none (the value before training has no training time)."""
    from verl_ext.campaign.summary import final_value

    run = synthetic_run(0.02, 0)
    assert final_value(run, VAL, within=(TIME, 15.0)) == pytest.approx(0.1 + 0.02 * 5)
    assert final_value(run, VAL, within=(TIME, 20.0)) == pytest.approx(0.1 + 0.02 * 10)
    assert final_value(run, VAL, within=(TIME, 9.0)) is None
    campaign = {
        "base": {s: synthetic_run(0.02, s) for s in (0, 1, 2)},
        "fast": {s: synthetic_run(0.03, s) for s in (0, 1, 2)},
    }
    by15 = {r.condition: r for r in final_table(campaign, VAL, "base", within=(TIME, 15.0))}
    assert by15["fast"].diff == pytest.approx(0.05) and by15["fast"].summary.n == 3
    assert by15["fast"].paired.value == pytest.approx(0.05) and by15["fast"].paired.n == 3


def test_per_step_table_compares_arms_by_each_runs_mean_over_its_steps():
    """--per-step: a count each step logs (error sites) is read as the run's mean over the steps that logged it (a
    step that did not log it is not a zero), then compared like a final value, paired by seed (numpy as reference)."""
    from verl_ext.campaign.summary import final_value

    key = "sdpo/sites_found"

    def run(counts: list[float | None]) -> list[dict]:
        return [{"step": 0, VAL: 0.1}] + [
            {"step": s, **({} if c is None else {key: c})} for s, c in enumerate(counts, start=1)
        ]

    base = {0: run([4, 2, 3, None]), 1: run([5, 5, 2, 4]), 2: run([6, 1, 2, 3])}
    hint = {0: run([1, 0, 2, 1]), 1: run([2, 2, 1, None]), 2: run([3, 0, 0, 1])}
    assert final_value(base[0], key, per_step=True) == pytest.approx(3.0)  # (4 + 2 + 3) / 3, not / 4
    assert final_value(base[0], key) == 3.0  # the last value, for contrast
    assert final_value(run([None, None]), key, per_step=True) is None
    rows = {r.condition: r for r in final_table({"base": base, "hint": hint}, key, "base", per_step=True)}
    b = [np.mean([4, 2, 3]), np.mean([5, 5, 2, 4]), np.mean([6, 1, 2, 3])]
    h = [np.mean([1, 0, 2, 1]), np.mean([2, 2, 1]), np.mean([3, 0, 0, 1])]
    assert rows["base"].summary.mean == pytest.approx(np.mean(b))
    assert rows["hint"].paired.value == pytest.approx(np.mean(np.subtract(h, b)))
    assert rows["hint"].paired.n == 3 and rows["hint"].paired.above == 0


def test_first_reach_costs(campaign):
    # base seed 1: val 0.11 (step 0), 0.21 (5), 0.31 (10). Target 0.2 -> step 5, 5000 * 2 tokens, 10 s.
    hit = first_reach(campaign["base"][1], VAL, 0.2, [TOK, TIME])
    assert hit.step == 5 and hit.costs == {TOK: 10000.0, TIME: 10.0}
    assert first_reach(campaign["base"][1], VAL, 0.05, [TOK, TIME]).costs == {TOK: 0.0, TIME: 0.0}  # before training
    assert first_reach(campaign["base"][1], VAL, 0.9, [TOK, TIME]) is None
    with pytest.raises(KeyError, match="cost keys"):
        first_reach(campaign["base"][1], VAL, 0.2, ["no/such_key"])


def test_cost_table_and_relative_target(campaign):
    best = np.mean([0.7, 0.72])  # "fast" final validation mean
    goal = resolve_target(campaign, VAL, None, 0.5)
    assert goal == pytest.approx(0.5 * best)  # 0.355
    rows = {r.condition: r for r in cost_table(campaign, VAL, goal, [TOK, TIME])}
    # base ends at 0.1 + 0.2 + 0.01 * seed <= 0.33 < 0.355: never reached.
    assert rows["base"].reached == 0 and rows["base"].n == 3 and rows["base"].costs[TOK].n == 0
    # fast: 0.1 + 0.3 + off >= 0.355 at step 5 for both seeds: tokens 5000 * (1 + seed), time 10 s.
    assert rows["fast"].reached == 2 and rows["fast"].step.mean == 5
    assert rows["fast"].costs[TOK].mean == pytest.approx(np.mean([5000, 15000]))
    assert rows["fast"].costs[TOK].std == pytest.approx(np.std([5000, 15000], ddof=1))
    assert rows["fast"].costs[TIME].mean == 10.0
    with pytest.raises(ValueError, match="exactly one"):
        resolve_target(campaign, VAL, 0.3, 0.5)


def test_expand_keys(campaign):
    assert expand_keys(["val-core/*/acc/mean@1", "critic/score/mean"], campaign, required=True) == [
        VAL,
        "critic/score/mean",
    ]
    assert expand_keys(["adv/sepa_lambda"], campaign, required=False) == []
    with pytest.raises(KeyError, match="adv/sepa_lambda"):
        expand_keys(["adv/sepa_lambda"], campaign, required=True)


def test_report_cli_on_real_logs(tmp_path, campaign):
    (tmp_path / "spec.yaml").write_text(
        textwrap.dedent("""
        name: demo
        entry: fake_entry
        conditions: {base: [], fast: [], never_ran: []}
        seeds: [0, 1, 2, 3]
    """)
    )
    out = tmp_path / "out"
    write_campaign_logs(out / "demo", campaign)
    cmd = [
        sys.executable,
        str(ROOT / "scripts" / "campaign.py"),
        "report",
        str(tmp_path / "spec.yaml"),
        "--out-root",
        str(out),
        "--target-frac",
        "0.5",
    ]
    res = subprocess.run(cmd, check=False, capture_output=True, text=True, cwd=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    md = (out / "demo" / "report.md").read_text()
    assert md in res.stdout
    p = stats.ttest_ind([0.7, 0.72], [0.3, 0.31, 0.33], equal_var=False).pvalue
    assert f"| fast | 2 | 0.710 | 0.014 | +0.397 | {p:.3g} |" in md
    assert "| base (baseline) | 3 | 0.313 |" in md
    assert "| fast | 2/2 | 5.000 ± 0.000 | 10000 ± 7071 | 10.0 ± 0.000 |" in md  # std of [5000, 15000] = 7071
    assert "| base | 0/3 | - | - | - |" in md
    assert "Final `critic/score/mean`" in md and "sepa_lambda" not in md  # default keys: only those logged
    assert (out / "demo" / "report.png").stat().st_size > 10000
    assert (out / "demo" / "report_tokens.png").stat().st_size > 10000
    assert f"[report] {out / 'demo' / 'report_tokens.png'}" in res.stdout
    assert "never_ran_s0" in res.stdout  # runs without a log are named
    bad = subprocess.run(cmd + ["--keys", "no/such/*"], check=False, capture_output=True, text=True, cwd=tmp_path)
    assert bad.returncode != 0 and "no/such/*" in bad.stderr
    per = subprocess.run(cmd + ["--per-step", "critic/*"], check=False, capture_output=True, text=True, cwd=tmp_path)
    assert per.returncode == 0, per.stdout + per.stderr
    assert "`critic/score/mean` a step (each run's mean over its steps)" in per.stdout
    # base's seeds 0, 1, 3 rise 0.02 a step from their offsets over steps 1-10: mean 0.11 + offset
    assert f"| base (baseline) | 3 | {np.mean([0.11, 0.12, 0.14]):.3f} |" in per.stdout
    bad = subprocess.run(cmd + ["--per-step", "no/such"], check=False, capture_output=True, text=True, cwd=tmp_path)
    assert bad.returncode != 0 and "no/such" in bad.stderr


def _reach_run(step: int | None, tokens_per_step: float, steps: int = 6) -> list[dict]:
    """Validation 0 until `step` (None: never), then 1; tokens grow linearly."""
    recs = [{"step": 0, VAL: 0.0}]
    for s in range(1, steps + 1):
        recs.append({"step": s, TOK: tokens_per_step * s, VAL: float(step is not None and s >= step)})
    return recs


def test_speedup_is_the_paired_ratio_of_costs_and_counts_the_runs_that_never_reached():
    # seeds 0-2: both reach (fast at step 2 with 100 tokens/step, plain at 3 with 150+10s); seed 3: plain never does;
    # seed 4: fast only ran
    campaign = {
        "fast": {s: _reach_run(2, 100.0) for s in range(5)},
        "plain": {s: _reach_run(3, 150.0 + 10 * s) for s in range(3)} | {3: _reach_run(None, 150.0)},
    }
    (row,) = speedup_table(campaign, VAL, 0.5, TOK, [("fast", "plain")], n_boot=500)
    fast_costs = [200.0] * 3
    plain_costs = [3 * (150.0 + 10 * s) for s in range(3)]
    assert row.ratio.value == pytest.approx(np.mean(fast_costs) / np.mean(plain_costs))
    assert (row.pairs, row.ratio.n, row.only_condition, row.only_reference, row.neither) == (4, 3, 1, 0, 0)
    # its uncertainty on the log scale: the geometric mean of the pairs' ratios and the t-interval of their logs
    logs = np.log(np.asarray(fast_costs) / np.asarray(plain_costs))
    half = stats.t.ppf(0.975, 2) * logs.std(ddof=1) / math.sqrt(3)
    assert row.ratio.geo_mean == pytest.approx(math.exp(logs.mean()))
    want = (math.exp(logs.mean() - half), math.exp(logs.mean() + half))
    assert (row.ratio.low, row.ratio.high) == pytest.approx(want)
    assert row.ratio.low <= row.ratio.geo_mean <= row.ratio.high < 1.0 and row.ratio.cheaper == 3
    assert row.ratio.log.p == 0.25 and row.ratio.boot_method == ""  # 3 pairs: the floor of the sign-flip p
    md = speedup_markdown(VAL, 0.5, "generated tokens", [row])
    r = row.ratio
    assert f"| fast / plain | 0.417 | {r.geo_mean:.3f} [{r.low:.3f}, {r.high:.3f}] | 0.25 | 3 of 3 |" in md
    assert "| 3/4 | 1 | 0 | 0 |" in md and "BCa" not in md
    # seed 3 kept with plain at its run total (6 steps x 150 tokens, a lower bound of its cost): an upper bound
    assert row.censored_bound == "<=" and row.censored_ratio.n == 4
    assert row.censored_ratio.value == pytest.approx(np.mean([200.0] * 4) / np.mean(plain_costs + [900.0]))
    c = row.censored_ratio
    assert f"| <= {c.value:.3f}, {c.geo_mean:.3f} [{c.low:.3f}, {c.high:.3f}] (4 pairs) |" in md
    assert "predicted" not in md
    md = speedup_markdown(VAL, 0.5, "generated tokens", [row], predicted={("fast", "plain"): 0.75})
    assert md.splitlines()[2].endswith("| predicted |") and md.splitlines()[-1].endswith("(4 pairs) | 0.750 |")
    with pytest.raises(KeyError, match="dapo"):
        speedup_table(campaign, VAL, 0.5, TOK, [("fast", "dapo")])


def test_censored_runs_bound_the_ratio_from_the_side_that_was_censored():
    """Reference form: a censored run's cost is its last logged cumulative cost; the bound's direction follows which
    side was censored, and with censoring on both sides (or none) no bound is claimed."""
    fast_late = {0: _reach_run(2, 100.0), 1: _reach_run(None, 100.0), 2: _reach_run(4, 100.0)}
    plain = {s: _reach_run(3, 120.0) for s in range(3)}
    (row,) = speedup_table({"fast": fast_late, "plain": plain}, VAL, 0.5, TOK, [("fast", "plain")], n_boot=200)
    fast_bound = [200.0, 600.0, 400.0]  # seed 1 never reached: its 6-step total, less than its true cost
    assert row.censored_bound == ">=" and row.censored_ratio.n == 3
    assert row.censored_ratio.value == pytest.approx(sum(fast_bound) / (3 * 360.0))
    assert row.ratio.n == 2 and row.ratio.value == pytest.approx(600.0 / 720.0)  # the pairs both reached only

    plain[2] = _reach_run(None, 120.0)  # now each side has a censored pair: no direction, no bound
    (mixed,) = speedup_table({"fast": fast_late, "plain": plain}, VAL, 0.5, TOK, [("fast", "plain")], n_boot=200)
    assert (mixed.only_condition, mixed.only_reference, mixed.censored_bound, mixed.censored_ratio) == (1, 1, "", None)
    assert mixed.ratio.n == 1
    md = speedup_markdown(VAL, 0.5, "generated tokens", [mixed])
    assert md.rstrip().endswith("| 1 | 1 | 0 | - |")

    both = {s: _reach_run(2, 100.0) for s in range(3)}
    (clean,) = speedup_table(
        {"fast": both, "plain": {s: _reach_run(3, 120.0) for s in range(3)}},
        VAL,
        0.5,
        TOK,
        [("fast", "plain")],
        n_boot=200,
    )
    assert (clean.censored_bound, clean.censored_ratio) == ("", None)


def test_first_reach_reads_the_cost_of_the_last_row_that_logged_it():
    """A row without the cost keys (a recovered row) costs what the last earlier row logged."""
    recs = [{"step": 0, VAL: 0.0}, {"step": 1, TOK: 100, TIME: 3.0}, {"step": 2, VAL: 0.9}, {"step": 3, TOK: 250}]
    assert first_reach(recs, VAL, 0.5, [TOK, TIME]) == first_reach(recs[:3], VAL, 0.5, [TOK, TIME])
    assert first_reach(recs, VAL, 0.5, [TOK, TIME]).costs == {TOK: 100.0, TIME: 3.0}


def test_cost_band_interpolates_every_seed_onto_the_range_they_all_reached(campaign):
    # base seeds 0, 1, 3: validation at steps 0, 5, 10 = tokens 0, 5000 (1 + seed), 10000 (1 + seed)
    band = cost_band(campaign["base"], VAL, TOK, points=11)
    assert band.n == 3 and band.x == pytest.approx(np.linspace(0, 10000, 11))  # seed 0 ends first, at 10000
    by_hand = []
    for seed in (0, 1, 3):
        xs = [0, 5000 * (1 + seed), 10000 * (1 + seed)]
        ys = [0.1 + 0.01 * seed, 0.2 + 0.01 * seed, 0.3 + 0.01 * seed]
        by_hand.append(np.interp(band.x, xs, ys))
    assert band.mean == pytest.approx(np.mean(by_hand, axis=0).tolist())
    assert band.std == pytest.approx(np.std(by_hand, axis=0, ddof=1).tolist())
    # against time (2 s a step for every seed) the seeds share their x: the band is the step band, stretched
    t = cost_band(campaign["base"], VAL, TIME, points=3)
    assert t.x == [0.0, 10.0, 20.0]
    assert t.mean == pytest.approx(seed_band(campaign["base"], VAL).mean)
    assert cost_band(campaign["base"], VAL, "no/such_key") == cost_band({}, VAL, TOK)
    assert cost_band({}, VAL, TOK).x == [] and cost_band({}, VAL, TOK).n == 0
    single = cost_band({0: campaign["fast"][0]}, VAL, TOK, points=2)
    assert single.n == 1 and single.std == [0.0, 0.0]


def test_report_draws_the_target_key_against_tokens_and_time(tmp_path, campaign, monkeypatch):
    from matplotlib.figure import Figure

    saved = {}
    real_savefig = Figure.savefig

    def savefig(fig, path, *a, **k):
        saved[Path(path).name] = fig
        return real_savefig(fig, path, *a, **k)

    monkeypatch.setattr(Figure, "savefig", savefig)
    (tmp_path / "spec.yaml").write_text(
        "name: demo\nentry: fake_entry\nconditions: {base: [], fast: []}\nseeds: [0, 1, 2, 3]\n"
    )
    out = tmp_path / "out"
    write_campaign_logs(out / "demo", campaign)
    assert main(["report", str(tmp_path / "spec.yaml"), "--out-root", str(out), "--target", "0.25"]) == 0
    fig = saved["report_tokens.png"]
    tok_ax, time_ax = fig.axes  # one panel per cost key
    assert TOK in tok_ax.get_xlabel() and TIME in time_ax.get_xlabel() and tok_ax.get_title() == VAL
    # every run's validation points at its cumulative tokens: fast seed 2 validates at steps 0, 5, 10
    xs = [list(line.get_xdata()) for line in tok_ax.get_lines() if line.get_linestyle() == "None"]
    assert [0.0, 15000.0, 30000.0] in xs and len(xs) == 5  # 3 base + 2 fast runs
    target = [line for line in tok_ax.get_lines() if line.get_label() == "target 0.25"]
    assert len(target) == 1 and list(target[0].get_ydata()) == [0.25, 0.25]
    assert {"report.png", "report_tokens.png"} <= set(saved)


def test_cost_curves_leave_out_a_cost_key_no_run_logged(tmp_path, campaign, monkeypatch):
    """A recipe that logs no generated tokens (the Composer) gets the time panel only; with neither, no file."""
    from matplotlib.figure import Figure

    from verl_ext.campaign.render import plot_cost_curves

    saved = []
    real_savefig = Figure.savefig
    monkeypatch.setattr(Figure, "savefig", lambda fig, *a, **k: (saved.append(fig), real_savefig(fig, *a, **k)))
    no_tokens = {
        c: {s: [{k: v for k, v in r.items() if k != TOK} for r in recs] for s, recs in runs.items()}
        for c, runs in campaign.items()
    }
    costs = {TOK: "generated tokens", TIME: "training time (s)"}
    out = plot_cost_curves(no_tokens, VAL, costs, tmp_path / "t.png")
    assert out == tmp_path / "t.png" and out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert [ax.get_xlabel() for ax in saved[0].axes] == [f"training time (s) ({TIME})"]
    assert plot_cost_curves(no_tokens, VAL, {TOK: "generated tokens"}, tmp_path / "none.png") is None
    assert not (tmp_path / "none.png").exists() and len(saved) == 1


def test_default_target_key_is_the_pooled_accuracy_when_validation_has_several_sources(campaign):
    """Validation over several data sources (the generated task's modules) logs one key per source and the pooled
    `val-core/all/...`; the default target pattern matches them all and takes the pooled one. Without it, several
    matches still need a named key."""
    from verl_ext.campaign.report import DEFAULT_TARGET_KEY, _one_key

    VAL_ACC_ALL = "val-core/all/acc/mean@1"
    for runs in campaign.values():
        for recs in runs.values():
            for r in recs:
                if VAL in r:
                    r[VAL_ACC_ALL] = r["val-core/other/acc/mean@1"] = r[VAL]
    assert _one_key(DEFAULT_TARGET_KEY, campaign, required=True) == VAL_ACC_ALL
    for runs in campaign.values():
        for recs in runs.values():
            for r in recs:
                r.pop(VAL_ACC_ALL, None)
    with pytest.raises(ValueError, match="name one"):
        _one_key(DEFAULT_TARGET_KEY, campaign, required=True)


def test_default_target_key_takes_sampled_validation(campaign):
    """Validation sampled n times a question logs `mean@n`, not `mean@1`: the default keys find it."""
    from verl_ext.campaign.report import DEFAULT_TARGET_KEY, _one_key

    for runs in campaign.values():
        for recs in runs.values():
            for r in recs:
                if VAL in r:
                    r["val-core/all/acc/mean@4"] = r["val-core/other/acc/mean@4"] = r.pop(VAL)
    assert _one_key(DEFAULT_TARGET_KEY, campaign, required=True) == "val-core/all/acc/mean@4"


def test_report_prints_the_predicted_ratio_beside_the_measured_one(tmp_path, campaign, capsys):
    (tmp_path / "spec.yaml").write_text(
        "name: demo\nentry: fake_entry\nconditions: {base: [], fast: []}\nseeds: [0, 1, 2, 3]\n"
    )
    out = tmp_path / "out"
    write_campaign_logs(out / "demo", campaign)
    args = ["report", str(tmp_path / "spec.yaml"), "--out-root", str(out), "--target", "0.25", "--speedup", "fast:base"]
    assert main([*args, "--predicted", "fast:base=0.6"]) == 0
    tables = [t for t in (out / "demo" / "report.md").read_text().split("\n\n") if "| fast / base |" in t]
    assert len(tables) == 2 and all(t.splitlines()[-1].endswith("| 0.600 |") for t in tables)  # tokens, time
    with pytest.raises(SystemExit, match="not one of the --speedup pairs"):
        main([*args, "--predicted", "base:fast=0.6"])
    with pytest.raises(SystemExit, match="COND:REF=RATIO"):
        main([*args, "--predicted", "fast:base"])
    assert main([*args, "--at-step", "5", "7"]) == 0
    md = (out / "demo" / "report.md").read_text()
    assert f"`{VAL}` at step 5" in md and f"`{VAL}` at step 7" not in md  # 7: off the validation grid
    assert "`critic/score/mean` at step 7" in md  # logged every step
    assert main([*args, "--at-minutes", "0.25"]) == 0  # 15 s of training time: step 5's validation
    md = (out / "demo" / "report.md").read_text()
    assert f"`{VAL}` by 0.25 min of training time" in md
    assert main([*args, "--change", "0", "5", "--half-width", "0.02"]) == 0
    md = (out / "demo" / "report.md").read_text()
    assert f"`{VAL}` from step 0 to step 5, within each run" in md
    assert "runs for a 95% half-width of 0.02 |" in md and "pairs for a 95% half-width of 0.02 |" in md
    assert "`critic/score/mean` from step 0" not in md  # no training reward at step 0: no table
    assert main([*args, "--seeds", "0"]) == 0  # seed 0 alone: one run a condition
    finals = (out / "demo" / "report.md").read_text().split(f"Final `{VAL}`")[1].split("\n\n")[1]
    assert "| base (baseline) | 1 |" in finals and "| fast | 1 |" in finals
    with pytest.raises(SystemExit, match="--seeds"):
        main([*args, "--seeds", "9"])


def test_time_net_of_validation_subtracts_the_evaluations_run_so_far():
    """Reference form: net time = training time - the sum of the evaluation times (validation, large held-out
    evaluation, held-out pass@k) logged at steps 1..s; what ran before training (step 0) is not in the training time
    and not subtracted. The loaded records are left as read: the derived key is on copies."""
    from verl_ext.campaign.derived import NET_TIME_KEY, VAL_TIME_KEY, time_net_of_validation

    heldout, pass_at_k = "timing_s/heldout", "timing_s/pass_at_k"
    recs = [
        {"step": 0, VAL_TIME_KEY: 9.0, heldout: 100.0},
        {"step": 2, TIME: 30.0, VAL_TIME_KEY: 5.0},
        {"step": 1, TIME: 10.0},
        {"step": 3, TIME: 45.0},
        {"step": 4, VAL_TIME_KEY: 4.0, heldout: 6.0},  # a row without its time (recovered): nothing derived
        {"step": 5, TIME: 80.0, heldout: 3.0, pass_at_k: 2.0},
    ]
    campaign = {"c": {0: recs}}
    derived = time_net_of_validation(campaign, TIME)
    assert derived is not None
    net = derived["c"][0]
    assert {r["step"]: r.get(NET_TIME_KEY) for r in net} == {0: None, 1: 10.0, 2: 25.0, 3: 40.0, 4: None, 5: 60.0}
    # the held-out evaluation alone is evaluation time too
    alone = time_net_of_validation({"c": {0: [{"step": 1, TIME: 30.0, heldout: 20.0}]}}, TIME)
    assert alone["c"][0][0][NET_TIME_KEY] == 10.0
    assert [{k: v for k, v in r.items() if k != NET_TIME_KEY} for r in net] == recs  # the rows, in their order
    assert all(NET_TIME_KEY not in r for r in recs)
    assert time_net_of_validation({"c": {0: [{"step": 1, TIME: 3.0}]}}, TIME) is None


def test_informative_groups_are_the_running_sum_of_mixed_groups_trained():
    """Reference form: at step s, sum over steps 1..s of train_batch_groups * train_groups_mixed_frac; a row without
    a training batch (the validation before training) gets nothing. The loaded records are left as read."""
    from verl_ext.campaign.derived import INFORMATIVE_KEY, informative_groups
    from verl_ext.metrics_log.keys import MIXED_FRAC_KEY, TRAIN_BATCH_GROUPS_KEY

    recs = [
        {"step": 2, TRAIN_BATCH_GROUPS_KEY: 4.0, MIXED_FRAC_KEY: 0.5},
        {"step": 0, "val-core/all/acc/mean@1": 0.1},
        {"step": 1, TRAIN_BATCH_GROUPS_KEY: 4.0, MIXED_FRAC_KEY: 0.25},
        {"step": 3, TRAIN_BATCH_GROUPS_KEY: 4.0, MIXED_FRAC_KEY: 1.0},
    ]
    derived = informative_groups({"plain": {0: recs}})
    assert derived is not None
    assert {r["step"]: r.get(INFORMATIVE_KEY) for r in derived["plain"][0]} == {0: None, 1: 1.0, 2: 3.0, 3: 7.0}
    assert all(INFORMATIVE_KEY not in r for r in recs)
    assert informative_groups({"c": {0: [{"step": 1, TRAIN_BATCH_GROUPS_KEY: 4.0}]}}) is None


def test_pass_at_k_keys_share_a_panel_against_k():
    from verl_ext.campaign.render import band_panels

    keys = [VAL, "val-pass/all/pass@16", "val-pass/all/pass@1", "actor/entropy", "val-pass/m/pass@4",
            "val-pass/all/pass@4", "not/pass@x"]  # fmt: skip
    assert band_panels(keys) == [
        (VAL, []),
        ("val-pass/all", [(1, "val-pass/all/pass@1"), (4, "val-pass/all/pass@4"), (16, "val-pass/all/pass@16")]),
        ("actor/entropy", []),
        ("val-pass/m", [(4, "val-pass/m/pass@4")]),
        ("not/pass@x", []),
    ]


def test_bands_draw_pass_at_k_at_each_runs_last_step_and_a_condition_in_one_colour(tmp_path, campaign, monkeypatch):
    """pass@k is logged once a run, at its end: its panel has k on the x axis and, per condition, the mean and sample
    std over the runs of their last value; a single-point key against the step keeps a marker; each condition has
    the same colour in every panel."""
    from matplotlib.figure import Figure

    from verl_ext.campaign.render import plot_bands

    saved = []
    real_savefig = Figure.savefig
    monkeypatch.setattr(Figure, "savefig", lambda fig, *a, **k: (saved.append(fig), real_savefig(fig, *a, **k)))
    p1, p4, once = "val-pass/all/pass@1", "val-pass/all/pass@4", "eval/once"
    for runs in campaign.values():
        for seed, recs in runs.items():
            recs[-1] |= {p1: 0.1 * (seed + 1), p4: 0.3 * (seed + 1), once: 1.0}
    campaign["fast"][0][-2][p1] = 0.9  # an earlier value: not the run's last
    plot_bands(campaign, [VAL, p4, p1, once], tmp_path / "b.png")
    val_ax, pass_ax, once_ax = saved[0].axes[:3]
    assert pass_ax.get_xlabel() == "k" and pass_ax.get_title() == "val-pass/all: pass@k at the last step"
    bars = {c.get_label(): c for c in pass_ax.containers}  # one errorbar per condition
    (base, *_), (fast, *_) = bars["base (n=3)"].lines, bars["fast (n=2)"].lines
    assert list(base.get_xdata()) == [1, 4] and list(fast.get_xdata()) == [1, 4]
    assert base.get_ydata() == pytest.approx([np.mean([0.1, 0.2, 0.3]), np.mean([0.3, 0.6, 0.9])])
    assert fast.get_ydata() == pytest.approx([0.15, 0.45])
    (base_std,) = bars["base (n=3)"].lines[2]  # the error bars: the runs' sample std
    assert [s[1][1] - s[0][1] for s in base_std.get_segments()] == pytest.approx(
        [2 * np.std([0.1, 0.2, 0.3], ddof=1), 2 * np.std([0.3, 0.6, 0.9], ddof=1)]
    )
    val_colors = {line.get_label(): line.get_color() for line in val_ax.get_lines()}
    assert val_colors == {"base (n=3)": base.get_color(), "fast (n=2)": fast.get_color()}
    assert base.get_color() != fast.get_color()
    once_line = once_ax.get_lines()[0]
    assert list(once_line.get_xdata()) == [10] and once_line.get_marker() == "o"


def test_a_reference_run_is_a_row_of_each_table_and_a_grey_line_on_each_panel(tmp_path, campaign, monkeypatch):
    """--reference released=PATH: the released model's val_only log beside the campaign, at its last values; a bad
    item is refused naming the option before anything is drawn."""
    from matplotlib.figure import Figure

    saved = []
    real_savefig = Figure.savefig
    monkeypatch.setattr(Figure, "savefig", lambda fig, *a, **k: (saved.append(fig), real_savefig(fig, *a, **k)))
    p1, p4 = "val-pass/all/pass@1", "val-pass/all/pass@4"
    for runs in campaign.values():
        for seed, recs in runs.items():
            recs[-1] |= {p1: 0.1 * (seed + 1), p4: 0.3 * (seed + 1)}
    spec = "name: demo\nentry: fake_entry\nconditions: {base: [], fast: []}\nseeds: [0, 1, 2]\n"
    (tmp_path / "spec.yaml").write_text(spec)
    out = tmp_path / "out"
    write_campaign_logs(out / "demo", campaign)
    write_campaign_logs(tmp_path / "ref", {"released": {0: [{"step": 0, VAL: 0.125, p1: 0.05, p4: 0.2}]}})
    ref = f"released={tmp_path / 'ref' / 'released_s0' / 'metrics.jsonl'}"
    md_path = tmp_path / "r.md"
    args = ["report", str(tmp_path / "spec.yaml"), "--out-root", str(out), "--keys", VAL, "val-pass/all/pass@*"]
    assert main([*args, "--reference", ref, "--markdown", str(md_path)]) == 0
    md = md_path.read_text()
    assert "| released (reference) | 1 | 0.125 | - | - | - |" in md.split(f"Final `{VAL}`")[1].split("Final")[0]
    assert "| released (reference) | 1 | 0.200 |" in md.split(f"Final `{p4}`")[1]
    val_ax, pass_ax = saved[0].axes[:2]
    (hline,) = [line for line in val_ax.get_lines() if line.get_label() == "released (reference)"]
    assert list(hline.get_ydata()) == [0.125, 0.125] and hline.get_linestyle() == "--"
    (curve,) = [line for line in pass_ax.get_lines() if line.get_label() == "released (reference)"]
    assert list(curve.get_xdata()) == [1, 4] and list(curve.get_ydata()) == [0.05, 0.2]
    for bad, says in [("released", "give LABEL=METRICS_JSONL"), (f"x={tmp_path / 'none.jsonl'}", "no metrics log")]:
        with pytest.raises(SystemExit, match=says):
            main([*args, "--reference", bad])


def test_a_key_only_some_conditions_log_has_no_difference_written_as_nan():
    """SEPA's lambda is logged by the SEPA arm only: its row shows the value, and the difference against a baseline
    that never logged the key is '-', not 'nan'."""
    key = "adv/sepa_lambda"
    campaign = {
        "base": {s: [{"step": 4, VAL: 0.1}] for s in (0, 1)},
        "sepa": {s: [{"step": 4, VAL: 0.1, key: 1.0}] for s in (0, 1)},
    }
    rows = final_table(campaign, key, "base", bootstrap=200)
    table = final_markdown(key, rows, "base")
    assert "nan" not in table
    sepa_line = next(line for line in table.splitlines() if line.startswith("| sepa"))
    assert sepa_line.split(" | ")[1:5] == ["2", "1.000", "0.000", "-"]


def test_change_within_each_run_is_paired_by_run_with_a_t_interval():
    """Before and after training in the same run: the agent's step-0 and step-16 accuracies. The mean change, its
    t-interval (a t table's quantile as reference), the sign-flip p and the runs that rose, fell or stayed are read
    per condition; a condition that never logged the key at both steps has no row."""
    before = {"agent": [0.57, 0.55, 0.60, 0.52], "other": [0.5, 0.5, 0.5, 0.5]}
    after = {"agent": [0.66, 0.61, 0.60, 0.58], "other": [0.45, 0.5, 0.52, 0.5]}
    campaign = {
        c: {
            s: [{"step": 0, VAL: before[c][s]}, {"step": 8, "critic/score/mean": 0.3}, {"step": 16, VAL: after[c][s]}]
            for s in range(4)
        }
        for c in before
    }
    campaign["silent"] = {0: [{"step": 0, VAL: 0.5}]}  # never validated at step 16
    rows = {r.condition: r for r in change_table(campaign, VAL, 0, 16, bootstrap=2000)}
    assert set(rows) == {"agent", "other"}
    agent = rows["agent"]
    diffs = [a - b for a, b in zip(after["agent"], before["agent"], strict=True)]
    assert agent.change.value == pytest.approx(sum(diffs) / 4) and agent.change.n == 4
    half = 3.182 * np.std(diffs, ddof=1) / 2  # t_{0.975, 3} = 3.182, as printed in t tables
    want = (np.mean(diffs) - half, np.mean(diffs) + half)
    assert (agent.change.low, agent.change.high) == pytest.approx(want, abs=2e-4 * half)
    assert agent.change.p == pytest.approx(sign_flip_p(diffs)) and agent.change.boot_method == ""  # 4 runs
    assert (agent.rose, agent.fell) == (3, 0)  # seed 2 stayed at 0.60
    assert (rows["other"].rose, rows["other"].fell) == (1, 1)
    assert agent.before.mean == pytest.approx(np.mean(before["agent"]))
    assert agent.after.mean == pytest.approx(np.mean(after["agent"]))
    table = change_markdown(VAL, 0, 16, list(rows.values()))
    line = next(x for x in table.splitlines() if x.startswith("| agent"))
    c = agent.change
    assert line.endswith(
        f"| {c.value:+.3f} (4) | [{c.low:+.3f}, {c.high:+.3f}] | {c.p:.3g} | 3 / 0 / 1 | {c.half_width:.3f} | "
        f"{c.to_resolve:.0f} |"
    )
    # without bootstrap draws: the same statistics (none of them resamples)
    assert change_table(campaign, VAL, 0, 16)[0].change == c
    assert change_table(campaign, "critic/score/mean", 0, 16) == []


def test_cost_keys_no_run_logged_are_left_out_of_the_cost_tables(campaign, capsys):
    """The Composer logs no generated-token count: its report's cost table has the time column only, and says so
    (the table once raised a KeyError for the absent key and the whole report failed)."""
    from verl_ext.campaign.report import with_derived_costs

    no_tokens = {
        c: {s: [{k: v for k, v in r.items() if k != TOK} for r in recs] for s, recs in runs.items()}
        for c, runs in campaign.items()
    }
    _, costs = with_derived_costs(no_tokens, TOK, TIME)
    assert TOK not in costs and costs[TIME] == "training time (s)"
    assert f"no run logged {TOK!r} (generated tokens)" in capsys.readouterr().out
    rows = cost_table(no_tokens, VAL, 0.25, list(costs))
    assert rows and all(set(r.costs) == {TIME} for r in rows)
    _, both = with_derived_costs(campaign, TOK, TIME)  # logged: kept
    assert TOK in both and "no run logged" not in capsys.readouterr().out


def test_the_cost_tables_show_the_target_as_given():
    """A target set just under a question count (26/144 = 0.18056, given as 0.1805) is printed as given: at three
    decimals it read 0.180, a target the runs were not held to."""
    from verl_ext.campaign.render import cost_markdown

    assert cost_markdown(VAL, 0.1805, [], {TIME: "training time (s)"}).startswith(f"Cost to reach `{VAL}` >= 0.1805 (")
    assert cost_markdown(VAL, 0.09375, [], {TIME: "t"}).startswith(f"Cost to reach `{VAL}` >= 0.09375 (")
