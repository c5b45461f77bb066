"""What the benchmarks (scripts/bench_*.py) share: a figure's target and its PASS / MISS verdict, one measurement run in
a fresh child process of the benchmark's own script, and the per-step means of a training run's metric log (the
runs themselves go through the library's `verl_ext.launch.local_run`).

It sits beside the benchmarks rather than in `verl_ext` because nothing else uses it; they import it as a sibling
(Python puts a script's own folder first on its import path).
"""

from __future__ import annotations

import json
import math
import operator
import subprocess
import sys
from dataclasses import dataclass

_OPS = {">=": operator.ge, "<=": operator.le, ">": operator.gt, "<": operator.lt}
RESULT = "RESULT "  # the line a child process prints its measurement on


@dataclass(frozen=True)
class Target:
    """A goal a figure is checked against (`figure <op> bound`), in the figure's own unit."""

    op: str
    bound: float
    unit: str = ""

    def __post_init__(self):
        if self.op not in _OPS:
            raise ValueError(f"target operator {self.op!r}: one of {sorted(_OPS)}")

    def met(self, value: float) -> bool:
        """Whether `value` meets the target; a missing figure (NaN) meets none."""
        return not math.isnan(value) and _OPS[self.op](value, self.bound)

    def verdict(self, value: float) -> str:
        """`(target >= 2.5x: PASS)`, printed beside the figure."""
        return f"(target {self.op} {self.bound:g}{self.unit}: {'PASS' if self.met(value) else 'MISS'})"


def print_result(result: dict) -> None:
    """The child's side of `run_child`: its measurement, one line."""
    print(RESULT + json.dumps(result), flush=True)


def run_child(script: str, args: list[str], env: dict[str, str] | None = None) -> dict:
    """Run `python <script> <args>` in a fresh process and return what it printed with `print_result`. A child that
    printed no result stops the benchmark, with the tail of its output."""
    proc = subprocess.run([sys.executable, script, *args], capture_output=True, text=True, env=env)
    line = next((ln for ln in reversed(proc.stdout.splitlines()) if ln.startswith(RESULT)), None)
    if line is None:
        raise SystemExit(
            f"{' '.join(args)}: no result (exit {proc.returncode})\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
        )
    return json.loads(line[len(RESULT) :])


def warm_mean(rows: list[dict], key: str) -> float:
    """Mean of `key` over a run's steps after the first (step 1 holds vLLM's warm-up); a step without it counts 0."""
    values = [float(r.get(key, 0.0)) for r in rows[1:]]
    return sum(values) / max(len(values), 1)
