"""SEPA lambda controller: how strongly SEPA pools execution-token uncertainty at each training step.

Schedules (defaults `steps=500, schedule=linear, delay_steps=50, correct_rate_gate=0.1`):
- `linear`: `s = step - delay_steps`; `lambda = 0` if `steps <= 0` or `s <= 0`, else `min(s / steps, 1)`.
- `auto`: an EMA of the batch variance of execution-token uncertainty,
  `var_ema <- 0.99 * var_ema + 0.01 * var_obs` (the first observation initialises it); after 50 observations
  `var_0 = max(var_ema, 1e-8)` is frozen; `auto = 1 - min((var_ema / var_0) / 0.2, 1)`;
  `lambda = max(auto, linear(step))`. As execution tokens grow confident (variance falls to a fifth of its early
  level) pooling reaches full strength, whatever the step.
- correctness gate: if `correct_rate_gate > 0`, lambda is 0 until one step's correct rate (share of responses
  with reward > 0.5) reaches the gate; from then on the gate stays open.

Protocol (the trainer owns one controller and saves its state with the checkpoint):
    lam = ctl.resolve(step)            # once, at the start of the step; pass it to the estimator as sepa_lambda
    ... rollouts, estimator(..., sepa_lambda=lam, metrics=m) ...
    ctl.observe(m["adv/exec_u_var_before"], m["adv/correct_rate"])   # after the step's rollouts
Non-finite or None observations are ignored (e.g. a batch without execution tokens).
"""

from __future__ import annotations

import math
from typing import Any

EMA_DECAY = 0.99
WARMUP_OBSERVATIONS = 50
VAR_FLOOR = 1e-8
VAR_RATIO_FOR_FULL = 0.2
SCHEDULES = ("linear", "auto")


class SepaController:
    def __init__(
        self, steps: int = 500, schedule: str = "linear", delay_steps: int = 50, correct_rate_gate: float = 0.1
    ):
        if schedule not in SCHEDULES:
            raise ValueError(f"sepa.schedule must be one of {SCHEDULES}, got {schedule!r}")
        if steps < 0 or delay_steps < 0:
            raise ValueError(f"sepa.steps and sepa.delay_steps must be >= 0, got {steps}, {delay_steps}")
        if not 0.0 <= correct_rate_gate <= 1.0:
            raise ValueError(f"sepa.correct_rate_gate must be in [0, 1], got {correct_rate_gate}")
        self.steps = int(steps)
        self.schedule = schedule
        self.delay_steps = int(delay_steps)
        self.correct_rate_gate = float(correct_rate_gate)
        self.var_ema: float | None = None
        self.var_0: float | None = None
        self.n_observed = 0
        self.gate_open = self.correct_rate_gate <= 0.0

    @classmethod
    def from_config(cls, sepa) -> SepaController:
        """From an AdvantageConfig's `sepa` (SepaConfig)."""
        return cls(sepa.steps, sepa.schedule, sepa.delay_steps, sepa.correct_rate_gate)

    def linear(self, step: int) -> float:
        shifted = step - self.delay_steps
        if self.steps <= 0 or shifted <= 0:
            return 0.0
        return min(shifted / self.steps, 1.0)

    def auto(self) -> float:
        if self.var_ema is None or self.var_0 is None:
            return 0.0
        return 1.0 - min((self.var_ema / self.var_0) / VAR_RATIO_FOR_FULL, 1.0)

    def resolve(self, step: int) -> float:
        """lambda for `step`, in [0, 1]. Call once at the start of the step."""
        if not self.gate_open:
            return 0.0
        if self.schedule == "auto":
            return max(self.auto(), self.linear(step))
        return self.linear(step)

    def observe(self, exec_uncertainty_var: float | None, correct_rate: float | None) -> None:
        """Update the gate and (auto schedule) the variance EMA with one step's observations."""
        if correct_rate is not None and math.isfinite(correct_rate) and correct_rate >= self.correct_rate_gate:
            self.gate_open = True
        if self.schedule != "auto" or exec_uncertainty_var is None or not math.isfinite(exec_uncertainty_var):
            return
        var = float(exec_uncertainty_var)
        self.var_ema = var if self.var_ema is None else EMA_DECAY * self.var_ema + (1.0 - EMA_DECAY) * var
        self.n_observed += 1
        if self.var_0 is None and self.n_observed >= WARMUP_OBSERVATIONS:
            self.var_0 = max(self.var_ema, VAR_FLOOR)

    def state_dict(self) -> dict[str, Any]:
        return {
            "var_ema": self.var_ema,
            "var_0": self.var_0,
            "n_observed": self.n_observed,
            "gate_open": self.gate_open,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        missing = {"var_ema", "var_0", "n_observed", "gate_open"} - set(state)
        if missing:
            raise ValueError(f"SepaController.load_state_dict: missing keys {sorted(missing)}")
        self.var_ema = None if state["var_ema"] is None else float(state["var_ema"])
        self.var_0 = None if state["var_0"] is None else float(state["var_0"])
        self.n_observed = int(state["n_observed"])
        self.gate_open = bool(state["gate_open"])
