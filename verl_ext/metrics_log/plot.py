"""Metric curves from JSONL metric logs: one panel per metric, one line per run, x = training step, cumulative
generated tokens or cumulative training time.

    python -m verl_ext.metrics_log.plot RUN_A/metrics.jsonl [RUN_B/metrics.jsonl ...] \
        --keys critic/score/mean val-core/toy_copy_digit/acc/mean@1 --out curves.png [--ema 0.6] [--x tokens]

Runs are labelled by their directory name unless --labels is given. Steps where a metric is absent or null (e.g.
validation metrics between test_freq steps, or a nan) are skipped, so sparse metrics are drawn as markers joined by
lines. `--ema` overlays an exponential moving average (weight of the past) on noisy per-step metrics. Trainers that
set `trainer.plot_keys` write `<metrics log stem>.png` next to the log when the run ends (verl_ext/trainer).
Needs matplotlib (the `plot` extra).

The x axis (`--x`, X_AXES): `step` (the row's training step), `tokens` (keys.TOKENS_KEY: the tokens generated so
far, counted by fast DAPO's curriculum controller in all three modes, plain and dapo included; other recipes do not
log it) or `time` (TIME_KEY: the training loop's wall time so far, generation, checkpoints and the validations
during training included, the validation before training not). Both are cumulative, written on every training step's row
and carried across resumes by the trainers. A step's x is that key's value on the step's row, or on the last earlier
row that has it (`cumulative_at_steps`); step 0 (validation before training) is at 0. The campaign report's cost to
a target (verl_ext/campaign/summary.py) reads the same keys through the same function.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Mapping, Sequence
from pathlib import Path

from verl_ext.metrics_log.console import is_number
from verl_ext.metrics_log.jsonl import read_jsonl
from verl_ext.metrics_log.keys import TIME_KEY, TOKENS_KEY

Series = tuple[list[float], list[float]]  # (x, values); x are ints for x = step

X_AXES = {"step": None, "tokens": TOKENS_KEY, "time": TIME_KEY}  # --x choice -> the cumulative key it reads
X_LABELS = {"step": "step", "tokens": "generated tokens", "time": "training time (s)"}


def cumulative_at_steps(records: Sequence[Mapping], key: str) -> dict[int, float]:
    """{step: the cumulative `key` at that step} for every row's step: the value on the row, else on the last earlier
    row that logged it (a row may lack it, e.g. a recovered row); step 0, validation before training, is 0. Steps
    before the first logged value (other than 0) have none."""
    out: dict[int, float] = {}
    last = None
    for r in sorted(records, key=lambda r: r["step"]):
        step = int(r["step"])
        if is_number(r.get(key)):
            last = float(r[key])
        if step == 0:
            out[0] = 0.0
        elif last is not None:
            out[step] = last
    return out


def points_against(
    records: Sequence[Mapping], key: str, x_key: str | None
) -> tuple[list[int], list[float], list[float]]:
    """(steps, x values, values) of one metric's finite values, in row order: x is the step (x_key None) or the
    cumulative `x_key` at the step (`cumulative_at_steps`; a step before its first value is skipped)."""
    at = None if x_key is None else cumulative_at_steps(records, x_key)
    steps, xs, values = [], [], []
    for r in records:
        v = r.get(key)
        if not is_number(v):
            continue
        step = int(r["step"])
        if at is not None and step not in at:
            continue
        steps.append(step)
        xs.append(step if at is None else at[step])
        values.append(float(v))
    return steps, xs, values


def x_key(x: str) -> str | None:
    """The cumulative key an x-axis choice reads (None: the step)."""
    if x not in X_AXES:
        raise ValueError(f"x must be one of {list(X_AXES)}, got {x!r}")
    return X_AXES[x]


def metric_series(records: Sequence[Mapping], key: str, x: str = "step") -> Series:
    """(x values, values) of one metric: records without the key, or with a null / non-numeric value, are skipped;
    x = "step" gives the steps, "tokens" / "time" the cumulative generated tokens / training time at each of those
    steps (module docstring)."""
    _, xs, values = points_against(records, key, x_key(x))
    return xs, values


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
    x: str = "step",
) -> dict[str, dict[str, Series]]:
    """Draw `keys` of each run's log into one PNG at `out`; returns {label: {key: (x values, values)}} as plotted.

    `x`: "step", "tokens" or "time" (X_AXES); a run that never logged the x key is an error naming it.
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
    points = _read_points(dict(zip(labels, paths)), keys, x)
    data = {label: {k: (p[1], p[2]) for k, p in by_key.items()} for label, by_key in points.items()}
    cols = min(len(keys), 3)
    rows = math.ceil(len(keys) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.5 * cols, 3.2 * rows), squeeze=False)
    for ax, key in zip(axes.flat, keys):
        for label in labels:
            _draw_run(ax, label, *points[label][key], ema_weight)
        if key.startswith("val-"):
            for name, value in (references or {}).items():
                ax.axhline(value, color="gray", ls="--", lw=1, label=name)
            if references:
                ax.legend(fontsize=7)
        ax.set_title(key, fontsize=9)
        ax.set_xlabel(X_LABELS[x])
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(keys) :]:
        ax.axis("off")
    if len(labels) > 1:
        axes.flat[0].legend(fontsize=8)
    save_figure(fig, out)
    return data


def _read_points(paths: Mapping[str, str | Path], keys: Sequence[str], x: str) -> dict[str, dict[str, tuple]]:
    """{label: {key: (steps, x values, values)}} of each run's log (`paths` by label); KeyError for an x key a run
    never logged or a key no run logged."""
    xk = x_key(x)
    logs = {label: read_jsonl(p) for label, p in paths.items()}
    if xk is not None:
        without = [label for label, recs in logs.items() if not any(is_number(r.get(xk)) for r in recs)]
        if without:
            raise KeyError(f"x={x} reads {xk!r}, which runs {without} never logged")
    points = {label: {k: points_against(recs, k, xk) for k in keys} for label, recs in logs.items()}
    absent = [k for k in keys if not any(by_key[k][0] for by_key in points.values())]
    if absent:
        first = next(iter(logs.values()))
        raise KeyError(
            f"no run logged {absent}; logged keys include e.g. {sorted(set().union(*(r.keys() for r in first)))[:12]}"
        )
    return points


def _draw_run(ax, label: str, steps: list[int], xs: list[float], values: list[float], ema_weight: float | None) -> None:
    """One run's line on a panel: markers where the metric is sparse, faded under its EMA when one is drawn."""
    if not steps:
        return
    sparse = len(steps) < 0.5 * (steps[-1] - steps[0] + 1)
    line = ax.plot(
        xs, values, marker="o" if sparse else None, ms=3, lw=1, alpha=0.4 if ema_weight else 1.0, label=label
    )[0]
    if ema_weight:
        ax.plot(xs, ema(values, ema_weight), color=line.get_color(), lw=1.8)


def save_figure(fig, out: str | Path, title: str = "") -> Path:
    """Lay out, write (creating the directory) and close a matplotlib figure; the path written."""
    import matplotlib.pyplot as plt

    if title:
        fig.suptitle(title, fontsize=10)
    # the suptitle gets its own 0.35 inch at the top (tight_layout alone let it overlap the panels' titles)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.35 / fig.get_figheight()) if title else None)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("logs", nargs="+", help="metrics.jsonl files, one per run")
    p.add_argument("--keys", nargs="+", required=True)
    p.add_argument("--out", required=True, help="PNG path")
    p.add_argument("--labels", nargs="+")
    p.add_argument("--ema", type=float, default=None, help="EMA weight in [0, 1) for a smoothed overlay")
    p.add_argument(
        "--x",
        choices=list(X_AXES),
        default="step",
        help=f"x axis: the training step, cumulative generated tokens ({TOKENS_KEY}) or training time ({TIME_KEY})",
    )
    args = p.parse_args(argv)
    plot_runs(args.logs, args.keys, args.out, args.labels, args.ema, x=args.x)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
