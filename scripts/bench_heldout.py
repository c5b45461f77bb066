"""Benchmark: the large held-out evaluation's seconds per 1,024 questions on the real model, one task mix per arm.

Each arm is the released SmolLM2-135M-Instruct scored by the recipe's driver with its preset and
`trainer.val_only=true` (the run's own start-up and generation path, as `scripts/evaluate.py released` and a run's
first and last evaluations): the greedy answers to the preset's held-out set (`trainer.heldout.files`, 1,024
questions that share no meaning with the training or validation ones), graded by the run's reward. The arms run one
after another in this sitting; run it on an otherwise idle machine.

Figures per arm, from its metric log: the held-out questions, the evaluation's seconds (`heldout/seconds`, the
answers and their grading; the start-up apart) and seconds per 1,024 questions, the accuracy, and the whole
command's wall time. Target (issue "Experiments that decide"): <= 180 s per 1,024 questions on 2 cores, so scoring
every campaign run at its first and last step stays cheap.

    .venv/bin/python scripts/bench_heldout.py [--arms arithmetic steps]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from benchlib import Target

from verl_ext.launch.local_run import run_recipe
from verl_ext.metrics_log.console import val_accuracy
from verl_ext.trainer.heldout import PREFIX

PER_1024_TARGET = Target("<=", 180.0, " s")  # the held-out evaluation's seconds per 1,024 questions
ARMS = {  # arm -> its preset: the task mix whose held-out set is scored
    "arithmetic": "real_cpu",
    "steps": "real_steps_cpu",
}


def figures(rows: list[dict]) -> dict:
    """The evaluation's figures from a val_only run's metric log (its last row holds the held-out metrics)."""
    row = next((r for r in reversed(rows) if f"{PREFIX}/seconds" in r), None)
    if row is None:
        raise SystemExit(f"[bench] the run logged no {PREFIX}/seconds (is trainer.heldout.files set?)")
    n, seconds = int(row[f"{PREFIX}/questions"]), float(row[f"{PREFIX}/seconds"])
    return {
        "questions": n,
        "seconds": seconds,
        "per_1024_s": seconds * 1024 / n,
        "accuracy": val_accuracy(row, prefix=PREFIX),
    }


def print_verdicts(results: dict[str, dict]) -> None:
    print("arm | held-out questions | greedy accuracy | evaluation s | s per 1,024 | command s")
    for arm, r in results.items():
        print(f"{arm} | {r['questions']} | {r['accuracy']:.3f} | {r['seconds']:.0f} | {r['per_1024_s']:.0f} | "
              f"{r['wall_s']:.0f}")  # fmt: skip
    for arm, r in results.items():
        print(f"{arm}: {r['per_1024_s']:.0f} s per 1,024 questions {PER_1024_TARGET.verdict(r['per_1024_s'])}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--arms", nargs="+", default=list(ARMS), choices=list(ARMS))
    p.add_argument("--out-root", type=Path, default=Path("outputs/bench_heldout"))
    args = p.parse_args()
    results = {}
    for arm in args.arms:
        run_dir = args.out_root / arm
        print(f"[bench] {arm}: running ({run_dir}/console.log)", flush=True)
        t0 = time.monotonic()
        overrides = [f"+preset={ARMS[arm]}", "trainer.val_only=true", "trainer.resume_mode=disable"]
        results[arm] = figures(run_recipe("recipe.fast_dapo.main", overrides, run_dir, run_dir / "console.log"))
        results[arm]["wall_s"] = time.monotonic() - t0
        print(f"[bench] {arm}: {results[arm]}", flush=True)
    print_verdicts(results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
