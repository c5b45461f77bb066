"""Benchmark: agent episodes on the real model, one interpreter start per episode (`external_agent.launch=process`)
against the fork server (`fork`, the default), beside the single-turn real preset on the same engine.

Three arms, run one after another in this sitting (the machine otherwise idle), each the recipe's driver with its
preset for `--steps` training steps (fast DAPO on SmolLM2-135M-Instruct, CPU backend):

- `single_turn`: `+preset=real_cpu`, the generation rate an agent should approach;
- `agent_process` and `agent_fork`: `+preset=agent_real_cpu` (the Agents SDK calculator agent, unchanged) with each
  launch mode; before training, greedy validation through the agent on the preset's 144 validation questions
  (scored by the large held-out evaluation's machinery on that file: `heldout/seconds` is its wall time).

Figures, from each run's metric log: generation tokens/s (`curriculum/tokens_generated`, the policy's response
tokens, over the rollout's wall time `timing_s/gen_total`, all steps),
the seconds of a training step (median), and the agent validation's seconds. Targets (issue "Agent episodes at the
speed of single-turn rollouts"): the fork arm's tokens/s >= 0.7x the single-turn arm's; validation <= 80 s; a step
<= 0.5x the process arm's.

    .venv/bin/python scripts/bench_agent_real.py [--steps 2] [--arms single_turn agent_process agent_fork]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from benchlib import Target

from verl_ext.launch.local_run import run_recipe

TOKENS_TARGET = Target(">=", 0.7, "x")  # fork arm's tokens/s / the single-turn arm's
VALIDATION_TARGET = Target("<=", 80.0, " s")  # greedy validation through the agent, 144 questions
STEP_TARGET = Target("<=", 0.5, "x")  # fork arm's step / the process arm's

COMMON = ["trainer.val_before_train=false", "trainer.test_freq=-1", "trainer.save_freq=-1", "trainer.logger=[compact]"]
AGENT_VAL = ["trainer.heldout.files=${mathgen:val,arithmetic_calc}", "+trainer.heldout.at=[first]"]
ARMS = {
    "single_turn": ["+preset=real_cpu", "trainer.heldout.files=null"],
    "agent_process": ["+preset=agent_real_cpu", "+external_agent.launch=process", *AGENT_VAL],
    "agent_fork": ["+preset=agent_real_cpu", "+external_agent.launch=fork", *AGENT_VAL],
}


def figures(rows: list[dict]) -> dict:
    steps = [r for r in rows if r.get("step", 0) >= 1]
    tokens = steps[-1]["curriculum/tokens_generated"]  # cumulative since the (fresh) run began
    gen_s = sum(r["timing_s/gen_total"] for r in steps if "timing_s/gen_total" in r)
    first = next((r for r in rows if "heldout/seconds" in r), {})
    return {
        "tokens_per_s": tokens / gen_s if gen_s else float("nan"),
        "step_s": statistics.median(r["timing_s/step"] + r.get("timing_s/gen_total", 0.0) for r in steps),
        "validation_s": first.get("heldout/seconds", float("nan")),
        "validation_acc": first.get("heldout-core/all/acc/mean@1", float("nan")),
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--arms", nargs="+", default=list(ARMS), choices=list(ARMS))
    p.add_argument("--out-root", type=Path, default=Path("outputs/bench_agent_real"))
    p.add_argument("--fresh", action="store_true", help="measure every arm again (default: reuse <arm>/bench.json)")
    args = p.parse_args()
    results = {}
    for arm in args.arms:
        run_dir = args.out_root / arm
        saved = run_dir / "bench.json"  # an arm measured in this sitting already (--fresh measures it again)
        if saved.is_file() and not args.fresh:
            results[arm] = json.loads(saved.read_text())
            print(f"[bench] {arm}: measured before, {saved}", flush=True)
            continue
        t0 = time.monotonic()
        print(f"[bench] {arm}: running ({run_dir}/console.log)", flush=True)
        overrides = [*ARMS[arm], *COMMON, f"trainer.total_training_steps={args.steps}", "trainer.resume_mode=disable"]
        results[arm] = figures(run_recipe("recipe.fast_dapo.main", overrides, run_dir, run_dir / "console.log"))
        results[arm]["wall_s"] = time.monotonic() - t0
        saved.write_text(json.dumps(results[arm]))
        print(f"[bench] {arm}: {results[arm]}", flush=True)
    print("arm | gen tokens/s | step s (median) | validation through the agent, 144 q: s (acc) | run s")
    for arm, r in results.items():
        print(f"{arm} | {r['tokens_per_s']:.0f} | {r['step_s']:.1f} | {r['validation_s']:.0f} "
              f"({r['validation_acc']:.3f}) | {r['wall_s']:.0f}")  # fmt: skip
    if {"single_turn", "agent_fork"} <= set(results):
        ratio = results["agent_fork"]["tokens_per_s"] / results["single_turn"]["tokens_per_s"]
        print(f"agent (fork) tokens/s / single-turn: {ratio:.2f}x {TOKENS_TARGET.verdict(ratio)}")
    if "agent_fork" in results:
        v = results["agent_fork"]["validation_s"]
        print(f"validation through the agent (fork): {v:.0f} s {VALIDATION_TARGET.verdict(v)}")
    if {"agent_process", "agent_fork"} <= set(results):
        ratio = results["agent_fork"]["step_s"] / results["agent_process"]["step_s"]
        print(f"step, fork / process: {ratio:.2f}x {STEP_TARGET.verdict(ratio)}")
        ratio_v = results["agent_fork"]["validation_s"] / results["agent_process"]["validation_s"]
        print(f"validation, fork / process: {ratio_v:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
