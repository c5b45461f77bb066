"""Campaign report: per-condition mean curves with seed bands (two PNGs) and markdown tables of the final step and of
the cost to reach a target accuracy, read from the runs' JSONL metric logs.

    .venv/bin/python scripts/campaign.py report configs/campaign/advantage_ablation_cpu.yaml \
        [--out-root outputs/campaign] [--keys critic/score/mean 'val-core/*/acc/mean@*'] [--baseline grpo+none] \
        [--target-frac 0.9 | --target 0.3] [--target-key 'val-core/*/acc/mean@*'] [--bootstrap 10000] \
        [--speedup fast:plain fast:dapo] [--predicted fast:plain=0.75] [--reference released=PATH/metrics.jsonl] \
        [--at-step 0 16] [--change 0 16]

Writes <out-root>/<name>/report.png (one panel per key: the mean over seeds per condition, shaded +- one sample
std, against the training step), <out-root>/<name>/report_tokens.png (the target key against cumulative generated
tokens, against cumulative training time and, when the runs logged their validation time, against that time less the
validations (the same in every condition; derived.time_net_of_validation) and, when the runs logged their training
batches' mixed fraction, against the informative groups trained (derived.informative_groups), the cost table's
keys: per condition the seeds' mean and +- one std on a common grid of the x the seeds all reached, each run's own
points beside it, and the target as a dashed line; summary.cost_band says how) and <out-root>/<name>/report.md (also
printed), ready to paste into a results page. Keys are fnmatch patterns; the default set is drawn for whichever of
its keys the runs logged (train reward, validation accuracy, responses per training group, keep rate, SEPA lambda);
an explicit --keys pattern that matches nothing is an error. The baseline is the spec's first condition unless
--baseline is given. Runs without a metrics log yet are listed and left out. A --reference run outside the campaign
(the released model's evaluation) is a row of each key's table and a grey line on each panel.
The tables are computed in verl_ext/campaign/summary.py (statistics: stats.py) and drawn in render.py.
"""

from __future__ import annotations

import argparse
import fnmatch
from collections.abc import Mapping, Sequence
from pathlib import Path

from verl_ext.campaign.derived import INFORMATIVE_KEY, NET_TIME_KEY, informative_groups, time_net_of_validation
from verl_ext.campaign.render import (
    change_markdown,
    cost_markdown,
    final_markdown,
    plot_bands,
    plot_cost_curves,
    speedup_markdown,
)
from verl_ext.campaign.spec import CampaignSpec, RunPlan
from verl_ext.campaign.stats import MIN_BOOTSTRAP_PAIRS
from verl_ext.campaign.summary import (
    Campaign,
    Records,
    change_table,
    cost_table,
    expand_keys,
    final_table,
    final_value,
    logs_key,
    resolve_target,
    speedup_table,
)
from verl_ext.metrics_log.console import VAL_ACC_ALL_PATTERN, VAL_ACC_PATTERN
from verl_ext.metrics_log.jsonl import read_jsonl
from verl_ext.metrics_log.keys import KEEP_RATE_KEY, RESPONSES_PER_GROUP_KEY, TIME_KEY, TOKENS_KEY

DEFAULT_KEYS = [
    "critic/score/mean",  # train reward
    VAL_ACC_PATTERN,  # validation accuracy (mean@n of n samples a question), one key per validation data source
    RESPONSES_PER_GROUP_KEY,
    KEEP_RATE_KEY,
    "adv/sepa_lambda",
]
DEFAULT_TARGET_KEY = VAL_ACC_PATTERN
DEFAULT_TARGET_FRAC = 0.9  # with neither --target nor --target-frac: this fraction of the best final value

Pair = tuple[str, str]  # (condition, reference) of a --speedup


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The report's options (the `report` subcommand of cli.py)."""
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
    _add_target_arguments(p)
    _add_comparison_arguments(p)
    p.add_argument("--png", help="default <out-root>/<name>/report.png")
    p.add_argument("--cost-png", help="default <out-root>/<name>/report_tokens.png")
    p.add_argument("--markdown", help="default <out-root>/<name>/report.md")


def _add_comparison_arguments(p: argparse.ArgumentParser) -> None:
    """How conditions are compared: intervals, cost ratios, steps, within-run changes, outside references."""
    p.add_argument(
        "--bootstrap",
        type=int,
        default=0,
        help=f"bootstrap draws for the intervals of a difference, shown only where a comparison has at least "
        f"{MIN_BOOTSTRAP_PAIRS} runs a group or pairs (stats.py); the paired t-interval and sign-flip p are always "
        "shown",
    )
    p.add_argument(
        "--speedup",
        nargs="+",
        default=[],
        metavar="COND:REF",
        help="cost-to-target ratios of COND over REF, paired by seed, with a t-interval of the per-pair log ratios "
        "(e.g. fast:plain fast:dapo)",
    )
    p.add_argument(
        "--predicted",
        nargs="+",
        default=[],
        metavar="COND:REF=RATIO",
        help="a cost ratio predicted before the runs (the pass-rate probe's, e.g. fast:plain=0.75), shown beside the "
        "measured one of the same --speedup pair",
    )
    _add_where_arguments(p)
    _add_beside_arguments(p)


def _add_where_arguments(p: argparse.ArgumentParser) -> None:
    """Where else the keys are read: at steps, by minutes of training time, per step, within each run."""
    p.add_argument(
        "--at-step",
        nargs="+",
        type=int,
        default=[],
        metavar="STEP",
        help="also tabulate the keys at these steps (arms that ran different numbers of steps, compared step for "
        "step; a key not logged at a step, such as validation off the test_freq grid, has no row there)",
    )
    p.add_argument(
        "--at-minutes",
        nargs="+",
        type=float,
        default=[],
        metavar="MIN",
        help="also tabulate the keys by these minutes of training time (--time-key): each run's last value logged "
        "at or before it (a long run's accuracy at 10, 20, 30, 60 minutes)",
    )
    p.add_argument(
        "--per-step",
        nargs="+",
        default=[],
        metavar="KEY",
        help="also tabulate these keys (fnmatch patterns) as each run's mean over the steps that logged them: a count "
        "logged every step (error sites, replay pairs built), compared across arms by its rate; a running total "
        "(teacher/calls) belongs in --keys, its final value the run's total",
    )
    p.add_argument(
        "--change",
        nargs=2,
        type=int,
        metavar=("FROM", "TO"),
        help="also tabulate each key's change within each run from step FROM to step TO (before and after training: "
        "per condition the mean change with its t-interval and sign-flip p over the runs, and how many rose or fell)",
    )


def _add_beside_arguments(p: argparse.ArgumentParser) -> None:
    """What is shown beside the comparison: the pairs a resolved difference needs, runs outside the campaign."""
    p.add_argument(
        "--half-width",
        type=float,
        default=None,
        metavar="H",
        help="also the pairs (runs) a paired difference (change) would need for its 95%% t-interval's half-width to "
        "reach H, at the observed spread (e.g. 0.02: a difference resolved to two points of accuracy)",
    )
    p.add_argument(
        "--reference",
        nargs="+",
        default=[],
        metavar="LABEL=METRICS_JSONL",
        help="a run outside the campaign shown beside it (e.g. released=.../released/metrics.jsonl, the released "
        "model's val_only evaluation): a row of each key's table and a grey line on each panel, at its last value",
    )


def _add_target_arguments(p: argparse.ArgumentParser) -> None:
    """The cost-to-target table's options: the accuracy key and its target, the cumulative cost keys."""
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


def run(args: argparse.Namespace) -> int:
    """The report of the options `add_arguments` declares: tables printed and written, figures written."""
    spec = CampaignSpec.from_yaml(args.spec)
    runs, baseline = _selected(spec, args)
    speedups, predicted = _speedup_pairs(spec, args.speedup, args.predicted)
    out_dir = Path(args.out_root) / spec.name
    campaign, missing = load_campaign(runs)
    if not campaign:
        raise FileNotFoundError(f"no run of campaign {spec.name!r} under {out_dir} has a metrics log yet")
    if baseline not in campaign:
        raise SystemExit(f"the baseline {baseline!r} has no run with a metrics log yet")
    references = read_references(args.reference)
    keys, target_key = _keys(campaign, args, with_speedups=bool(speedups))
    campaign, costs = with_derived_costs(campaign, args.tokens_key, args.time_key)
    goal = None if target_key is None else _target(campaign, target_key, args)
    md = build_markdown(
        campaign,
        keys,
        baseline,
        costs,
        args.bootstrap,
        args.at_step,
        target_key,
        goal,
        speedups,
        predicted,
        references,
        args.change,
        at_minutes=[(m, args.time_key) for m in args.at_minutes],
        half_width=args.half_width,
        per_step=expand_keys(args.per_step, campaign, required=True),
    )
    seeds = sorted({seed for by_seed in campaign.values() for seed in by_seed})
    title = f"{spec.name}: mean ± std over seeds {seeds}"
    written = [plot_bands(campaign, keys, args.png or out_dir / "report.png", title, references)]
    written.append(_write(md, Path(args.markdown or out_dir / "report.md")))
    if target_key is not None:
        cost_png = args.cost_png or out_dir / "report_tokens.png"
        written.append(plot_cost_curves(campaign, target_key, costs, cost_png, goal, f"{title} (points: each run)"))
    print(md)
    if missing:
        print(f"[report] runs without a metrics log, left out: {missing}")
    print("\n".join(f"[report] {path}" for path in written if path is not None))
    return 0


def _selected(spec: CampaignSpec, args: argparse.Namespace) -> tuple[list[RunPlan], str]:
    """The runs --only and --seeds select, and the baseline: --baseline, else the first condition selected."""
    try:
        runs = spec.select(args.out_root, only=args.only, seeds=args.seeds)
    except ValueError as e:
        raise SystemExit(str(e)) from None
    baseline = args.baseline or runs[0].condition
    if baseline not in spec.conditions:
        raise SystemExit(f"--baseline {baseline!r} is not a condition of the spec: {list(spec.conditions)}")
    return runs, baseline


def _write(md: str, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(md)
    return path


def _speedup_pairs(
    spec: CampaignSpec, speedup: Sequence[str], predicted: Sequence[str]
) -> tuple[list[Pair], dict[Pair, float]]:
    """--speedup COND:REF and --predicted COND:REF=RATIO read and checked against the spec's conditions."""
    pairs = [tuple(item.split(":", 1)) for item in speedup]
    for pair in pairs:
        if len(pair) != 2 or not set(pair) <= set(spec.conditions):
            raise SystemExit(f"--speedup {':'.join(pair)}: give COND:REF with conditions of {list(spec.conditions)}")
    ratios = {}
    for item in predicted:
        pair, _, value = item.partition("=")
        key = tuple(pair.split(":", 1))
        try:
            ratios[key] = float(value)
        except ValueError:
            raise SystemExit(f"--predicted {item}: give COND:REF=RATIO, e.g. fast:plain=0.75") from None
        if key not in pairs:
            raise SystemExit(f"--predicted {item}: {pair} is not one of the --speedup pairs {list(speedup)}")
    return pairs, ratios


def read_references(items: Sequence[str]) -> dict[str, list[dict]]:
    """{label: records} of the --reference LABEL=METRICS_JSONL items, checked before any table is built."""
    references = {}
    for item in items:
        label, sep, path = item.partition("=")
        if not sep or not label or not path:
            raise SystemExit(f"--reference {item}: give LABEL=METRICS_JSONL, e.g. released=runs/released/metrics.jsonl")
        records = read_jsonl(path) if Path(path).is_file() else []
        if not records:
            raise SystemExit(f"--reference {item}: no metrics log with records at {path}")
        references[label] = records
    return references


def load_campaign(runs: Sequence[RunPlan]) -> tuple[Campaign, list[str]]:
    """{condition: {seed: records}} of the runs that have a metrics log, and the labels of those that have none."""
    campaign: dict[str, dict[int, list[dict]]] = {}
    missing = []
    for run in runs:
        records = read_jsonl(run.metrics_path)
        if records:
            campaign.setdefault(run.condition, {})[run.seed] = records
        else:
            missing.append(run.label)
    return campaign, missing


def _keys(campaign: Campaign, args: argparse.Namespace, with_speedups: bool) -> tuple[list[str], str | None]:
    """The keys to tabulate (--keys, else the default keys the runs logged) and the target key (None: no cost
    table; --speedup needs one)."""
    keys = expand_keys(args.keys or DEFAULT_KEYS, campaign, required=bool(args.keys))
    if not keys:
        raise SystemExit(f"the runs logged none of the default keys {DEFAULT_KEYS}; pass --keys")
    target_key = _one_key(args.target_key or DEFAULT_TARGET_KEY, campaign, required=bool(args.target_key))
    if with_speedups and target_key is None:
        raise ValueError("--speedup needs a target key (--target-key) that the runs logged")
    return keys, target_key


def _target(campaign: Campaign, target_key: str, args: argparse.Namespace) -> float:
    """--target, or --target-frac (default DEFAULT_TARGET_FRAC) of the best condition's mean final value."""
    frac = DEFAULT_TARGET_FRAC if args.target is None and args.target_frac is None else args.target_frac
    return resolve_target(campaign, target_key, args.target, frac)


def _one_key(pattern: str, campaign: Campaign, required: bool) -> str | None:
    keys = expand_keys([pattern], campaign, required=required)
    pooled = [k for k in keys if fnmatch.fnmatchcase(k, VAL_ACC_ALL_PATTERN)]
    if len(keys) > 1 and len(pooled) == 1:
        return pooled[0]  # validation over several data sources: the accuracy over all of them (console.py)
    if len(keys) > 1:
        raise ValueError(f"--target-key {pattern!r} matches {keys}: name one")
    return keys[0] if keys else None


def with_derived_costs(campaign: Campaign, tokens_key: str, time_key: str) -> tuple[Campaign, dict[str, str]]:
    """The cost keys of the cost tables and figures ({key: label}): tokens and time, and the derived ones the runs'
    logs allow (derived.py), with the campaign that carries them (a new one; the loaded records are left as read). A
    cost key no run logged is left out, with a line saying so (the Composer counts no generated tokens)."""
    costs = {tokens_key: "generated tokens", time_key: "training time (s)"}
    for key in [k for k in costs if not any(logs_key(recs, k) for runs in campaign.values() for recs in runs.values())]:
        print(f"[report] no run logged {key!r} ({costs.pop(key)}): no cost column or panel for it")
    if (net := time_net_of_validation(campaign, time_key)) is not None:
        campaign, costs[NET_TIME_KEY] = net, "training time net of evaluation (s)"
    if (informative := informative_groups(campaign)) is not None:
        campaign, costs[INFORMATIVE_KEY] = informative, "informative groups trained"
    return campaign, costs


def build_markdown(
    campaign: Campaign,
    keys: Sequence[str],
    baseline: str,
    costs: Mapping[str, str],
    bootstrap: int = 0,
    at_steps: Sequence[int] = (),
    target_key: str | None = None,
    goal: float | None = None,
    speedups: Sequence[Pair] = (),
    predicted: Mapping[Pair, float] | None = None,
    references: Mapping[str, Records] | None = None,
    change: Sequence[int] | None = None,
    at_minutes: Sequence[tuple[float, str]] = (),
    half_width: float | None = None,
    per_step: Sequence[str] = (),
) -> str:
    """The report's tables in order: final values (with a row per reference run that logged the key), values at the
    --at-step steps and by the --at-minutes of training time (`at_minutes`: (minutes, time key)), the --per-step keys'
    means a step, the --change within each run, and with a target the cost to reach it and the --speedup ratios
    (one table per cost key)."""
    parts = []
    for k in keys:
        ref_values = {label: v for label, recs in (references or {}).items() if (v := final_value(recs, k)) is not None}
        rows = final_table(campaign, k, baseline, bootstrap)
        parts.append(final_markdown(k, rows, baseline, references=ref_values, half_width=half_width))
    for step in at_steps:
        for k in keys:
            rows = [r for r in final_table(campaign, k, baseline, bootstrap, step=step) if r.summary.n]
            if rows:  # no table for a key nobody logged at that step (validation off the test_freq grid)
                parts.append(final_markdown(k, rows, baseline, step=step, half_width=half_width))
    for minutes, time_key in at_minutes:
        for k in keys:
            within = (time_key, 60.0 * minutes)
            rows = [r for r in final_table(campaign, k, baseline, bootstrap, within=within) if r.summary.n]
            if rows:
                when = f"by {minutes:g} min of training time"
                parts.append(final_markdown(k, rows, baseline, when=when, half_width=half_width))
    for k in per_step:
        rows = final_table(campaign, k, baseline, bootstrap, per_step=True)
        parts.append(
            final_markdown(k, rows, baseline, when="a step (each run's mean over its steps)", half_width=half_width)
        )
    if change:
        start, end = change
        for k in keys:
            rows = change_table(campaign, k, start, end, bootstrap)
            if rows:  # no table for a key nobody logged at both steps
                parts.append(change_markdown(k, start, end, rows, half_width=half_width))
    if target_key is not None:
        parts.append(cost_markdown(target_key, goal, cost_table(campaign, target_key, goal, list(costs)), costs))
        for cost_key, label in costs.items():
            if speedups:
                rows = speedup_table(campaign, target_key, goal, cost_key, speedups)
                parts.append(speedup_markdown(target_key, goal, label, rows, predicted))
    return "\n\n".join(parts) + "\n"
