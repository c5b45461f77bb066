"""Campaign report: per-condition mean curves with seed bands (two PNGs) and markdown tables of the final step and of
the cost to reach a target accuracy, read from the runs' JSONL metric logs.

    .venv/bin/python scripts/campaign.py report configs/campaign/advantage_ablation_cpu.yaml \
        [--out-root outputs/campaign] [--keys critic/score/mean 'val-core/*/acc/mean@*'] [--baseline grpo+none] \
        [--target-frac 0.9 | --target 0.3] [--target-key 'val-core/*/acc/mean@*'] [--bootstrap 10000] \
        [--speedup fast:plain fast:dapo] [--predicted fast:plain=0.75]

Writes <out-root>/<name>/report.png (one panel per key: the mean over seeds per condition, shaded +- one sample
std, against the training step), <out-root>/<name>/report_tokens.png (the target key against cumulative generated
tokens, against cumulative training time and, when the runs logged their validation time, against that time less the
validations (the same in every condition; summary.add_time_net_of_validation) and, when the runs logged their training
batches' mixed fraction, against the informative groups trained (summary.add_informative_groups), the cost table's
keys: per condition the seeds' mean and +- one std on a common grid of the x the seeds all reached, each run's own
points beside it, and the target as a dashed line; summary.cost_band says how) and <out-root>/<name>/report.md (also
printed), ready to paste into a results page. Keys are fnmatch patterns; the default set is drawn for whichever of
its keys the runs logged (train reward, validation accuracy, responses per training group, keep rate, SEPA lambda);
an explicit --keys pattern that matches nothing is an error. The baseline is the spec's first condition unless
--baseline is given. Runs without a metrics log yet are listed and left out.
The statistics are in verl_ext/campaign/summary.py and stats.py.
"""

from __future__ import annotations

import argparse
import fnmatch
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from verl_ext.campaign.spec import CampaignSpec
from verl_ext.campaign.summary import (
    INFORMATIVE_KEY,
    NET_TIME_KEY,
    TIME_KEY,
    TOKENS_KEY,
    Campaign,
    add_informative_groups,
    add_time_net_of_validation,
    cost_band,
    cost_markdown,
    cost_table,
    expand_keys,
    final_markdown,
    final_table,
    logs_key,
    resolve_target,
    seed_band,
    speedup_markdown,
    speedup_table,
)
from verl_ext.metrics_log.console import VAL_ACC_ALL_PATTERN, VAL_ACC_PATTERN
from verl_ext.metrics_log.jsonl import read_jsonl
from verl_ext.metrics_log.plot import points_against, save_figure

DEFAULT_KEYS = [
    "critic/score/mean",  # train reward
    VAL_ACC_PATTERN,  # validation accuracy (mean@n of n samples a question), one key per validation data source
    "curriculum/responses_per_training_group",
    "curriculum/keep_rate",
    "adv/sepa_lambda",
]
DEFAULT_TARGET_KEY = VAL_ACC_PATTERN
DEFAULT_TARGET_FRAC = 0.9  # with neither --target nor --target-frac: this fraction of the best final value


def load_campaign(
    spec: CampaignSpec,
    out_root: str | Path,
    only: Sequence[str] | None = None,
    seeds: Sequence[int] | None = None,
) -> tuple[Campaign, list[str]]:
    """{condition: {seed: records}} of the runs that have a metrics log, and the labels of those that have none
    (``only`` / ``seeds``: just those conditions / seeds)."""
    campaign: dict[str, dict[int, list[dict]]] = {}
    missing = []
    for run in spec.runs(out_root):
        if (only and run.condition not in only) or (seeds and run.seed not in seeds):
            continue
        records = read_jsonl(run.metrics_path)
        if records:
            campaign.setdefault(run.condition, {})[run.seed] = records
        else:
            missing.append(run.label)
    if not campaign:
        raise FileNotFoundError(
            f"no run of campaign {spec.name!r} under {Path(out_root) / spec.name} has a metrics log yet"
        )
    return campaign, missing


def plot_bands(campaign: Campaign, keys: Sequence[str], out: str | Path, title: str = "") -> Path:
    from verl_ext.metrics_log.plot import require_matplotlib

    require_matplotlib()
    import math

    import matplotlib

    matplotlib.use("Agg")  # files only: no display on cluster nodes
    import matplotlib.pyplot as plt
    import numpy as np

    if not keys:
        raise ValueError("no metric keys to plot")
    cols = min(len(keys), 3)
    rows = math.ceil(len(keys) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.8 * cols, 3.4 * rows), squeeze=False)
    for ax, key in zip(axes.flat, keys):
        for cond, runs in campaign.items():
            b = seed_band(runs, key)
            if not b.steps:
                continue
            mean, std = np.asarray(b.mean), np.asarray(b.std)
            sparse = len(b.steps) < 0.5 * (b.steps[-1] - b.steps[0] + 1)
            line = ax.plot(
                b.steps, mean, marker="o" if sparse else None, ms=3, lw=1.5, label=f"{cond} (n={len(runs)})"
            )[0]
            ax.fill_between(b.steps, mean - std, mean + std, color=line.get_color(), alpha=0.2, lw=0)
        ax.set_title(key, fontsize=9)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(keys) :]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=7)
    return save_figure(fig, out, title)


def plot_cost_curves(
    campaign: Campaign,
    key: str,
    cost_keys: Mapping[str, str],
    out: str | Path,
    target: float | None = None,
    title: str = "",
) -> Path | None:
    """`key` against each cumulative cost key ({key: axis label}), one panel each: per condition the band of
    summary.cost_band (mean +- one std over the seeds on the x range they all reached) and every run's own points.
    Cost keys no run logged get no panel, runs that did not log one have no points on its panel; None (nothing
    written) when no panel is left."""
    from verl_ext.metrics_log.plot import require_matplotlib

    require_matplotlib()
    import matplotlib

    matplotlib.use("Agg")  # files only: no display on cluster nodes
    import matplotlib.pyplot as plt
    import numpy as np

    logged = [c for c in cost_keys if any(logs_key(recs, c) for runs in campaign.values() for recs in runs.values())]
    if not logged:
        return None
    fig, axes = plt.subplots(1, len(logged), figsize=(5.2 * len(logged), 3.6), squeeze=False)
    for ax, cost_key in zip(axes.flat, logged):
        for cond, runs in campaign.items():
            b = cost_band(runs, key, cost_key)
            color, label = None, f"{cond} (n={len(runs)})"
            if b.x:
                mean, std = np.asarray(b.mean), np.asarray(b.std)
                color = ax.plot(b.x, mean, lw=1.5, label=label)[0].get_color()
                ax.fill_between(b.x, mean - std, mean + std, color=color, alpha=0.2, lw=0)
            for recs in runs.values():
                _, xs, values = points_against(recs, key, cost_key) if logs_key(recs, cost_key) else ([], [], [])
                if xs:
                    kw = {"label": label} if color is None else {"color": color}
                    color = ax.plot(xs, values, ls="none", marker="o", ms=2.5, alpha=0.5, **kw)[0].get_color()
        if target is not None:
            ax.axhline(target, color="gray", ls="--", lw=1, label=f"target {target:.3g}")
        ax.set_title(key, fontsize=9)
        ax.set_xlabel(f"{cost_keys[cost_key]} ({cost_key})", fontsize=8)
        ax.grid(alpha=0.3)
    axes.flat[0].legend(fontsize=7)
    return save_figure(fig, out, title)


def build_markdown(
    campaign: Campaign,
    keys: Sequence[str],
    baseline: str,
    target_key: str | None,
    target: float | None,
    target_frac: float | None,
    costs: Mapping[str, str],
    bootstrap: int = 0,
    speedups: Sequence[tuple[str, str]] = (),
    predicted: Mapping[tuple[str, str], float] | None = None,
    at_steps: Sequence[int] = (),
) -> str:
    parts = [final_markdown(k, final_table(campaign, k, baseline, bootstrap), baseline) for k in keys]
    for step in at_steps:
        for k in keys:
            rows = [r for r in final_table(campaign, k, baseline, bootstrap, step=step) if r.summary.n]
            if rows:  # no table for a key nobody logged at that step (validation off the test_freq grid)
                parts.append(final_markdown(k, rows, baseline, step=step))
    if target_key is not None:
        goal = resolve_target(campaign, target_key, target, target_frac)
        parts.append(cost_markdown(target_key, goal, cost_table(campaign, target_key, goal, list(costs)), costs))
        for cost_key, label in costs.items():
            if speedups:
                rows = speedup_table(campaign, target_key, goal, cost_key, speedups)
                parts.append(speedup_markdown(target_key, goal, label, rows, predicted))
    elif speedups:
        raise ValueError("--speedup needs a target key (--target-key) that the runs logged")
    return "\n\n".join(parts) + "\n"


def _one_key(pattern: str, campaign: Campaign, required: bool) -> str | None:
    keys = expand_keys([pattern], campaign, required=required)
    pooled = [k for k in keys if fnmatch.fnmatchcase(k, VAL_ACC_ALL_PATTERN)]
    if len(keys) > 1 and len(pooled) == 1:
        return pooled[0]  # validation over several data sources: the accuracy over all of them (console.py)
    if len(keys) > 1:
        raise ValueError(f"--target-key {pattern!r} matches {keys}: name one")
    return keys[0] if keys else None


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="campaign.py report", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("spec")
    p.add_argument("--out-root", default="outputs/campaign")
    p.add_argument("--only", nargs="+", help="conditions to report (default: all)")
    p.add_argument(
        "--seeds",
        nargs="+",
        type=int,
        help="seeds to report (default: all): while a campaign runs, the seeds every condition has finished, so a "
        "run still in progress is not read as a short one",
    )
    p.add_argument("--keys", nargs="+", help="metric keys / fnmatch patterns (default: the standard set, as logged)")
    p.add_argument("--baseline", help="condition the others are tested against (default: the spec's first)")
    p.add_argument(
        "--target-key",
        help=f"accuracy key for the cost-to-target table (default {DEFAULT_TARGET_KEY!r}, skipped if not logged)",
    )
    goal = p.add_mutually_exclusive_group()
    goal.add_argument("--target", type=float, help="absolute target of --target-key")
    goal.add_argument(
        "--target-frac",
        type=float,
        help=f"target = this fraction of the best condition's mean final value (default {DEFAULT_TARGET_FRAC})",
    )
    p.add_argument("--tokens-key", default=TOKENS_KEY, help="cumulative generated-token count")
    p.add_argument("--time-key", default=TIME_KEY, help="cumulative training wall time in seconds")
    p.add_argument("--bootstrap", type=int, default=0, help="add a bootstrap CI of the difference with this many draws")
    p.add_argument(
        "--speedup",
        nargs="+",
        default=[],
        metavar="COND:REF",
        help="cost-to-target ratios of COND over REF, paired by seed, with bootstrap CIs (e.g. fast:plain fast:dapo)",
    )
    p.add_argument(
        "--predicted",
        nargs="+",
        default=[],
        metavar="COND:REF=RATIO",
        help="a cost ratio predicted before the runs (the pass-rate probe's, e.g. fast:plain=0.75), shown beside the "
        "measured one of the same --speedup pair",
    )
    p.add_argument(
        "--at-step",
        nargs="+",
        type=int,
        default=[],
        metavar="STEP",
        help="also tabulate the keys at these steps (arms that ran different numbers of steps, compared step for "
        "step; a key not logged at a step, such as validation off the test_freq grid, has no row there)",
    )
    p.add_argument("--png", help="default <out-root>/<name>/report.png")
    p.add_argument("--cost-png", help="default <out-root>/<name>/report_tokens.png")
    p.add_argument("--markdown", help="default <out-root>/<name>/report.md")
    args = p.parse_args(argv)

    spec = CampaignSpec.from_yaml(args.spec)
    if args.only and set(args.only) - set(spec.conditions):
        raise SystemExit(f"--only: unknown conditions {sorted(set(args.only) - set(spec.conditions))}")
    if args.seeds and set(args.seeds) - set(spec.seeds):
        raise SystemExit(f"--seeds: {sorted(set(args.seeds) - set(spec.seeds))} not among the spec's {spec.seeds}")
    baseline = args.baseline or next(c for c in spec.conditions if not args.only or c in args.only)
    if baseline not in spec.conditions:
        raise SystemExit(f"--baseline {baseline!r} is not a condition of the spec: {list(spec.conditions)}")
    campaign, missing = load_campaign(spec, args.out_root, args.only, args.seeds)
    if baseline not in campaign:
        raise SystemExit(f"the baseline {baseline!r} has no run with a metrics log yet")
    keys = expand_keys(args.keys or DEFAULT_KEYS, campaign, required=bool(args.keys))
    if not keys:
        raise SystemExit(f"the runs logged none of the default keys {DEFAULT_KEYS}; pass --keys")
    target_key = _one_key(args.target_key or DEFAULT_TARGET_KEY, campaign, required=bool(args.target_key))
    target_frac = DEFAULT_TARGET_FRAC if args.target is None and args.target_frac is None else args.target_frac
    speedups = [tuple(pair.split(":", 1)) for pair in args.speedup]
    for pair in speedups:
        if len(pair) != 2 or not set(pair) <= set(spec.conditions):
            raise SystemExit(f"--speedup {':'.join(pair)}: give COND:REF with conditions of {list(spec.conditions)}")
    predicted = {}
    for item in args.predicted:
        pair, _, value = item.partition("=")
        key = tuple(pair.split(":", 1))
        try:
            predicted[key] = float(value)
        except ValueError:
            raise SystemExit(f"--predicted {item}: give COND:REF=RATIO, e.g. fast:plain=0.75") from None
        if key not in speedups:
            raise SystemExit(f"--predicted {item}: {pair} is not one of the --speedup pairs {args.speedup}")

    costs = {args.tokens_key: "generated tokens", args.time_key: "training time (s)"}
    if add_time_net_of_validation(campaign, args.time_key):
        costs[NET_TIME_KEY] = "training time net of validation (s)"
    if add_informative_groups(campaign):
        costs[INFORMATIVE_KEY] = "informative groups trained"
    md = build_markdown(
        campaign,
        keys,
        baseline,
        target_key,
        args.target,
        target_frac,
        costs,
        args.bootstrap,
        speedups,
        predicted,
        args.at_step,
    )
    out_dir = Path(args.out_root) / spec.name
    seeds = sorted({s for runs in campaign.values() for s in runs})
    png = plot_bands(
        campaign, keys, args.png or out_dir / "report.png", title=f"{spec.name}: mean ± std over seeds {seeds}"
    )
    cost_png = None
    if target_key is not None:
        goal = resolve_target(campaign, target_key, args.target, target_frac)
        cost_png = plot_cost_curves(
            campaign,
            target_key,
            costs,
            args.cost_png or out_dir / "report_tokens.png",
            target=goal,
            title=f"{spec.name}: mean ± std over seeds {seeds} (points: each run)",
        )
    md_path = Path(args.markdown or out_dir / "report.md")
    md_path.parent.mkdir(parents=True, exist_ok=True)
    md_path.write_text(md)
    print(md)
    if missing:
        print(f"[report] runs without a metrics log, left out: {missing}")
    print(f"[report] {png}\n[report] {md_path}")
    if cost_png is not None:
        print(f"[report] {cost_png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
