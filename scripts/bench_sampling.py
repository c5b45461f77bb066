"""Benchmark: plain vs DAPO dynamic sampling vs two-phase ("fast DAPO") sampling, side by side in one run.

Drives the real ``DataController`` with real ``DataProto`` batches (small tensors) through the trainer's loop:
when the controller is not ready, take ``gen_batch_size`` fresh prompts, make ONE fused generation call (padded
for ``--workers`` agent-loop workers with ``pad_to_multiple``), score, ``update``; when ready, take a training
batch. The policy is simulated: every prompt gets a pass rate drawn from a pass-rate histogram (default: the
Qwen2.5-Math-1.5B pass@32 histogram of seed 002; bins uniform, as in ``cost_model``) and every response is a
Bernoulli draw of it. Rows come back shuffled, as from verl's agent loop.

gen_batch_size per mode (the knob that sets how many calls a step needs; printed in the table):
- plain: train_batch_size (every group is used: one call per step).
- dapo:  train_batch_size (the smallest batch that can fill a step in one round; verl-recipe's larger
  gen_batch_size; surplus mixed groups are dropped when a batch is taken, as in verl-recipe).
- fast (default, "one call/step"): ceil(train_batch_size / keep_n) with keep_n = E[1-p^n-(1-p)^n] from the cost
  model: the seed's design, one fused call per training step on average. Such a call holds about
  train_batch_size x two-phase cost responses, more than a DAPO round's train_batch_size x N ("resp/call").
- fast ("equal call size", a reference row, no goal verdict): gen_batch_size such that the expected fused call
  holds train_batch_size x N responses, as many as one DAPO round. At equal call size the ratio of calls per step
  can only be the ratio of responses per group (the cost model's DAPO / two-phase, about 1.25x here).

Usage:
    .venv/bin/python scripts/bench_sampling.py [--N 16] [--n 4] [--train-batch-size 32] [--steps 200]
        [--workers 2] [--histogram verl_ext/curriculum/data/qwen25_math_1p5b_pass32.json] [--seed 0]
"""

from __future__ import annotations

import argparse
import math
import time
from dataclasses import dataclass

import numpy as np
import torch
from verl import DataProto

from verl_ext.curriculum.controller import DataController
from verl_ext.curriculum.cost_model import (
    DEFAULT_HISTOGRAM,
    PassRateDistribution,
    dapo_cost,
    load_pass_histogram,
    oracle_cost,
    two_phase_cost,
)
from verl_ext.curriculum.dataproto_ops import pad_to_multiple

PROMPT_LEN, RESPONSE_LEN = 8, 8


class SimulatedPolicy:
    """Prompts with Bernoulli pass rates; generation = one Bernoulli draw per row, rows returned shuffled."""

    def __init__(self, dist: PassRateDistribution, seed: int):
        self.dist = dist
        self.rng = np.random.default_rng(seed)
        self.next_uid = 0

    def fresh_prompts(self, k: int) -> DataProto:
        uids = np.array([f"p{self.next_uid + i}" for i in range(k)], dtype=object)
        self.next_uid += k
        lengths = torch.from_numpy(self.rng.integers(2, PROMPT_LEN + 1, size=k))
        mask = (torch.arange(PROMPT_LEN)[None, :] >= PROMPT_LEN - lengths[:, None]).long()  # left-padded
        return DataProto.from_dict(
            tensors={
                "input_ids": torch.from_numpy(self.rng.integers(3, 500, size=(k, PROMPT_LEN))) * mask,
                "attention_mask": mask,
                "position_ids": (mask.cumsum(-1) - 1).clamp(min=0),
            },
            non_tensors={"uid": uids, "pass_rate": self.dist.sample(k, self.rng).astype(object)},
        )

    def generate(self, gen_batch: DataProto) -> DataProto:
        m = len(gen_batch)
        rate = gen_batch.non_tensor_batch["pass_rate"].astype(np.float64)
        lengths = torch.from_numpy(self.rng.integers(1, RESPONSE_LEN + 1, size=m))
        response_mask = (torch.arange(RESPONSE_LEN)[None, :] < lengths[:, None]).long()
        out = DataProto.from_dict(
            tensors={
                "responses": torch.from_numpy(self.rng.integers(3, 500, size=(m, RESPONSE_LEN))) * response_mask,
                "response_mask": response_mask,
            },
            non_tensors={"acc": (self.rng.random(m) < rate).astype(np.float64)},
        )
        return gen_batch.union(out).select_idxs(self.rng.permutation(m))


@dataclass
class Result:
    label: str
    gen_batch_size: int
    steps: int
    counters: dict
    predicted_per_group: float
    predicted_calls_per_step: float
    seconds: float


def run(label, mode, gen_batch_size, args, dist, predicted_per_group, keep) -> Result:
    """The trainer loop (RayFastDAPOTrainer.fit without the model): generate until ready, then train."""
    ctrl = DataController(args.train_batch_size, n=args.n, n_continue=args.N - args.n, mode=mode)
    policy = SimulatedPolicy(dist, args.seed)
    start, steps = time.perf_counter(), 0
    while steps < args.steps:
        if ctrl.is_ready_for_training():
            batch = ctrl.get_training_data()
            assert len(batch) == args.train_batch_size * args.N
            steps += 1
            continue
        ctrl.add_fresh_prompts(policy.fresh_prompts(gen_batch_size))
        padded, _ = pad_to_multiple(ctrl.get_generation_inputs(), args.workers)
        ctrl.update(policy.generate(padded))
    predicted_calls = args.train_batch_size / (gen_batch_size * keep)
    return Result(label, gen_batch_size, steps, ctrl.counters, predicted_per_group, predicted_calls,
                  time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--N", type=int, default=16, help="responses per training group")
    parser.add_argument("--n", type=int, default=4, help="screening responses per fresh prompt (fast mode)")
    parser.add_argument("--train-batch-size", type=int, default=32, help="groups per training step")
    parser.add_argument("--steps", type=int, default=200, help="training steps per mode")
    parser.add_argument("--workers", type=int, default=2, help="agent-loop workers the fused batch is padded for")
    parser.add_argument("--histogram", default=str(DEFAULT_HISTOGRAM), help="pass-rate histogram JSON")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    dist = load_pass_histogram(args.histogram)
    N, n, tbs = args.N, args.n, args.train_batch_size
    keep_N, keep_n = dist.expected_keep(N), dist.expected_keep(n)
    cost_dapo, cost_fast, cost_oracle = dapo_cost(dist, N), two_phase_cost(dist, n, N), oracle_cost(N)
    print(f"histogram {args.histogram}")
    print(f"N={N} n={n} train_batch_size={tbs} steps={args.steps} workers={args.workers} seed={args.seed}")
    print(f"cost model (responses per training group): dapo {cost_dapo:.2f}  two-phase {cost_fast:.2f}  "
          f"oracle {cost_oracle:.0f}   keep_N={keep_N:.4f} keep_n={keep_n:.4f}")

    gbs_fast = math.ceil(tbs / keep_n)
    gbs_fast_equal = round(tbs * N / (n + keep_n * (N - n)))
    results = [
        run("plain", "plain", tbs, args, dist, float(N), 1.0),
        run("dapo", "dapo", tbs, args, dist, cost_dapo, keep_N),
        run("fast (one call/step)", "fast", gbs_fast, args, dist, cost_fast, keep_n),
        run("fast (equal call size)", "fast", gbs_fast_equal, args, dist, cost_fast, keep_n),
    ]

    header = (f"{'mode':<24}{'gen_bs':>7}{'calls/step':>11}{'pred':>7}{'resp/step':>10}{'resp/call':>10}"
              f"{'resp/group':>11}{'cost model':>11}{'meas/model':>11}{'/oracle N':>10}{'keep':>7}{'sec':>6}")
    print("\n" + header + "\n" + "-" * len(header))
    for r in results:
        c = r.counters
        calls = c["generation_calls"] / r.steps
        per_group = c["responses_per_training_group"]
        print(f"{r.label:<24}{r.gen_batch_size:>7}{calls:>11.3f}{r.predicted_calls_per_step:>7.3f}"
              f"{c['responses_generated'] / r.steps:>10.1f}{c['responses_generated'] / c['generation_calls']:>10.1f}"
              f"{per_group:>11.2f}{r.predicted_per_group:>11.2f}{per_group / r.predicted_per_group:>11.4f}"
              f"{per_group / N:>10.3f}{c['keep_rate']:>7.3f}{r.seconds:>6.1f}")

    dapo = results[1].counters
    dapo_calls = dapo["generation_calls"] / results[1].steps
    print()
    for r in results[2:]:
        c = r.counters
        verdict = r is results[2]
        model_err = abs(c["responses_per_training_group"] / r.predicted_per_group - 1)
        group_ratio = dapo["responses_per_training_group"] / c["responses_per_training_group"]
        call_ratio = dapo_calls / (c["generation_calls"] / r.steps)
        print(f"{r.label}: |meas/model - 1| = {model_err:.2%}{_goal(verdict, model_err <= 0.03, '<= 3%')}; "
              f"dapo/fast responses per group = {group_ratio:.3f}x{_goal(verdict, group_ratio >= 1.15, '>= 1.15x')}; "
              f"dapo/fast calls per step = {call_ratio:.3f}x{_goal(verdict, call_ratio >= 1.5, '>= 1.5x')}")


def _goal(verdict: bool, met: bool, goal: str) -> str:
    return f" (goal {goal}: {'PASS' if met else 'FAIL'})" if verdict else ""


if __name__ == "__main__":
    main()
