"""The campaign report's rendering: markdown tables of summary.py's rows and the seed-band figures (matplotlib, the
`plot` extra, imported when a figure is drawn).

- Tables: the final values (`final_markdown`), the change within each run from one step to another
  (`change_markdown`), the cost to a target (`cost_markdown`), the speed-ups (`speedup_markdown`); numbers readable
  at a glance (`_num`), "-" for undefined. A paired difference is shown as stats.py computes it: mean (pairs),
  t-interval, exact sign-flip p, pairs above 0, half-width, pairs for 80% power; a bootstrap column appears only
  when some row has one (stats.MIN_BOOTSTRAP_PAIRS pairs or more, with --bootstrap draws).
- Figures: one panel per key against the step, per condition the seeds' mean +- one sample std, and the pass@k keys
  of one prefix in one panel against k (`plot_bands`); the target key against each cumulative cost, per condition
  summary.cost_band and every run's own points (`plot_cost_curves`). A condition has one colour in every panel.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from verl_ext.campaign.stats import PairedRatio, PairedStats, Summary, pairs_for_half_width
from verl_ext.campaign.summary import (
    Campaign,
    ChangeRow,
    CostRow,
    FinalRow,
    Records,
    SpeedupRow,
    cost_band,
    final_value,
    logs_key,
    seed_band,
)
from verl_ext.metrics_log.plot import points_against, require_matplotlib, save_figure


def _num(x: float) -> str:
    """Readable at a glance: 123456, 85.3, 0.412; "-" for undefined."""
    if not math.isfinite(x):
        return "-"
    return f"{x:.0f}" if abs(x) >= 1000 else f"{x:.1f}" if abs(x) >= 10 else f"{x:.3f}"


def _mean_std(s: Summary) -> str:
    if s.n == 0:
        return "-"
    return _num(s.mean) if s.n < 2 else f"{_num(s.mean)} ± {_num(s.std)}"


def final_markdown(
    key: str,
    rows: Sequence[FinalRow],
    baseline: str,
    level: float = 0.95,
    step: int | None = None,
    references: Mapping[str, float] | None = None,
    when: str | None = None,
    half_width: float | None = None,
) -> str:
    """One key's table: a row per condition, its statistics against the baseline, and after them a row per reference
    run that logged the key (its value, no statistics: the released model, say). `when` names where the values were
    read ("by 10 min of training time") where not at a step."""
    with_paired = any(r.paired is not None for r in rows)
    with_ci = any(r.ci is not None for r in rows)
    with_boot = any(r.paired is not None and r.paired.boot_method for r in rows)
    head = ["condition", "n", "mean", "std", f"Δ vs {baseline}", "p (Welch)"]
    if with_paired:
        head += ["paired Δ (pairs)", *_paired_head(level), "pairs above 0", f"{level:.0%} half-width"]
        head.append("pairs for 80% power at this Δ")
        head += [f"pairs for a {level:.0%} half-width of {half_width:g}"] if half_width else []
    if with_ci:
        head.append(f"{level:.0%} CI of Δ (bootstrap)")
    if with_boot:
        head.append(f"paired Δ {level:.0%} CI (BCa)")
    title = f"`{key}` {when}" if when else f"Final `{key}`" if step is None else f"`{key}` at step {step}"
    lines = [title, "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [
            r.condition + (" (baseline)" if r.condition == baseline else ""),
            str(r.summary.n),
            _num(r.summary.mean),
            _num(r.summary.std),
            "-" if r.condition == baseline or not math.isfinite(r.diff) else f"{r.diff:+.3f}",
            "-" if not math.isfinite(r.p) else f"{r.p:.3g}",
        ]
        if with_paired:
            p = r.paired
            if p is None or p.n == 0:
                cells += ["-"] * (7 if half_width else 6)
            else:
                cells += [f"{p.value:+.3f} ({p.n})", *_paired_cells(p), _above_cell(p), _half_width(p)]
                cells.append(_count_cell(p.to_resolve))
                cells += [_count_cell(pairs_for_half_width(p.sd, half_width, level))] if half_width else []
        if with_ci:
            cells.append(_interval(r.ci))
        if with_boot:
            cells.append(_boot_cell(r.paired))
        lines.append("| " + " | ".join(cells) + " |")
    for label, value in (references or {}).items():
        lines.append("| " + " | ".join([f"{label} (reference)", "1", _num(value)] + ["-"] * (len(head) - 3)) + " |")
    return "\n".join(lines)


def change_markdown(
    key: str, start: int, end: int, rows: Sequence[ChangeRow], level: float = 0.95, half_width: float | None = None
) -> str:
    """One key's change within each run from step ``start`` to step ``end``: a row per condition, the runs' changes
    paired within each run (mean, t-interval, sign-flip p, how many rose, fell or stayed)."""
    with_boot = any(r.change.boot_method for r in rows)
    head = ["condition", f"step {start}", f"step {end}", "change (runs)", *_paired_head(level), "rose / fell / same"]
    head += [f"{level:.0%} half-width", "runs for 80% power at this change"]
    head += [f"runs for a {level:.0%} half-width of {half_width:g}"] if half_width else []
    head += [f"change {level:.0%} CI (BCa)"] if with_boot else []
    lines = [f"`{key}` from step {start} to step {end}, within each run", "", "| " + " | ".join(head) + " |"]
    lines.append("|" + "---|" * len(head))
    for r in rows:
        c = r.change
        same = c.n - r.rose - r.fell
        cells = [r.condition, _mean_std(r.before), _mean_std(r.after), f"{c.value:+.3f} ({c.n})", *_paired_cells(c)]
        cells += [f"{r.rose} / {r.fell} / {same}", _half_width(c), _count_cell(c.to_resolve)]
        cells += [_count_cell(pairs_for_half_width(c.sd, half_width, level))] if half_width else []
        lines.append("| " + " | ".join(cells + ([_boot_cell(c)] if with_boot else [])) + " |")
    return "\n".join(lines)


def _count_cell(n: float | None) -> str:
    if n is None or math.isnan(n):
        return "-"
    return "∞ (Δ = 0)" if math.isinf(n) else f"{n:,.0f}"


def _paired_head(level: float) -> list[str]:
    return [f"{level:.0%} t-interval", "sign-flip p (exact)"]


def _paired_cells(p: PairedStats) -> list[str]:
    """The t-interval and the sign-flip p of paired differences, in `_paired_head`'s order."""
    return [_interval((p.low, p.high)), _p(p.p)]


def _half_width(p: PairedStats) -> str:
    return "-" if not math.isfinite(p.half_width) else f"{p.half_width:.3f}"


def _above_cell(p: PairedStats) -> str:
    tied = p.n - p.above - p.below
    return f"{p.above} of {p.n}" + (f" ({tied} at 0)" if tied else "")


def _boot_cell(p: PairedStats | PairedRatio | None, signed: bool = True) -> str:
    if p is None or not p.boot_method:
        return "-"
    method = "" if p.boot_method == "BCa" else f" ({p.boot_method})"
    return _interval((p.boot_low, p.boot_high), signed) + method


def _interval(ci: tuple[float, float] | None, signed: bool = True) -> str:
    if ci is None or not math.isfinite(ci[0]) or not math.isfinite(ci[1]):
        return "-"
    return f"[{ci[0]:+.3f}, {ci[1]:+.3f}]" if signed else f"[{ci[0]:.3f}, {ci[1]:.3f}]"


def _p(p: float) -> str:
    return "-" if not math.isfinite(p) else f"{p:.3g}"


def cost_markdown(key: str, target: float, rows: Sequence[CostRow], cost_labels: Mapping[str, str]) -> str:
    head = ["condition", "reached", "step", *cost_labels.values()]
    lines = [
        f"Cost to reach `{key}` >= {target:.4g} (mean ± std over the runs that reached it)",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
    ]
    for r in rows:
        cells = [r.condition, f"{r.reached}/{r.n}", _mean_std(r.step), *(_mean_std(r.costs[c]) for c in cost_labels)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def speedup_markdown(
    key: str,
    target: float,
    cost_label: str,
    rows: Sequence[SpeedupRow],
    predicted: Mapping[tuple[str, str], float] | None = None,
) -> str:
    """The ratio table; `predicted` ({(condition, reference): ratio}, e.g. the pass-rate probe's cost model) adds
    a column of the ratio predicted before the runs. Per pair of conditions: the ratio of mean costs, and its
    uncertainty on the log scale (stats.paired_ratio): the geometric mean of the per-pair ratios with the 95%
    t-interval of their logs, the exact sign-flip p of the logs, the pairs where the condition was cheaper; a BCa
    bootstrap interval of the ratio of means only where some row has stats.MIN_BOOTSTRAP_PAIRS pairs."""
    with_boot = any(r.ratio.boot_method for r in rows)
    head = [
        "condition / reference",
        "ratio of means",
        "geometric mean of pair ratios [95% t-interval]",
        "sign-flip p (exact)",
        "pairs cheaper",
        "pairs both reached",
        "only condition",
        "only reference",
        "neither",
        "censored runs at their total: bound, geometric mean [95% t-interval]",
    ]
    head += (["ratio of means 95% CI (BCa)"] if with_boot else []) + (["predicted"] if predicted else [])
    lines = [
        f"Cost ratio to reach `{key}` >= {target:.4g} ({cost_label}; paired by seed; < 1: the condition is cheaper; "
        "interval and p of the per-pair log ratios)",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
    ]
    for r in rows:
        bound = "-"
        if r.censored_ratio is not None:
            c = r.censored_ratio
            bound = f"{r.censored_bound} {_num(c.value)}, {_geo(c)} ({c.n} pairs)"
        p = r.ratio.log
        cells = [
            f"{r.condition} / {r.reference}",
            _num(r.ratio.value),
            _geo(r.ratio),
            "-" if p is None else _p(p.p),
            "-" if p is None else f"{r.ratio.cheaper} of {p.n}",
            f"{r.ratio.n}/{r.pairs}",
            str(r.only_condition),
            str(r.only_reference),
            str(r.neither),
            bound,
        ]
        if with_boot:
            cells.append(_boot_cell(r.ratio, signed=False))
        if predicted:
            value = predicted.get((r.condition, r.reference))
            cells.append(_num(value) if value is not None else "-")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _geo(r: PairedRatio) -> str:
    """The geometric mean of the per-pair ratios and its t-interval, or "-"."""
    if not math.isfinite(r.geo_mean):
        return "-"
    interval = _interval((r.low, r.high), signed=False)
    return _num(r.geo_mean) + ("" if interval == "-" else f" {interval}")


_PASS_AT_K = re.compile(r"^(?P<prefix>.+)/pass@(?P<k>\d+)$")


def condition_colors(campaign: Campaign) -> dict[str, str]:
    """One colour per condition, the same in every panel and figure: matplotlib's cycle in the campaign's order."""
    return {cond: f"C{i % 10}" for i, cond in enumerate(campaign)}


def band_panels(keys: Sequence[str]) -> list[tuple[str, list[tuple[int, str]]]]:
    """The panels of `plot_bands`, in the keys' order: (key, []) for a key drawn against the step, and
    (prefix, [(k, key), ...] sorted by k) for the pass@k keys of one prefix (`val-pass/all/pass@1`, `.../pass@16`),
    gathered into one panel against k: they are measured once a run, at its end."""
    panels: list[tuple[str, list[tuple[int, str]]]] = []
    by_prefix: dict[str, list[tuple[int, str]]] = {}
    for key in keys:
        m = _PASS_AT_K.match(key)
        if m is None:
            panels.append((key, []))
        elif m["prefix"] in by_prefix:
            by_prefix[m["prefix"]].append((int(m["k"]), key))
        else:
            by_prefix[m["prefix"]] = [(int(m["k"]), key)]
            panels.append((m["prefix"], by_prefix[m["prefix"]]))
    return [(name, sorted(ks)) for name, ks in panels]


def plot_bands(
    campaign: Campaign,
    keys: Sequence[str],
    out: str | Path,
    title: str = "",
    references: Mapping[str, Records] | None = None,
) -> Path:
    """One panel per key against the step: per condition the seeds' mean, shaded +- one sample std
    (summary.seed_band); a sparse key (validation every test_freq steps) with a marker at each point. The pass@k keys
    of one prefix share a panel against k (`band_panels`): per condition the mean +- std over the seeds of each
    run's last value. A condition has one colour in every panel (`condition_colors`). A reference run (the released
    model's evaluation, say) is a grey dashed line: its last value of the key, or its pass@k against k."""
    plt = _pyplot()
    if not keys:
        raise ValueError("no metric keys to plot")
    panels, colors = band_panels(keys), condition_colors(campaign)
    cols = min(len(panels), 3)
    rows = math.ceil(len(panels) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.8 * cols, 3.4 * rows), squeeze=False)
    for ax, (name, ks) in zip(axes.flat, panels):
        for cond, runs in campaign.items():
            label = f"{cond} (n={len(runs)})"
            if ks:
                _pass_at_k(ax, runs, ks, colors[cond], label)
                continue
            b = seed_band(runs, name)
            if not b.steps:
                continue
            mean, std = np.asarray(b.mean), np.asarray(b.std)
            sparse = len(b.steps) < max(2, 0.5 * (b.steps[-1] - b.steps[0] + 1))
            ax.plot(b.steps, mean, marker="o" if sparse else None, ms=3, lw=1.5, color=colors[cond], label=label)
            ax.fill_between(b.steps, mean - std, mean + std, color=colors[cond], alpha=0.2, lw=0)
        for (label, recs), ls in zip((references or {}).items(), _REFERENCE_STYLES):
            _reference(ax, recs, name, ks, f"{label} (reference)", ls)
        ax.set_title(f"{name}: pass@k at the last step" if ks else name, fontsize=9)
        ax.set_xlabel("k" if ks else "step")
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(panels) :]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=7)
    return save_figure(fig, out, title)


_REFERENCE_STYLES = ("--", ":", "-.", (0, (5, 1)))  # up to four reference runs, each its own grey line


def _reference(ax, records: Records, key: str, ks: Sequence[tuple[int, str]], label: str, ls) -> None:
    """A reference run on a panel: its last value of `key` as a horizontal line, or on a pass@k panel its pass@k
    against k; nothing when it did not log the key."""
    if ks:
        points = [(k, v) for k, v in ((k, final_value(records, key_k)) for k, key_k in ks) if v is not None]
        if points:
            ax.plot(*zip(*points), color="0.4", ls=ls, marker="x", ms=4, lw=1.2, label=label)
    elif (value := final_value(records, key)) is not None:
        ax.axhline(value, color="0.4", ls=ls, lw=1.2, label=label)


def _pass_at_k(ax, runs: Mapping[int, Records], ks: Sequence[tuple[int, str]], color: str, label: str) -> None:
    """One condition on a pass@k panel: at each k the mean +- sample std over the runs of their last value."""
    xs, means, stds = [], [], []
    for k, key in ks:
        values = [v for v in (final_value(recs, key) for recs in runs.values()) if v is not None]
        if values:
            xs.append(k)
            means.append(float(np.mean(values)))
            stds.append(float(np.std(values, ddof=1)) if len(values) > 1 else 0.0)
    if xs:
        ax.errorbar(xs, means, yerr=stds, marker="o", ms=3, lw=1.5, capsize=2, color=color, label=label)
        ax.set_xscale("log", base=2)
        ax.set_xticks(xs, [str(k) for k in xs])


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
    logged = [c for c in cost_keys if any(logs_key(recs, c) for runs in campaign.values() for recs in runs.values())]
    if not logged:
        return None
    plt = _pyplot()
    fig, axes = plt.subplots(1, len(logged), figsize=(5.2 * len(logged), 3.6), squeeze=False)
    colors = condition_colors(campaign)
    for ax, cost_key in zip(axes.flat, logged):
        for cond, runs in campaign.items():
            b = cost_band(runs, key, cost_key)
            color, label = colors[cond], f"{cond} (n={len(runs)})"
            if b.x:
                mean, std = np.asarray(b.mean), np.asarray(b.std)
                ax.plot(b.x, mean, lw=1.5, color=color, label=label)
                ax.fill_between(b.x, mean - std, mean + std, color=color, alpha=0.2, lw=0)
            label = None if b.x else label  # no band: the condition's first run's points carry its label
            for recs in runs.values():
                _, xs, values = points_against(recs, key, cost_key) if logs_key(recs, cost_key) else ([], [], [])
                if xs:
                    ax.plot(xs, values, ls="none", marker="o", ms=2.5, alpha=0.5, color=color, label=label)
                    label = None
        if target is not None:
            ax.axhline(target, color="gray", ls="--", lw=1, label=f"target {target:.3g}")
        ax.set_title(key, fontsize=9)
        ax.set_xlabel(f"{cost_keys[cost_key]} ({cost_key})", fontsize=8)
        ax.grid(alpha=0.3)
    axes.flat[0].legend(fontsize=7)
    return save_figure(fig, out, title)


def _pyplot():
    """matplotlib's pyplot, drawing to files only (no display on cluster nodes)."""
    require_matplotlib()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt
