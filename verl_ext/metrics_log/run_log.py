"""The run log: what a training run records of itself beyond verl's checkpoints, in one object the trainer calls at
fixed points of its loop (verl_ext/trainer/ppo_trainer.py).

- the tracker: verl's `Tracking` with the loggers of `trainer.logger` (`compact` excepted: it is printed here);
- the JSONL metrics log (`trainer.jsonl_metrics_path`, jsonl.py): one row per step, step 0 for the validation before
  training, cut back to the checkpoint's step on resume;
- the console: with `trainer.logger: [compact]` one short line per step (console.py) above the progress bar, else
  verl's `Initial validation metrics` print;
- no row lost to a crash between a step's checkpoint and its row: while the checkpoint is written it holds the row so
  far (`holding_row`, read by the trainer into the checkpoint as `row_so_far`), and a run resumed from that checkpoint
  writes the row if the log lacks it (`recover_row`);
- the validation accuracy of the run's first and latest evaluation, for the closing summary;
- with `trainer.plot_keys`, the log's curves as `<log stem>.png` next to it when the run ends (plot.py).

`close` returns the closing lines (the summary, or where the curves are; none for a failed run, whose closing lines
the trainer writes: metrics_log/failure.py) instead of printing them: the trainer runs inside a Ray actor, and Ray's
log forwarding can drop an actor's last lines at shutdown, so they travel back to the driver process as the task's
result and are printed there (verl_ext/trainer/launch.py).
"""

from __future__ import annotations

import contextlib
import fnmatch
from pathlib import Path
from pprint import pprint

from verl_ext.metrics_log.console import COMPACT_BACKEND, compact_line, run_summary, val_accuracy
from verl_ext.metrics_log.jsonl import JsonlMetricsWriter, read_jsonl
from verl_ext.metrics_log.plot import plot_runs


class RunLog:
    """One training run's logs. Built when the trainer is built, from settings checked before any worker starts;
    `open_tracker` and `open` start the run, `close` ends it."""

    def __init__(self, extras, loggers, experiment_name: str):
        """`extras`: the project's `trainer.*` settings (verl_ext/config/trainer_settings.py, `TrainerExtras`: the
        JSONL log's path, the plot's keys and the baseline, checked when read); `loggers`: `trainer.logger`."""
        self.jsonl_path: str | None = extras.jsonl_metrics_path
        self.plot_keys = list(extras.plot_keys)
        self.loggers = [loggers] if isinstance(loggers, str) else list(loggers or [])
        # `compact` (console.py): one short line per step, printed here, not by verl's Tracking
        self.compact = COMPACT_BACKEND in self.loggers
        self.val_baseline = extras.val_baseline
        # the training-time budget in minutes (trainer.max_train_minutes): the console shows the time against it and
        # the progress bar counts minutes, the measure the run ends by; None: steps
        self.budget_min: float | None = extras.max_train_minutes
        self.experiment_name = experiment_name  # the curves' label
        self.tracker = None
        self.writer: JsonlMetricsWriter | None = None
        self.total_steps = 0
        self._progress = None
        self.row_so_far: dict | None = None  # the current step's row while its checkpoint is written
        self.resumed_row: dict | None = None  # that row as read back from the checkpoint a run resumes from
        self._val_first: float | None = None  # validation accuracy of the run's first and latest evaluation
        self._val_last: float | None = None
        self._heldout: list[tuple[float, int]] = []  # the large held-out evaluation's (accuracy, questions), in order

    # ------------------------------------------------------------------ the run's start
    def open_tracker(self, config) -> None:
        """verl's tracker for the other loggers of `trainer.logger`, given the run's whole config."""
        from omegaconf import OmegaConf
        from verl.utils.tracking import Tracking

        self.tracker = Tracking(
            project_name=config.trainer.project_name,
            experiment_name=config.trainer.experiment_name,
            default_backend=[b for b in self.loggers if b != COMPACT_BACKEND],
            config=OmegaConf.to_container(config, resolve=True),
        )

    def open(self, step: int, total_steps: int) -> None:
        """The JSONL log, cut back to `step` (the checkpoint's; 0 for a fresh run). `total_steps` sizes the console's
        step column."""
        self.total_steps = total_steps
        if self.jsonl_path:
            self.writer = JsonlMetricsWriter(self.jsonl_path, resume_from_step=step)

    def start_progress(self, done_steps: int, done_s: float = 0.0) -> None:
        """The progress bar of the training loop, from `done_steps` of `total_steps`, or with a training-time budget
        from `done_s` seconds of its minutes."""
        from tqdm import tqdm

        if self.budget_min is not None:
            done = min(round(done_s / 60, 1), self.budget_min)
            self._progress = tqdm(total=self.budget_min, initial=done, unit="min", desc="Training Progress")
        else:
            self._progress = tqdm(total=self.total_steps, initial=done_steps, desc="Training Progress")

    # ------------------------------------------------------------------ rows
    def first_validation(self, step: int, metrics: dict) -> None:
        """The validation before training (or val_only's): printed, tracked, and written as the row of `step` unless
        the log has that step's row already (a resumed checkpoint's step)."""
        self._note_val(metrics)
        if self.compact:
            print(compact_line(step, self.total_steps, metrics, None))
        else:
            pprint(f"Initial validation metrics: {metrics}")
        self.tracker.log(data=metrics, step=step)
        # so the curves start where training starts
        if self.writer is not None and self.writer.last_step < step:
            self.writer.log(step, metrics)

    def step(self, step: int, metrics: dict, seconds: float) -> None:
        """A training step's row: to the tracker, the compact console (`seconds` since the previous row), the JSONL
        log and the progress bar."""
        self.tracker.log(data=metrics, step=step)
        self._note_val(metrics)
        if self.compact:
            self._progress.write(compact_line(step, self.total_steps, metrics, seconds, self.budget_min))
        if self.writer is not None:
            self.writer.log(step, metrics)
        self._progress.update(1 if self.budget_min is None else round(seconds / 60, 2))

    def _note_val(self, metrics: dict) -> None:
        val = val_accuracy(metrics)
        if val is not None:
            self._val_first = val if self._val_first is None else self._val_first
            self._val_last = val
        held = val_accuracy(metrics, prefix="heldout")
        if held is not None:
            self._heldout.append((held, int(metrics.get("heldout/questions", 0))))

    # ------------------------------------------------------------------ a crash between a checkpoint and its row
    @contextlib.contextmanager
    def holding_row(self, step: int, validates: bool, metrics: dict):
        """While a checkpoint is written inside this block, `row_so_far` is the step's row so far (`metrics`) and
        whether the step validates; the trainer saves it in the checkpoint."""
        self.row_so_far = {"step": step, "validates": validates, "metrics": metrics}
        try:
            yield
        finally:
            self.row_so_far = None

    def recover_row(self, step: int, validate) -> None:
        """On resume from the checkpoint of `step`: if the crash came after the checkpoint's save but before its row
        was written, write that row now from `resumed_row`, validating the checkpoint's weights first (`validate()`,
        returning the metrics) if that step was to validate. The recovered row says so (`training/row_recovered`) and
        lacks what the lost run measured after the save (weight sync, validation and step times, throughput). Without
        a JSONL log there is nothing to check against, so nothing is written."""
        row, self.resumed_row = self.resumed_row, None
        if row is None or self.writer is None or row["step"] != step:
            return
        if self.writer.last_step >= row["step"]:
            return  # the row was written before the crash
        metrics = dict(row["metrics"])
        if row["validates"]:
            metrics.update(validate())
        metrics["training/row_recovered"] = 1
        print(f"[verl_ext] step {row['step']}: metrics row lost after its checkpoint; written from the checkpoint")
        self.tracker.log(data=metrics, step=row["step"])
        self.writer.log(row["step"], metrics)

    # ------------------------------------------------------------------ the run's end
    def close(self, plot: bool, failed: bool = False) -> list[str]:
        """Close the progress bar and the log, draw the curves if `plot` (and `trainer.plot_keys`), and return the
        closing lines: with `compact` the summary (validation accuracy first -> last against the baseline, the log,
        the curves), else the curves' path if drawn. A `failed` run has no summary (its accuracy "first -> last" would
        read as a finished run's) and no curves: its closing lines are the trainer's failure lines (failure.py)."""
        if self._progress is not None:
            self._progress.close()
            self._progress = None
        if self.writer is not None:
            self.writer.close()
        if failed:
            return []
        plot_path = self.plot() if plot and self.plot_keys else None
        if self.compact:
            summary = run_summary(
                self._val_first, self._val_last, self.val_baseline, self.jsonl_path, plot_path, heldout=self._heldout
            )
            return summary.splitlines()
        return [f"[verl_ext] metric curves: {plot_path}"] if plot_path else []

    def plot(self) -> Path:
        """`trainer.plot_keys` of this run's JSONL log, as `<log stem>.png` next to it."""
        log = Path(self.jsonl_path)
        out = log.with_suffix(".png")
        present = expand_plot_keys(self.plot_keys, set().union(*(r.keys() for r in read_jsonl(log))))
        baseline = self.val_baseline
        references = {str(baseline["label"]): float(baseline["value"])} if baseline else None
        plot_runs([log], present or self.plot_keys, out, labels=[self.experiment_name], references=references)
        return out


def expand_plot_keys(plot_keys, logged) -> list[str]:
    """The logged keys each of `plot_keys` names, in order; a key may be a pattern (`val-core/all/acc/mean@*`:
    greedy validation logs mean@1, validation sampled n times a question mean@n)."""
    return list(dict.fromkeys(k for p in plot_keys for k in sorted(logged) if fnmatch.fnmatchcase(k, p)))
