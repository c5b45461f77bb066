"""Campaign summaries from metric records (pure: no files, no plotting, the records left as read): seed bands,
final-step tables, cost to target, speed-ups. The report renders them (render.py) and derives further metrics first
(derived.py).

Input: per condition, per seed, the run's metric records (the JSONL log's dicts, ``{"step": s, key: value, ...}``).

- Seed band of a key: at every step any seed logged it, the mean over the seeds that did, their sample std (ddof 1,
  0 for a single seed) and how many they were. Sparse keys (validation every test_freq steps) stay sparse.
- Final value of a run: the key's last finite value (for validation metrics that is the last evaluation). The same
  table at a given step (each run's value logged at exactly that step) compares arms that ran different numbers of
  steps at equal steps: whether a step of one arm is worth more than a step of another.
- Mean a step of a run (``per_step``): the mean of a key's values over the steps that logged it, for a count each step
  logs (error sites, replay pairs built): arms are compared on their rates, as on their final values. A running total
  (teacher calls) is read at its final value instead.
- Final-step table: per condition mean / std / n of the final values, the difference to the baseline condition,
  Welch's two-sided p-value, and the paired difference over the seeds both ran (stats.paired_difference: its
  t-interval and half-width, exact sign-flip p, pairs above 0, pairs for 80% power); bootstrap intervals of the
  difference (unpaired, and paired BCa) only when asked for (``bootstrap`` draws) and only from
  stats.MIN_BOOTSTRAP_PAIRS runs per group / pairs up: verl_ext/campaign/stats.py says why.
- Change within a run (``change_table``): each run's value at one step less its value at an earlier one (before and
  after training), so a run is paired with itself; per condition the same paired statistics of the changes over the
  runs (t-interval, sign-flip p, how many rose, fell or stayed). "Did it learn", where the final table asks "did it
  beat the baseline".
- Cost to reach a target: the first step at which a run's target metric (validation accuracy) is >= target, and the
  value of each cumulative cost key at that step (generated tokens ``curriculum/tokens_generated``, training wall
  time ``time/train_total_s``, both carried across resumes by the trainers; the keys and the value at a step,
  ``cumulative_at_steps``, are those of the metric plots' token and time axes, verl_ext/metrics_log/plot.py).
  Reached at step 0 (validation before training) costs 0. The target is absolute, or a fraction of the best
  condition's mean final value, so conditions are compared at the same accuracy: "how much did it take to get
  there", the figure of merit of curriculum sampling (SPEED-RL reports its speed-up this way). Runs that never reach
  it are counted, not averaged.
- Speed-up of a condition over a reference: over the seeds both ran (a seed pairs the runs: same prompt order and
  initial model), the ratio of mean cost to the target, with the geometric mean of the per-pair ratios and its
  t-interval on the log scale (stats.paired_ratio; a BCa interval of the ratio of means from
  stats.MIN_BOOTSTRAP_PAIRS pairs up), on the pairs where both runs reached it; pairs where only one did are counted
  beside it (their cost to target is not known, only bounded by the run's total).
- The same ratio with those pairs kept: a run that never reached the target cost at least its total (the cost key's
  last value), so over the pairs where at least one run reached it, with each censored run at its total, the ratio
  is an upper bound of the true one when only the reference's runs were censored (the reference really cost more) and
  a lower bound when only the condition's were. Dropping the pairs instead would drop exactly the seeds on which the
  censored arm struggled. When both sides have censored runs the value bounds nothing and is not given.
- A band against a cumulative cost (the report's accuracy-vs-tokens and -vs-time panels): seeds validate at different
  token counts and times, so there is no common x to average at. Each run's points (x = the cost key at the step,
  as above) are joined by straight lines and read on a common grid of x values from 0 to the smallest of the runs'
  last x, the range every seed covers; mean and sample std over the seeds at each grid point. Linear between two
  validations is an assumption, and the runs' own points beyond that range are not in the band: the report draws
  every run's points beside the band.
"""

from __future__ import annotations

import fnmatch
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from verl_ext.campaign.stats import (
    MIN_BOOTSTRAP_PAIRS,
    PairedRatio,
    PairedStats,
    Summary,
    bootstrap_diff_ci,
    paired_difference,
    paired_ratio,
    summarize,
    welch_t_test,
)
from verl_ext.metrics_log.console import is_number
from verl_ext.metrics_log.plot import cumulative_at_steps, points_against

Records = Sequence[Mapping]
Campaign = Mapping[str, Mapping[int, Records]]  # condition -> seed -> records


def logs_key(records: Records, key: str) -> bool:
    """Whether any of a run's records has a finite value of ``key``."""
    return any(is_number(r.get(key)) for r in records)


def expand_keys(patterns: Sequence[str], campaign: Campaign, required: bool) -> list[str]:
    """Keys matching each pattern (fnmatch, e.g. ``val-core/*/acc/mean@1``) in any run, in pattern order.

    required: a pattern that matches nothing is an error (a typo), else it is dropped (optional default keys)."""
    logged = sorted({k for runs in campaign.values() for recs in runs.values() for r in recs for k in r if k != "step"})
    out: list[str] = []
    for pat in patterns:
        hits = [k for k in logged if fnmatch.fnmatchcase(k, pat)]
        if not hits and required:
            raise KeyError(f"no run logged a key matching {pat!r}; logged keys include {logged[:15]}")
        out.extend(k for k in hits if k not in out)
    return out


@dataclass(frozen=True)
class Band:
    steps: list[int]
    mean: list[float]
    std: list[float]
    n: list[int]


def seed_band(runs: Mapping[int, Records], key: str) -> Band:
    by_step: dict[int, list[float]] = {}
    for recs in runs.values():
        for r in recs:
            if is_number(r.get(key)):
                by_step.setdefault(int(r["step"]), []).append(float(r[key]))
    steps = sorted(by_step)
    stats = [summarize(by_step[s]) for s in steps]
    return Band(steps, [s.mean for s in stats], [0.0 if s.n < 2 else s.std for s in stats], [s.n for s in stats])


def final_value(
    records: Records,
    key: str,
    step: int | None = None,
    within: tuple[str, float] | None = None,
    per_step: bool = False,
) -> float | None:
    """The key's last finite value, or with ``step`` its value logged at exactly that step, or with ``within`` =
    (time key, seconds) its last value logged at a row whose cumulative time is at most that many seconds (a long
    run's accuracy at 10 or 60 minutes of training), or with ``per_step`` the mean of its values over the steps that
    logged it (a count a step, such as error sites or replay pairs: the run's rate); None if not logged."""
    if per_step:
        values = [float(r[key]) for r in records if is_number(r.get(key))]
        return sum(values) / len(values) if values else None
    for r in sorted(records, key=lambda r: r["step"], reverse=True):
        if step is not None and r["step"] != step:
            continue
        if within is not None and not (is_number(r.get(within[0])) and r[within[0]] <= within[1]):
            continue
        if is_number(r.get(key)):
            return float(r[key])
    return None


@dataclass(frozen=True)
class FinalRow:
    condition: str
    summary: Summary
    diff: float  # mean - baseline mean
    p: float  # Welch two-sided, nan if undefined
    ci: tuple[float, float] | None  # unpaired bootstrap CI of diff: asked for, and both groups >= MIN_BOOTSTRAP_PAIRS
    paired: PairedStats | None = None  # the difference over the seeds both ran; None for the baseline


def final_table(
    campaign: Campaign,
    key: str,
    baseline: str,
    bootstrap: int = 0,
    level: float = 0.95,
    step: int | None = None,
    within: tuple[str, float] | None = None,
    per_step: bool = False,
) -> list[FinalRow]:
    """Per condition the runs' final values of ``key`` (with ``step``, ``within`` or ``per_step``: their values at that
    step, by that time, or their means a step: `final_value`) against the baseline's: mean, std, difference, Welch p,
    the paired statistics over the seeds both ran, and with ``bootstrap`` draws the bootstrap intervals where there are
    enough runs (module docstring)."""
    if baseline not in campaign:
        raise KeyError(f"baseline condition {baseline!r} is not among {list(campaign)}")
    by_seed = {
        c: {seed: v for seed, recs in runs.items() if (v := final_value(recs, key, step, within, per_step)) is not None}
        for c, runs in campaign.items()
    }
    finals = {c: list(vals.values()) for c, vals in by_seed.items()}
    base = finals[baseline]
    base_mean = summarize(base).mean
    rows = []
    for cond, vals in finals.items():
        s = summarize(vals)
        is_base = cond == baseline
        ci = paired = None
        if not is_base:
            if bootstrap and min(len(vals), len(base)) >= MIN_BOOTSTRAP_PAIRS:
                ci = bootstrap_diff_ci(vals, base, n_boot=bootstrap, level=level)
            seeds = sorted(set(by_seed[cond]) & set(by_seed[baseline]))
            a, b = [by_seed[cond][x] for x in seeds], [by_seed[baseline][x] for x in seeds]
            paired = paired_difference(a, b, level=level, n_boot=bootstrap)
        diff = 0.0 if is_base else s.mean - base_mean
        p = math.nan if is_base else welch_t_test(vals, base).p
        rows.append(FinalRow(cond, s, diff, p, ci, paired))
    return rows


@dataclass(frozen=True)
class ChangeRow:
    condition: str
    before: Summary  # the runs' values at the first step
    after: Summary  # ... and at the second, over the same runs
    change: PairedStats  # of after - before over the runs (stats.paired_difference)

    @property
    def rose(self) -> int:
        return self.change.above

    @property
    def fell(self) -> int:
        """Runs with after < before; the rest of change.n stayed."""
        return self.change.below


def change_table(
    campaign: Campaign, key: str, start: int, end: int, bootstrap: int = 0, level: float = 0.95
) -> list[ChangeRow]:
    """Per condition the change of ``key`` from step ``start`` to step ``end`` within each run that logged it at both
    (a condition where none did has no row): the paired statistics of the changes, with ``bootstrap`` draws a BCa
    interval where there are enough runs."""
    rows = []
    for cond, runs in campaign.items():
        pairs = [
            (a, b)
            for recs in runs.values()
            if (a := final_value(recs, key, start)) is not None and (b := final_value(recs, key, end)) is not None
        ]
        if not pairs:
            continue
        before, after = (np.asarray(x, dtype=float) for x in zip(*pairs, strict=True))
        change = paired_difference(after, before, level=level, n_boot=bootstrap)
        rows.append(ChangeRow(cond, summarize(before), summarize(after), change))
    return rows


@dataclass(frozen=True)
class Reach:
    step: int
    costs: dict[str, float]


def first_reach(records: Records, key: str, target: float, cost_keys: Sequence[str]) -> Reach | None:
    """The first step with ``key`` >= target and each cost key's cumulative value there (see module docstring)."""
    at = {c: cumulative_at_steps(records, c) for c in cost_keys}
    for r in sorted(records, key=lambda r: r["step"]):
        if is_number(r.get(key)) and r[key] >= target:
            step = int(r["step"])
            missing = [c for c in cost_keys if step not in at[c]]
            if missing:
                raise KeyError(
                    f"cost keys {missing} not logged by step {step}; is this the right --tokens-key / "
                    "--time-key for this recipe?"
                )
            return Reach(step, {c: at[c][step] for c in cost_keys})
    return None


@dataclass(frozen=True)
class CostBand:
    x: list[float]  # the common grid of cumulative cost values
    mean: list[float]
    std: list[float]  # sample std over the seeds (0 for a single seed)
    n: int  # seeds in the band


def cost_band(runs: Mapping[int, Records], key: str, cost_key: str, points: int = 100) -> CostBand:
    """``key`` against cumulative ``cost_key``, mean and std over the seeds on a common grid (module docstring): each
    run interpolated linearly between its points, the grid from 0 to the smallest last x of the runs with a point.
    Runs that never logged ``cost_key`` are left out. Empty when no run has a point or the runs share no range."""
    curves = [points_against(recs, key, cost_key)[1:] for recs in runs.values() if logs_key(recs, cost_key)]
    curves = [(xs, ys) for xs, ys in curves if xs]
    if not curves:
        return CostBand([], [], [], 0)
    lo = max(min(xs) for xs, _ in curves)
    hi = min(max(xs) for xs, _ in curves)
    if hi < lo:
        return CostBand([], [], [], 0)
    grid = np.linspace(lo, hi, points) if hi > lo else np.asarray([lo])
    ys = np.stack([np.interp(grid, *zip(*sorted(zip(xs, vals)))) for xs, vals in curves])
    std = ys.std(axis=0, ddof=1) if len(curves) > 1 else np.zeros(len(grid))
    return CostBand(grid.tolist(), ys.mean(axis=0).tolist(), std.tolist(), len(curves))


def resolve_target(campaign: Campaign, key: str, target: float | None, target_frac: float | None) -> float:
    """An absolute target, or target_frac times the best condition's mean final value of ``key``."""
    if (target is None) == (target_frac is None):
        raise ValueError("give exactly one of target (absolute) and target_frac (fraction of the best final mean)")
    if target is not None:
        return float(target)
    if not 0.0 < target_frac <= 1.0:
        raise ValueError(f"target_frac must be in (0, 1], got {target_frac}")
    means = [
        summarize([v for recs in runs.values() if (v := final_value(recs, key)) is not None]).mean
        for runs in campaign.values()
    ]
    means = [m for m in means if math.isfinite(m)]
    if not means:
        raise KeyError(f"no run logged {key!r}: cannot set a target relative to the best final value")
    return target_frac * max(means)


@dataclass(frozen=True)
class CostRow:
    condition: str
    reached: int
    n: int
    step: Summary
    costs: dict[str, Summary]  # over the runs that reached the target


def cost_table(campaign: Campaign, key: str, target: float, cost_keys: Sequence[str]) -> list[CostRow]:
    rows = []
    for cond, runs in campaign.items():
        hits = [h for recs in runs.values() if (h := first_reach(recs, key, target, cost_keys)) is not None]
        rows.append(
            CostRow(
                cond,
                len(hits),
                len(runs),
                summarize([h.step for h in hits]),
                {c: summarize([h.costs[c] for h in hits]) for c in cost_keys},
            )
        )
    return rows


@dataclass(frozen=True)
class SpeedupRow:
    condition: str
    reference: str
    pairs: int  # seeds both conditions ran
    only_condition: int  # pairs where only the condition reached the target
    only_reference: int  # pairs where only the reference reached it
    neither: int
    ratio: PairedRatio  # mean cost of the condition / of the reference, over the pairs where both reached it
    # Over the pairs where at least one reached it, censored runs at their total: "<=" the ratio is an upper bound
    # (only the reference's runs were censored), ">=" a lower bound, "" none or both sides censored (no bound).
    censored_bound: str = ""
    censored_ratio: PairedRatio | None = None


def speedup_table(
    campaign: Campaign, key: str, target: float, cost_key: str, pairs: Sequence[tuple[str, str]], n_boot: int = 10_000
) -> list[SpeedupRow]:
    rows = []
    for cond, ref in pairs:
        for c in (cond, ref):
            if c not in campaign:
                raise KeyError(f"condition {c!r} has no runs; conditions with runs: {list(campaign)}")
        seeds = sorted(set(campaign[cond]) & set(campaign[ref]))
        reach = {(c, s): first_reach(campaign[c][s], key, target, [cost_key]) for c in (cond, ref) for s in seeds}
        both = [s for s in seeds if reach[cond, s] and reach[ref, s]]
        costs = [(reach[cond, s].costs[cost_key], reach[ref, s].costs[cost_key]) for s in both]
        only_cond = sum(1 for s in seeds if reach[cond, s] and not reach[ref, s])
        only_ref = sum(1 for s in seeds if reach[ref, s] and not reach[cond, s])
        bound, censored = "", None
        if bool(only_cond) != bool(only_ref):  # one side censored: its totals bound the ratio in one direction
            bound = "<=" if only_cond else ">="
            either = [s for s in seeds if reach[cond, s] or reach[ref, s]]
            censored = paired_ratio(
                [_cost_or_total(reach[cond, s], campaign[cond][s], cost_key) for s in either],
                [_cost_or_total(reach[ref, s], campaign[ref][s], cost_key) for s in either],
                n_boot=n_boot,
            )
        rows.append(
            SpeedupRow(
                cond,
                ref,
                len(seeds),
                only_cond,
                only_ref,
                sum(1 for s in seeds if not reach[cond, s] and not reach[ref, s]),
                paired_ratio([a for a, _ in costs], [b for _, b in costs], n_boot=n_boot),
                bound,
                censored,
            )
        )
    return rows


def _cost_or_total(hit: Reach | None, records: Records, cost_key: str) -> float:
    """The cost to the target, or for a run that never reached it the run's total: a lower bound of that cost."""
    if hit is not None:
        return hit.costs[cost_key]
    total = final_value(records, cost_key)
    return 0.0 if total is None else total
