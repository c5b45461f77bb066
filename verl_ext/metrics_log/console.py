"""The compact console: one short line per training step and a closing summary, for `trainer.logger: [compact]`.

verl's `console` logger prints every metric of every step (~150 keys on one line); a person watching a run wants
the few that say whether it learns. `compact` is handled by the project's trainer (verl's Tracking never sees it);
the full metrics still go to the JSONL log (`trainer.jsonl_metrics_path`) and to any other logger listed.
Pure formatting here: the run log (run_log.py) prints the step lines; the closing summary is printed by the driver
process (verl_ext/trainer/launch.py).
"""

from __future__ import annotations

import fnmatch
import math
from collections.abc import Mapping, Sequence

from verl_ext.metrics_log.keys import (
    KEEP_RATE_KEY,
    RESPONSES_PER_GROUP_KEY,
    TIME_KEY,
    TOOL_CALL_FRAC_KEY,
    TOOL_RESULT_IN_ANSWER_KEY,
)

COMPACT_BACKEND = "compact"
# verl logs the mean accuracy of n validation samples per question as `mean@n` (n = val_kwargs.n: greedy runs log
# mean@1, sampled validation e.g. mean@4).
VAL_ACC_PATTERN = "val-core/*/acc/mean@*"
# Validation over every data source together, logged when the validation set has several (verl logs one key per
# data source only; verl_ext/trainer/ppo_trainer.py adds this one).
ALL_SOURCES = "all"
VAL_ACC_ALL_PATTERN = f"val-core/{ALL_SOURCES}/acc/mean@*"
# (label, metric key, format) of the per-step line, in order; a metric the step did not log is left out.
COLUMNS = (
    ("reward", "critic/score/mean", "{:.3f}"),
    ("keep", KEEP_RATE_KEY, "{:.2f}"),
    ("resp/group", RESPONSES_PER_GROUP_KEY, "{:.1f}"),
    ("tool call", TOOL_CALL_FRAC_KEY, "{:.2f}"),  # agent runs: the share of episodes that called a tool
    ("result used", TOOL_RESULT_IN_ANSWER_KEY, "{:.2f}"),  # ... and whose answer writes the tool's result
)


def is_number(value) -> bool:
    """Whether a value read from a metric log is a finite number (a bool, a null/nan or a string is not)."""
    return not isinstance(value, bool) and isinstance(value, int | float) and math.isfinite(value)


def val_accuracy(metrics: Mapping, prefix: str = "val") -> float | None:
    """The step's validation accuracy, if it validated: over all data sources (`VAL_ACC_ALL_PATTERN`) when logged,
    else the first `val-core/*/acc/mean@n` key in sorted order (a validation set of one data source). `prefix`
    "heldout" reads the large held-out evaluation's keys instead (`heldout-core/...`, verl_ext/trainer/heldout.py)."""
    patterns = (VAL_ACC_ALL_PATTERN, VAL_ACC_PATTERN)
    for pattern in (p.replace("val-", f"{prefix}-", 1) for p in patterns):
        for key in sorted(metrics):
            if fnmatch.fnmatchcase(key, pattern) and is_number(metrics[key]):
                return float(metrics[key])
    return None


def compact_line(
    step: int, total_steps: int, metrics: Mapping, seconds: float | None, budget_min: float | None = None
) -> str:
    """One step's console line; with a training-time budget (`budget_min`, trainer.max_train_minutes) the training
    time so far against it (`12.5/60 min`), the measure the run ends by."""
    parts = [f"step {step:>{len(str(total_steps))}}/{total_steps}"]
    if budget_min is not None and is_number(metrics.get(TIME_KEY)):
        parts.append(f"{metrics[TIME_KEY] / 60:.1f}/{budget_min:g} min")
    for label, key, fmt in COLUMNS:
        if is_number(metrics.get(key)):
            parts.append(f"{label} {fmt.format(metrics[key])}")
    val = val_accuracy(metrics)
    if val is not None:
        parts.append(f"val acc {val:.3f}")
    held = val_accuracy(metrics, prefix="heldout")  # the large held-out evaluation (first and last step)
    if held is not None:
        parts.append(f"held-out acc {held:.3f}")
    if seconds is not None:
        parts.append(f"{seconds:.1f} s")
    return " | ".join(parts)


def run_summary(
    first_val: float | None,
    last_val: float | None,
    baseline: Mapping | None,
    log_path: str | None,
    plot_path: str | None,
    heldout: Sequence[tuple[float, int]] = (),
) -> str:
    """The closing lines: validation accuracy before and after (and the stated baseline), the large held-out
    evaluation's first and last (`heldout`: (accuracy, questions) of each, in order; verl_ext/trainer/heldout.py),
    where the log and plot are."""
    lines = []
    if first_val is not None and last_val is not None:
        line = f"validation accuracy {first_val:.3f} -> {last_val:.3f}"
        if baseline:
            line += f" ({baseline['label']}: {float(baseline['value']):.3f})"
        lines.append(line)
    if heldout:
        first, last = heldout[0][0], heldout[-1][0]
        accs = f"{first:.3f} -> {last:.3f}" if len(heldout) > 1 else f"{last:.3f}"
        lines.append(f"held-out accuracy {accs} ({heldout[-1][1]:,} questions)")
    if log_path:
        lines.append(f"metrics log: {log_path}")
    if plot_path:
        lines.append(f"curves: {plot_path}")
    return "\n".join(f"[verl_ext] {line}" for line in lines)


def check_baseline(baseline) -> None:
    """`trainer.val_baseline`: null, or {label: str, value: number} (drawn on the validation panels, printed at the
    end)."""
    if baseline is None:
        return
    if not isinstance(baseline, Mapping) or set(baseline) != {"label", "value"} or not is_number(baseline["value"]):
        raise ValueError(f"trainer.val_baseline must be null or {{label: <text>, value: <number>}}, got {baseline!r}")
