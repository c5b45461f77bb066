"""The training clock: the run's training wall time (`time/train_total_s`), carried across resumes by the checkpoint.

It measures the training loop (generation, checkpoint saves and the validations during training included; the
validation before training not): `total_s` is the checkpoint's total when the loop starts plus this process's time in
the loop since then. The value is a reading, taken when the trainer asks for one (`read`, `lap`), so that the step's
row, the row held in a checkpoint and the checkpoint's own total agree to the digit.
"""

from __future__ import annotations

import time


class TrainClock:
    def __init__(self, total_s: float = 0.0):
        self.total_s = float(total_s)  # the last reading (before `start`: the total so far, e.g. a checkpoint's)
        self._base = self.total_s  # the total when the loop started
        self._started: float | None = None  # time.monotonic() when the loop started; None before
        self._lap_s = self.total_s  # the reading at the previous lap

    def start(self) -> None:
        """The training loop starts: count on from the current total (a resumed checkpoint's, or 0)."""
        self._base = self._lap_s = self.total_s
        self._started = time.monotonic()

    def read(self) -> float:
        """The training time so far (before `start`: the total it would start from)."""
        if self._started is not None:
            self.total_s = self._base + time.monotonic() - self._started
        return self.total_s

    def lap(self) -> float:
        """Read, and return the seconds since the previous lap (or since `start`): one row's share of the time."""
        total = self.read()
        seconds, self._lap_s = total - self._lap_s, total
        return seconds

    def ends_budget(self, budget_s: float | None, steps_done: int) -> bool:
        """Whether the step about to start is the last one a training-time budget allows: the time so far plus this
        process's mean step (0 before its first) reaches `budget_s`. False without a budget (None)."""
        if budget_s is None:
            return False
        total = self.read()
        mean_step = (total - self._base) / steps_done if steps_done else 0.0
        return total + mean_step >= budget_s
