"""The training clock: the run's training wall time (`time/train_total_s`), carried across resumes by the checkpoint.

It measures the training loop (generation, checkpoint saves and the validations during training included; the
validation before training not): `total_s` is the checkpoint's total when the loop starts plus this process's time in
the loop since then. The value is a reading, taken when the trainer asks for one (`read`, `lap`), so that the step's
row, the row held in a checkpoint and the checkpoint's own total agree to the digit.

A training-time budget (trainer.max_train_minutes) ends the run at the step expected to reach it (`ends_budget`): a
step that evaluates (a validation or held-out evaluation every N steps) is expected to take the mean step net of
evaluation plus the mean evaluation, so the evaluating step that passes the budget is the last one, not the step after.
"""

from __future__ import annotations

import time


class TrainClock:
    def __init__(self, total_s: float = 0.0):
        self.total_s = float(total_s)  # the last reading (before `start`: the total so far, e.g. a checkpoint's)
        self._base = self.total_s  # the total when the loop started
        self._started: float | None = None  # time.monotonic() when the loop started; None before
        self._lap_s = self.total_s  # the reading at the previous lap
        self._steps_s, self._steps = 0.0, 0  # this process's steps: their seconds net of evaluation, their count
        self._evals_s, self._evals = 0.0, 0  # this process's evaluations: their seconds, their count

    def start(self) -> None:
        """The training loop starts: count on from the current total (a resumed checkpoint's, or 0)."""
        self._base = self._lap_s = self.total_s
        self._started = time.monotonic()

    def read(self) -> float:
        """The training time so far (before `start`: the total it would start from)."""
        if self._started is not None:
            self.total_s = self._base + time.monotonic() - self._started
        return self.total_s

    def lap(self, evaluation_s: float | None = None) -> float:
        """Read, and return the seconds since the previous lap (or since `start`): one row's share of the time, of which
        `evaluation_s` went to its evaluations (validation, held-out evaluation, pass@k; None: it had none)."""
        total = self.read()
        seconds, self._lap_s = total - self._lap_s, total
        self._steps_s += seconds - (evaluation_s or 0.0)
        self._steps += 1
        if evaluation_s is not None:
            self.note_evaluation(evaluation_s)
        return seconds

    def note_evaluation(self, seconds: float) -> None:
        """An evaluation's seconds (also one outside the loop, the evaluation before training: a first estimate)."""
        self._evals_s += seconds
        self._evals += 1

    def expected_step_s(self, evaluates: bool) -> float:
        """This process's mean step net of evaluation, plus its mean evaluation if the step evaluates (0 before any)."""
        step = self._steps_s / self._steps if self._steps else 0.0
        return step + (self._evals_s / self._evals if evaluates and self._evals else 0.0)

    def ends_budget(self, budget_s: float | None, evaluates: bool) -> bool:
        """Whether the step about to start is the last one a training-time budget allows: the time so far plus the
        step's expected time (`expected_step_s`: an evaluating step's includes its evaluation) reaches `budget_s`.
        False without a budget (None)."""
        if budget_s is None:
            return False
        return self.read() + self.expected_step_s(evaluates) >= budget_s
