"""Benchmark, second table: plain vs dapo vs fast sampling on the REAL tiny-model CPU run, side by side.

Runs the fast DAPO recipe (`+preset=cpu_demo`: tiny Qwen2, toy copy-digit task, vLLM-CPU rollout, FSDP2 actor) once
per mode for the same number of training steps, reads each run's JSONL metrics, and prints responses and generation
calls per training step, responses per training group, rollout seconds per step and the final train accuracy.
The first table (simulated policy, many steps) is scripts/bench_sampling.py, which checks the goals; this one has no
target of its own: it shows the same figures on the real run, to set beside the simulated ones.

Usage: .venv/bin/python scripts/bench_sampling_cpu.py [--steps 12] [--out outputs/bench_sampling_cpu]
"""

from __future__ import annotations

import argparse
import subprocess
from pathlib import Path

from benchlib import warm_mean

from verl_ext.launch.local_run import run_recipe

ENTRY = "recipe.fast_dapo.main"
MODES = {
    "plain": ["curriculum.enable=false"],
    "dapo": ["curriculum.mode=dapo"],
    "fast": ["curriculum.mode=fast"],
}


def run_mode(name: str, overrides: list[str], steps: int, out: Path) -> list[dict]:
    overrides = [
        "+preset=cpu_demo",
        *overrides,
        f"trainer.total_training_steps={steps}",
        "trainer.test_freq=-1",
        "trainer.val_before_train=false",
        "trainer.save_freq=-1",
        "trainer.resume_mode=disable",
        f"trainer.experiment_name=bench_{name}",
    ]
    print(f"[bench] {name}: {ENTRY} {' '.join(overrides)}", flush=True)
    return run_recipe(ENTRY, overrides, out / name, out / f"{name}.log")


def summarize(rows: list[dict]) -> dict:
    last = rows[-1]
    steps = len(rows)
    return {
        "responses/step": last["curriculum/responses_generated"] / steps,
        "calls/step": last["curriculum/generation_calls"] / steps,
        "responses/group": last["curriculum/responses_per_training_group"],
        "keep rate": last["curriculum/keep_rate"],
        "gen s/step*": warm_mean(rows, "timing_s/gen"),
        "acc first3": sum(r["critic/score/mean"] for r in rows[:3]) / 3,
        "acc last3": sum(r["critic/score/mean"] for r in rows[-3:]) / 3,
    }


def run_modes(steps: int, out: Path) -> tuple[dict[str, dict], dict[str, str]]:
    """({mode: its summary}, {mode: why its run failed})."""
    results, failures = {}, {}
    for name, o in MODES.items():
        try:
            results[name] = summarize(run_mode(name, o, steps, out))
        except subprocess.CalledProcessError:
            # e.g. GenerationBudgetExceeded when the policy drifts to all-wrong groups: a result in itself
            tail = (out / f"{name}.log").read_text().splitlines()
            failures[name] = next((line for line in reversed(tail) if "Exceeded" in line or "Error" in line), "failed")
    return results, failures


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--out", default="outputs/bench_sampling_cpu")
    args = p.parse_args()
    results, failures = run_modes(args.steps, Path(args.out))
    for name, why in failures.items():
        print(f"{name}: run failed: {why[:300]}")
    if not results:
        return
    cols = list(next(iter(results.values())))
    print(
        "\nreal tiny-model CPU run, N = 8 (n = 4 + 4), train_batch_size = 8, gen_batch_size = 16 "
        "(the cpu_demo preset), "
        f"{args.steps} steps per mode (* steps 2.. only)"
    )
    print(f"{'mode':6s} " + " ".join(f"{c:>15s}" for c in cols))
    for name, r in results.items():
        print(f"{name:6s} " + " ".join(f"{r[c]:15.3f}" for c in cols))
    if "dapo" not in results or "fast" not in results:
        return
    d, f = results["dapo"], results["fast"]
    print(
        f"\nfast vs dapo: {d['responses/group'] / f['responses/group']:.2f}x fewer responses per training group, "
        f"{d['calls/step'] / f['calls/step']:.2f}x fewer generation calls per training step"
    )


if __name__ == "__main__":
    main()
