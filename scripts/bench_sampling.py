"""Benchmark: plain vs DAPO dynamic sampling vs two-phase ("fast DAPO") sampling, side by side in one run.

Drives the real ``DataController`` with real ``DataProto`` batches (small tensors) through the trainer's loop:
when the controller is not ready, take ``gen_batch_size`` fresh prompts, make ONE fused generation call (padded
for ``--workers`` agent-loop workers with ``pad_to_multiple``), score, ``update``; when ready, take a training
batch. The policy is simulated: every prompt gets a pass rate drawn from a pass-rate histogram (default: the
Qwen2.5-Math-1.5B pass@32 histogram of the SPEED-RL experiment log; bins uniform, as in ``cost_model``) and every
response is a Bernoulli draw of it. Rows come back shuffled, as from verl's agent loop.

gen_batch_size per mode (the knob that sets how many calls a step needs; printed in the table):
- plain: train_batch_size (every group is used: one call per step).
- dapo:  train_batch_size (the smallest batch that can fill a step in one round; verl-recipe's larger
  gen_batch_size; surplus mixed groups are dropped when a batch is taken, as in verl-recipe).
- fast (default, "one call/step"): ceil(train_batch_size / keep_n) with keep_n = E[1-p^n-(1-p)^n] from the cost
  model: SPEED-RL's design, one fused call per training step on average. Such a call holds about
  train_batch_size x two-phase cost responses, more than a DAPO round's train_batch_size x N ("resp/call").
- fast ("equal call size", a reference row, no goal verdict): gen_batch_size such that the expected fused call
  holds train_batch_size x N responses, as many as one DAPO round. At equal call size the ratio of calls per step
  can only be the ratio of responses per group (the cost model's DAPO / two-phase, about 1.25x here).

Second part, the pass-rate memory (GRESO-style, ``verl_ext.curriculum.memory``): a fixed data set of
``--dataset-size`` prompts (pass rates drawn once from the histogram, fixed: the policy does not learn) read for
``--epochs`` epochs (shuffled each epoch), as the trainer's dataloader does. Side by side: dapo, fast without memory,
fast with the default memory, then fast with other ``skip_all_wrong`` values (the trade-off). Per epoch: responses
per training group, fraction of prompts skipped, and the share of informative prompts still screened, where a
prompt's informativeness is the probability 1 - p^N - (1-p)^N that its N responses are mixed (a non-zero GRPO
advantage), so share = sum over screened prompts / sum over offered prompts, and the share trained: the same sum
over the prompts whose group reached training (what the responses buy). "model" is the cost model's
``second_epoch`` for the second epoch. Goal (issue 13): second epoch <= 20 responses per training group with
>= 0.8 of the informative prompts screened. The last lines put the closed-form one-response probe (a rule that meets
that goal) beside the skip rule at the same cost, by the share trained.

Usage:
    .venv/bin/python scripts/bench_sampling.py [--N 16] [--n 4] [--train-batch-size 32] [--steps 200]
        [--workers 2] [--histogram verl_ext/curriculum/data/qwen25_math_1p5b_pass32.json] [--seed 0]
        [--part all|steps|memory] [--dataset-size 4096] [--epochs 2]
"""

from __future__ import annotations

import argparse
import math
import time
from dataclasses import dataclass, replace

import numpy as np
import torch
from benchlib import Target
from verl import DataProto

from verl_ext.curriculum.controller import PHASE_KEY, SCREEN, DataController
from verl_ext.curriculum.cost_model import (
    DEFAULT_HISTOGRAM,
    PassRateDistribution,
    dapo_cost,
    load_pass_histogram,
    memory_epoch_cost,
    oracle_cost,
    second_epoch,
    skip_all_wrong_at_cost,
    two_phase_cost,
)
from verl_ext.curriculum.dataproto_ops import pad_to_multiple
from verl_ext.curriculum.memory import MemorySettings

PROMPT_LEN, RESPONSE_LEN = 8, 8
# the default fast mode (one call per step) against dapo and its cost model
MODEL_ERR_TARGET = Target("<=", 3, "%")  # |measured / cost model - 1| of responses per training group
GROUP_RATIO_TARGET = Target(">=", 1.15, "x")  # dapo / fast responses per training group
CALL_RATIO_TARGET = Target(">=", 1.5, "x")  # dapo / fast generation calls per training step
# the pass-rate memory's second epoch (issue 13)
MEMORY_COST_TARGET = Target("<=", 20)  # responses per training group
MEMORY_SHARE_TARGET = Target(">=", 0.8)  # share of the informative prompts screened


class SimulatedPolicy:
    """Prompts with Bernoulli pass rates; generation = one Bernoulli draw per row, rows returned shuffled."""

    def __init__(self, dist: PassRateDistribution, seed: int):
        self.dist = dist
        self.rng = np.random.default_rng(seed)
        self.next_uid = 0

    def fresh_prompts(self, k: int, pass_rate: np.ndarray | None = None, index: np.ndarray | None = None) -> DataProto:
        """k new prompt rows; pass rates drawn from the histogram unless given (a fixed data set's rows)."""
        uids = np.array([f"p{self.next_uid + i}" for i in range(k)], dtype=object)
        self.next_uid += k
        if pass_rate is None:
            pass_rate = self.dist.sample(k, self.rng)
        if index is None:
            index = np.arange(self.next_uid - k, self.next_uid)
        lengths = torch.from_numpy(self.rng.integers(2, PROMPT_LEN + 1, size=k))
        mask = (torch.arange(PROMPT_LEN)[None, :] >= PROMPT_LEN - lengths[:, None]).long()  # left-padded
        return DataProto.from_dict(
            tensors={
                "input_ids": torch.from_numpy(self.rng.integers(3, 500, size=(k, PROMPT_LEN))) * mask,
                "attention_mask": mask,
                "position_ids": (mask.cumsum(-1) - 1).clamp(min=0),
            },
            non_tensors={"uid": uids, "pass_rate": pass_rate.astype(object), "index": index.astype(np.int64)},
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
    return Result(
        label, gen_batch_size, steps, ctrl.counters, predicted_per_group, predicted_calls, time.perf_counter() - start
    )


@dataclass
class EpochStats:
    responses: int = 0  # generated for prompts drawn in this epoch
    groups: int = 0  # training groups of prompts drawn in this epoch
    calls: int = 0  # generation calls while this epoch's prompts were drawn
    steps: int = 0  # training steps taken meanwhile
    offered: int = 0
    skipped: int = 0
    informative_offered: float = 0.0  # sum of P(N responses mixed) over offered prompts
    informative_screened: float = 0.0  # the same over screened prompts
    informative_trained: float = 0.0  # the same over prompts whose group was trained

    @property
    def per_group(self) -> float:
        return self.responses / self.groups if self.groups else math.nan

    @property
    def share(self) -> float:
        return self.informative_screened / self.informative_offered if self.informative_offered else math.nan

    @property
    def trained_share(self) -> float:
        return self.informative_trained / self.informative_offered if self.informative_offered else math.nan


class EpochRun:
    """The trainer loop over a fixed data set for args.epochs epochs.

    Responses and training groups are attributed to the epoch in which their prompt was drawn (a prompt screened
    at the end of an epoch is continued and trained in the next one), so the per-epoch figures carry no pipeline
    fill or drain. Groups ready but fewer than a batch when the data is used up count as trained (a longer run
    would train them). Calls per step are counted in the calls made while the epoch's prompts were drawn.
    """

    def __init__(self, mode, gen_batch_size, args, rates, memory: MemorySettings | None):
        n, N = args.n, args.N
        self.ctrl = DataController(args.train_batch_size, n=n, n_continue=N - n, mode=mode, memory=memory)
        self.policy = SimulatedPolicy(PassRateDistribution(points=((0.5, 1.0),), bins=()), args.seed)  # rates given
        self.args, self.rates, self.gen_batch_size = args, rates, gen_batch_size
        self.informative = 1.0 - rates**N - (1.0 - rates) ** N
        self.stats = [EpochStats() for _ in range(args.epochs)]
        self.epoch_of_uid: dict[str, int] = {}

    def run(self) -> list[EpochStats]:
        order_rng = np.random.default_rng(self.args.seed + 1)
        for epoch in range(self.args.epochs):
            order = order_rng.permutation(len(self.rates))
            for start in range(0, len(order), self.gen_batch_size):
                self.offer(epoch, order[start : start + self.gen_batch_size])
        self.finish(self.args.epochs - 1)
        return self.stats

    def offer(self, epoch: int, idx: np.ndarray) -> None:
        """Train while a batch is ready, then hand the controller the data set's next prompts and generate."""
        ctrl, stats = self.ctrl, self.stats[epoch]
        while ctrl.is_ready_for_training():
            self.train(epoch)
        fresh = self.policy.fresh_prompts(len(idx), self.rates[idx], idx)
        self.epoch_of_uid.update(dict.fromkeys(fresh.non_tensor_batch["uid"], epoch))
        before = ctrl.counters["prompts_skipped_by_memory"]
        ctrl.add_fresh_prompts(fresh)
        stats.skipped += ctrl.counters["prompts_skipped_by_memory"] - before
        stats.offered += len(idx)
        stats.informative_offered += float(self.informative[idx].sum())
        if ctrl.has_generation_inputs:
            self.generate(epoch)

    def finish(self, last: int) -> None:
        """The data is used up: finish what the controller holds."""
        ctrl = self.ctrl
        while ctrl.has_generation_inputs or ctrl.is_ready_for_training():
            if ctrl.is_ready_for_training():
                self.train(last)
            else:
                self.generate(last)
        if ctrl.prompts_for_training is not None:
            self.count_trained(ctrl.prompts_for_training)

    def train(self, epoch: int) -> None:
        self.stats[epoch].steps += 1
        self.count_trained(self.ctrl.get_training_data())

    def generate(self, epoch: int) -> None:
        gen_in = self.ctrl.get_generation_inputs()
        self.stats[epoch].calls += 1
        for e, count in zip(*np.unique(self.epochs_of(gen_in.non_tensor_batch["uid"]), return_counts=True)):
            self.stats[e].responses += int(count)
        screen = gen_in.non_tensor_batch[PHASE_KEY] == SCREEN
        screened_idx = np.unique(gen_in.non_tensor_batch["index"][screen].astype(np.int64))
        self.stats[epoch].informative_screened += float(self.informative[screened_idx].sum())
        self.ctrl.update(self.policy.generate(pad_to_multiple(gen_in, self.args.workers)[0]))

    def epochs_of(self, uids) -> np.ndarray:
        return np.fromiter((self.epoch_of_uid[u] for u in uids), dtype=np.int64, count=len(uids))

    def count_trained(self, groups: DataProto) -> None:
        first_rows = groups.non_tensor_batch
        prompt_epochs = self.epochs_of(first_rows["uid"][:: self.args.N])
        prompts = first_rows["index"][:: self.args.N].astype(np.int64)
        for e in np.unique(prompt_epochs):
            self.stats[e].groups += int((prompt_epochs == e).sum())
            self.stats[e].informative_trained += float(self.informative[prompts[prompt_epochs == e]].sum())


def memory_rows(args, dist, default: MemorySettings) -> list[tuple[str, str, int, MemorySettings | None]]:
    """(label, mode, gen_batch_size, memory) of each row of the memory table."""
    gbs_fast = math.ceil(args.train_batch_size / dist.expected_keep(args.n))
    rows = [
        ("dapo", "dapo", args.train_batch_size, None),
        ("fast, no memory", "fast", gbs_fast, None),
        ("fast + memory (default)", "fast", gbs_fast, default),
        ("dapo + memory (default)", "dapo", args.train_batch_size, default),
    ]
    rows += [(f"fast + memory b_w={b:g}", "fast", gbs_fast, replace(default, skip_all_wrong=b)) for b in args.sweep]
    return rows


def memory_line(label: str, gbs: int, stats: list[EpochStats]) -> str:
    """A row's measured cells: each epoch's, then both epochs'."""
    line = f"{label:<26}{gbs:>7}"
    for e in stats:
        calls = e.calls / e.steps if e.steps else math.nan
        line += f"{e.per_group:>13.2f}{e.skipped / e.offered:>9.3f}{e.share:>11.3f}{e.trained_share:>12.3f}"
        line += f"{calls:>16.3f}"
    return line + f"{sum(e.responses for e in stats) / max(sum(e.groups for e in stats), 1):>13.2f}"


def model_cells(mode: str, memory: MemorySettings | None, dist, args) -> str:
    """The cost model's second epoch (cost, screened, trained) for a fast row; blank for dapo."""
    model = ["", "", ""]
    if mode == "fast":
        b_w = 0.0 if memory is None else min(memory.skip_all_wrong, memory.max_skip)
        b_c = 0.0 if memory is None else min(memory.skip_all_correct, memory.max_skip)
        m = second_epoch(dist, args.n, args.N, b_w, b_c)
        model = [f"{m.cost:.2f}", f"{m.screened:.3f}", f"{m.trained:.3f}"]
    return f"{model[0]:>9}{model[1]:>13}{model[2]:>14}"


def memory_table(args, dist, rates, default: MemorySettings) -> dict[str, list[EpochStats]]:
    """Print the memory table, one row per setting as it finishes; returns each row's epochs."""
    header = (
        f"{'mode':<26}{'gen_bs':>7}"
        + "".join(
            f"{f'resp/grp e{e}':>13}{f'skip e{e}':>9}{f'inform e{e}':>11}{f'trained e{e}':>12}{f'calls/step e{e}':>16}"
            for e in range(1, args.epochs + 1)
        )
        + f"{'resp/grp all':>13}{'model e2':>9}{'inform model':>13}{'trained model':>14}"
    )
    print(header + "\n" + "-" * len(header))
    results = {}
    for label, mode, gbs, memory in memory_rows(args, dist, default):
        results[label] = EpochRun(mode, gbs, args, rates, memory).run()
        print(memory_line(label, gbs, results[label]) + model_cells(mode, memory, dist, args), flush=True)
    return results


def print_memory_verdicts(results: dict[str, list[EpochStats]]) -> None:
    """The default memory's second epoch against the goal, and beside dapo and fast without memory."""
    e2 = results["fast + memory (default)"][1]
    cost, share = MEMORY_COST_TARGET, MEMORY_SHARE_TARGET
    both = "PASS" if cost.met(e2.per_group) and share.met(e2.share) else "MISS"
    print(
        f"\nfast + memory (default), epoch 2: {e2.per_group:.2f} responses per training group "
        f"{cost.verdict(e2.per_group)}, {e2.share:.3f} of informative prompts screened {share.verdict(e2.share)}: "
        f"both {both}"
    )
    dapo2, fast2 = results["dapo"][1], results["fast, no memory"][1]
    print(
        f"epoch 2 responses per training group: dapo {dapo2.per_group:.2f}, fast {fast2.per_group:.2f}, "
        f"fast + memory {e2.per_group:.2f} ({fast2.per_group / e2.per_group:.3f}x fewer than fast, "
        f"{dapo2.per_group / e2.per_group:.3f}x fewer than dapo)"
    )


def _curve(dist, n: int, N: int, grid: np.ndarray):
    """(skip_all_wrong, responses per group, informative share screened) of the memory's second epoch in the cost
    model, along `grid`, computed as they are read."""
    return ((b, *memory_epoch_cost(dist, n, N, b, 0.0)) for b in grid)


def print_trade_off(dist, n: int, N: int, default: MemorySettings) -> None:
    """The trade-off is set by the data: any rule that skips on one earlier uniform screening moves along the cost
    model's line between these points; print where it crosses each goal, and the one-response probe beside it."""
    cost, share = MEMORY_COST_TARGET, MEMORY_SHARE_TARGET
    rising, falling = _curve(dist, n, N, np.linspace(0, 1, 101)), _curve(dist, n, N, np.linspace(1, 0, 101))
    lowest = next(((b, screened) for b, c, screened in rising if cost.met(c)), None)
    if lowest:
        print(
            f"cost model, epoch 2: {cost.op} {cost.bound:g} responses per group needs skip_all_wrong >= "
            f"{lowest[0]:.2f}, where only {lowest[1]:.3f} of the informative prompts are screened"
        )
    highest = next(((b, c) for b, c, screened in falling if share.met(screened)), None)
    if highest:
        print(
            f"cost model, epoch 2: {share.op} {share.bound:g} informative screened allows skip_all_wrong <= "
            f"{highest[0]:.2f}, at {highest[1]:.2f} responses per group"
        )
    probe = second_epoch(dist, n, N, 0.3, default.skip_all_correct, probe_n=1)
    b = skip_all_wrong_at_cost(dist, n, N, default.skip_all_correct, probe.cost)
    skip = second_epoch(dist, n, N, b, default.skip_all_correct)
    print(
        f"cost model, epoch 2, one-response probe of remembered prompts (skip_all_wrong 0.3): {probe.cost:.2f} "
        f"responses per group, {probe.screened:.3f} screened, {probe.trained:.3f} trained; the skip rule at the "
        f"same cost (skip_all_wrong {b:.2f}): {skip.screened:.3f} screened, {skip.trained:.3f} trained"
    )


def memory_part(args, dist) -> None:
    rates = dist.sample(args.dataset_size, np.random.default_rng(args.seed + 2))
    # the recipe's memory settings (fast_dapo.yaml, the one place they are set), on, keyed by the simulated index
    from recipe.fast_dapo.config_check import DEFAULTS

    recipe_memory = DEFAULTS.value("curriculum.memory")
    default = MemorySettings(**{**recipe_memory, "enable": True, "key": "index", "seed": args.seed})
    print(
        f"\npass-rate memory: {args.dataset_size} prompts x {args.epochs} epochs, pass rates fixed; "
        f"memory default {default}"
    )
    results = memory_table(args, dist, rates, default)
    if args.epochs >= 2:
        print_memory_verdicts(results)
        print_trade_off(dist, args.n, args.N, default)


def steps_part(args, dist) -> None:
    """The four modes over fresh prompts, the table, and the default fast mode's figures against their targets."""
    N, n, tbs = args.N, args.n, args.train_batch_size
    keep_N, keep_n = dist.expected_keep(N), dist.expected_keep(n)
    cost_dapo, cost_fast = dapo_cost(dist, N), two_phase_cost(dist, n, N)
    gbs_fast = math.ceil(tbs / keep_n)
    gbs_fast_equal = round(tbs * N / (n + keep_n * (N - n)))
    results = [
        run("plain", "plain", tbs, args, dist, float(N), 1.0),
        run("dapo", "dapo", tbs, args, dist, cost_dapo, keep_N),
        run("fast (one call/step)", "fast", gbs_fast, args, dist, cost_fast, keep_n),
        run("fast (equal call size)", "fast", gbs_fast_equal, args, dist, cost_fast, keep_n),
    ]
    print_steps_table(results, N)
    print_steps_verdicts(results[1], results[2:])


def print_steps_table(results: list[Result], N: int) -> None:
    header = (
        f"{'mode':<24}{'gen_bs':>7}{'calls/step':>11}{'pred':>7}{'resp/step':>10}{'resp/call':>10}"
        f"{'resp/group':>11}{'cost model':>11}{'meas/model':>11}{'/oracle N':>10}{'keep':>7}{'sec':>6}"
    )
    print("\n" + header + "\n" + "-" * len(header))
    for r in results:
        c = r.counters
        calls = c["generation_calls"] / r.steps
        per_group = c["responses_per_training_group"]
        print(
            f"{r.label:<24}{r.gen_batch_size:>7}{calls:>11.3f}{r.predicted_calls_per_step:>7.3f}"
            f"{c['responses_generated'] / r.steps:>10.1f}{c['responses_generated'] / c['generation_calls']:>10.1f}"
            f"{per_group:>11.2f}{r.predicted_per_group:>11.2f}{per_group / r.predicted_per_group:>11.4f}"
            f"{per_group / N:>10.3f}{c['keep_rate']:>7.3f}{r.seconds:>6.1f}"
        )


def print_steps_verdicts(dapo: Result, fast: list[Result]) -> None:
    """Each fast row against dapo; the first (one call per step, the default) beside the targets."""
    dapo_calls = dapo.counters["generation_calls"] / dapo.steps
    print()
    for r in fast:
        c = r.counters
        model_err = abs(c["responses_per_training_group"] / r.predicted_per_group - 1)
        group_ratio = dapo.counters["responses_per_training_group"] / c["responses_per_training_group"]
        call_ratio = dapo_calls / (c["generation_calls"] / r.steps)
        checked = r is fast[0]
        print(
            f"{r.label}: |meas/model - 1| = {model_err:.2%}{_verdict(checked, MODEL_ERR_TARGET, 100 * model_err)}; "
            f"dapo/fast responses per group = {group_ratio:.3f}x{_verdict(checked, GROUP_RATIO_TARGET, group_ratio)}; "
            f"dapo/fast calls per step = {call_ratio:.3f}x{_verdict(checked, CALL_RATIO_TARGET, call_ratio)}"
        )


def _verdict(checked: bool, target: Target, value: float) -> str:
    return f" {target.verdict(value)}" if checked else ""


def print_cost_model(args, dist) -> None:
    N, n, tbs = args.N, args.n, args.train_batch_size
    print(f"histogram {args.histogram}")
    print(f"N={N} n={n} train_batch_size={tbs} steps={args.steps} workers={args.workers} seed={args.seed}")
    print(
        f"cost model (responses per training group): dapo {dapo_cost(dist, N):.2f}  "
        f"two-phase {two_phase_cost(dist, n, N):.2f}  oracle {oracle_cost(N):.0f}   "
        f"keep_N={dist.expected_keep(N):.4f} keep_n={dist.expected_keep(n):.4f}"
    )


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--N", type=int, default=16, help="responses per training group")
    parser.add_argument("--n", type=int, default=4, help="screening responses per fresh prompt (fast mode)")
    parser.add_argument("--train-batch-size", type=int, default=32, help="groups per training step")
    parser.add_argument("--steps", type=int, default=200, help="training steps per mode")
    parser.add_argument("--workers", type=int, default=2, help="agent-loop workers the fused batch is padded for")
    parser.add_argument("--histogram", default=str(DEFAULT_HISTOGRAM), help="pass-rate histogram JSON")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--part",
        choices=("all", "steps", "memory"),
        default="all",
        help="steps: the modes over fresh prompts; memory: the pass-rate memory over epochs",
    )
    parser.add_argument("--dataset-size", type=int, default=4096, help="prompts in the data set (memory part)")
    parser.add_argument("--epochs", type=int, default=2, help="epochs over the data set (memory part)")
    parser.add_argument(
        "--sweep",
        type=float,
        nargs="*",
        default=[0.2, 0.6, 0.8, 0.9],
        help="other skip_all_wrong values shown with fast + memory",
    )
    args = parser.parse_args()
    if args.dataset_size < 1 or args.epochs < 1:
        parser.error("--dataset-size and --epochs must be >= 1")
    return args


def main() -> None:
    args = parse_args()
    dist = load_pass_histogram(args.histogram)
    print_cost_model(args, dist)
    if args.part in ("all", "memory"):
        memory_part(args, dist)
    if args.part in ("all", "steps"):
        steps_part(args, dist)


if __name__ == "__main__":
    main()
