"""Metric curves from JSONL metric logs: one panel per metric, one line per run, x = training step.

    python -m verl_ext.metrics_log.plot RUN_A/metrics.jsonl [RUN_B/metrics.jsonl ...] \
        --keys critic/score/mean val-core/toy_copy_digit/acc/mean@1 --out curves.png [--ema 0.6]

Runs are labelled by their directory name unless --labels is given. Steps where a metric is absent or null (e.g.
validation metrics between test_freq steps, or a nan) are skipped, so sparse metrics are drawn as markers joined by
lines. `--ema` overlays an exponential moving average (weight of the past) on noisy per-step metrics. Trainers that
set `trainer.plot_keys` write `<metrics log stem>.png` next to the log when the run ends (verl_ext/trainer).
Needs matplotlib (the `plot` extra).
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Mapping, Sequence
from pathlib import Path

from verl_ext.metrics_log.jsonl import read_jsonl

Series = tuple[list[int], list[float]]


def metric_series(records: Sequence[dict], key: str) -> Series:
    """(steps, values) of one metric: records without the key, or with a null / non-numeric value, are skipped."""
    steps, values = [], []
    for r in records:
        v = r.get(key)
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
            continue
        steps.append(int(r["step"]))
        values.append(float(v))
    return steps, values


def ema(values: Sequence[float], weight: float) -> list[float]:
    """Exponential moving average, out[i] = weight * out[i-1] + (1 - weight) * values[i]; out[0] = values[0]."""
    if not 0.0 <= weight < 1.0:
        raise ValueError(f"ema weight must be in [0, 1), got {weight}")
    out: list[float] = []
    for v in values:
        out.append(v if not out else weight * out[-1] + (1.0 - weight) * v)
    return out


def check_plot_settings(plot_keys, jsonl_path) -> None:
    """The trainers' `trainer.plot_keys` / `trainer.jsonl_metrics_path` pair, checked before any expensive work."""
    if not plot_keys:
        return
    if isinstance(plot_keys, str) or not all(isinstance(k, str) and k for k in plot_keys):
        raise ValueError(f"trainer.plot_keys must be a list of metric names, got {plot_keys!r}")
    if not jsonl_path:
        raise ValueError("trainer.plot_keys needs trainer.jsonl_metrics_path (the plot is drawn from that log)")
    require_matplotlib()


def require_matplotlib() -> None:
    try:
        import matplotlib  # noqa: F401
    except ImportError as e:
        raise ImportError("plotting metrics needs matplotlib: pip install 'verl-ext[plot]'") from e


def plot_runs(
    paths: Sequence[str | Path],
    keys: Sequence[str],
    out: str | Path,
    labels: Sequence[str] | None = None,
    ema_weight: float | None = None,
    references: Mapping[str, float] | None = None,
) -> dict[str, dict[str, Series]]:
    """Draw `keys` of each run's log into one PNG at `out`; returns {label: {key: (steps, values)}} as plotted.

    `references` ({label: value}, e.g. a constant-answer baseline) are drawn as dashed horizontal lines on the
    validation panels (keys starting with `val-`). A key that no run has is an error (a typo would otherwise give an
    empty panel)."""
    require_matplotlib()
    import matplotlib

    matplotlib.use("Agg")  # files only: no display on cluster nodes
    import matplotlib.pyplot as plt

    if not keys:
        raise ValueError("no metric keys to plot")
    labels = list(labels) if labels else [Path(p).parent.name or str(p) for p in paths]
    if len(labels) != len(paths):
        raise ValueError(f"{len(labels)} labels for {len(paths)} runs")
    data = {label: {k: metric_series(read_jsonl(p), k) for k in keys} for label, p in zip(labels, paths)}
    absent = [k for k in keys if not any(data[label][k][0] for label in labels)]
    if absent:
        raise KeyError(
            f"no run logged {absent}; logged keys include e.g. "
            f"{sorted(set().union(*(r.keys() for r in read_jsonl(paths[0]))))[:12]}"
        )
    cols = min(len(keys), 3)
    rows = math.ceil(len(keys) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.5 * cols, 3.2 * rows), squeeze=False)
    for ax, key in zip(axes.flat, keys):
        for label in labels:
            steps, values = data[label][key]
            if not steps:
                continue
            sparse = len(steps) < 0.5 * (steps[-1] - steps[0] + 1)
            line = ax.plot(
                steps, values, marker="o" if sparse else None, ms=3, lw=1, alpha=0.4 if ema_weight else 1.0, label=label
            )[0]
            if ema_weight:
                ax.plot(steps, ema(values, ema_weight), color=line.get_color(), lw=1.8)
        if key.startswith("val-"):
            for name, value in (references or {}).items():
                ax.axhline(value, color="gray", ls="--", lw=1, label=name)
            if references:
                ax.legend(fontsize=7)
        ax.set_title(key, fontsize=9)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(keys) :]:
        ax.axis("off")
    if len(labels) > 1:
        axes.flat[0].legend(fontsize=8)
    fig.tight_layout()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return data


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("logs", nargs="+", help="metrics.jsonl files, one per run")
    p.add_argument("--keys", nargs="+", required=True)
    p.add_argument("--out", required=True, help="PNG path")
    p.add_argument("--labels", nargs="+")
    p.add_argument("--ema", type=float, default=None, help="EMA weight in [0, 1) for a smoothed overlay")
    args = p.parse_args(argv)
    plot_runs(args.logs, args.keys, args.out, args.labels, args.ema)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
