"""Benchmark of the advantage estimators and the planning-token detector, measured side by side in one run.

Prints, on one batch (default 4096 responses x 2048 tokens, groups of 16, lengths uniform in [T/4, T]):
  1. each estimator's time as a ratio to verl's `grpo_vectorized` on the same batch (goal: <= 3x), called through
     verl's registry exactly as a trainer calls it, with and without the metrics dict;
  2. the vectorised form's speed-up over the per-token reference of verl_ext/advantage/reference.py, timed on a
     slice of the batch and extrapolated linearly to the whole batch (labelled as such);
  3. the planning detector's tokens/s on one thread (goal: >= 5M), on reasoning-like text tokenized by the
     project's tiny byte-level BPE tokenizer, pure ASCII and with a non-ASCII symbol in about half the rows.
Each figure with a goal is printed beside it with PASS or MISS. Rounds are interleaved (every contender once per
round) and the best round counts, which keeps the ratios meaningful on a shared machine. CPU time (process_time) is
reported; it includes page-fault time.

    .venv/bin/python scripts/bench_advantages.py                 # full size
    .venv/bin/python scripts/bench_advantages.py --responses 512 --tokens 1024 --rounds 3   # quick
"""

from __future__ import annotations

import argparse
import random
import time

import numpy as np
import torch
from benchlib import Target

from verl_ext.advantage import reference as ref
from verl_ext.advantage import register
from verl_ext.advantage.gram_match import DEFAULT_STRATEGIC_GRAMS
from verl_ext.advantage.planning import PlanningDetector
from verl_ext.advantage.token_text import token_byte_table


def make_batch(bs: int, T: int, group: int, seed: int = 0) -> dict:
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(max(T // 4, 1), T + 1, (bs,), generator=g)
    mask = (torch.arange(T)[None, :] < lengths[:, None]).long()  # int64, as verl's response_mask
    pass_rate = torch.rand(bs // group + 1, generator=g)[torch.arange(bs) // group]
    rewards = torch.zeros(bs, T)
    rewards[torch.arange(bs), lengths - 1] = (torch.rand(bs, generator=g) < pass_rate).float()
    # verl's balance step reorders rows, so groups are not contiguous
    uids = np.array([f"uid-{i // group}" for i in range(bs)], dtype=object)[np.random.default_rng(seed).permutation(bs)]
    return {
        "token_level_rewards": rewards,
        "response_mask": mask,
        "index": uids,
        "old_log_probs": -torch.empty(bs, T).exponential_(generator=g),
        "entropys": torch.empty(bs, T).exponential_(generator=g),
        "planning_mask": (torch.rand(bs, T, generator=g) < 0.03) & mask.bool(),
    }


ESTIMATOR_TARGET = Target("<=", 3, "x")  # an estimator's time against verl's grpo_vectorized
DETECTOR_TARGET = Target(">=", 5, " M tokens/s")  # the planning detector on one thread
BASELINE = "grpo_vectorized (verl)"
ALGO = {"norm_adv_by_std_in_grpo": False}
CONTENDERS = {
    # label: (registry name, config, uses token-level kwargs)
    BASELINE: ("grpo_vectorized", None, False),
    "maxrl": ("maxrl", ALGO, False),
    "gtpo": ("gtpo", ALGO, True),
    "gtpo_hicra": ("gtpo_hicra", ALGO, True),
    "gtpo_sepa": ("gtpo_sepa", ALGO, True),
    "gtpo_sepa shannon_entropy": ("gtpo_sepa", {**ALGO, "uncertainty_kind": "shannon_entropy"}, True),
    "composable grpo+gtpo_hicra": (
        "composable",
        {**ALGO, "advantage_mode": "grpo", "transform_mode": "gtpo_hicra"},
        True,
    ),
}


def call(name: str, config, token_level: bool, batch: dict, with_metrics: bool):
    from verl.trainer.ppo.core_algos import get_adv_estimator_fn

    fn = get_adv_estimator_fn(name)
    kwargs = {k: batch[k] for k in ("token_level_rewards", "response_mask", "index")}
    if token_level:
        kwargs.update(
            old_log_probs=batch["old_log_probs"],
            entropys=batch["entropys"],
            planning_mask=batch["planning_mask"],
            sepa_lambda=0.5,
            step=100,
        )
        if with_metrics:
            kwargs["metrics"] = {}
    if name == "grpo_vectorized":
        kwargs["norm_adv_by_std_in_grpo"] = True  # verl's default
    return fn(config=config, **kwargs)


def cpu_time(fn) -> float:
    t0 = time.process_time()
    fn()
    return time.process_time() - t0


def bench_estimators(batch: dict, rounds: int) -> dict[str, float]:
    jobs = {}
    for label, (name, config, token_level) in CONTENDERS.items():
        jobs[label] = (name, config, token_level, False)
        if token_level:
            jobs[label + " +metrics"] = (name, config, token_level, True)
    best = {label: float("inf") for label in jobs}
    for _ in range(rounds):
        for label, (name, config, token_level, metrics) in jobs.items():
            # the lambda is called right here, inside this iteration, so binding the loop variables late is safe
            best[label] = min(best[label], cpu_time(lambda: call(name, config, token_level, batch, metrics)))  # noqa: B023
    return best


def reference_speedup(batch: dict, n_ref: int, vectorised_seconds: float) -> tuple[float, float]:
    """(extrapolated reference seconds for the whole batch, speed-up) for gtpo_sepa with metrics off."""
    bs = batch["response_mask"].shape[0]
    rows = slice(0, n_ref)
    # the reference needs whole groups: give the slice its own uids (the time per response is what matters)
    index = [batch["index"][i] for i in range(n_ref)]
    args = dict(
        token_rewards=batch["token_level_rewards"][rows].tolist(),
        mask=batch["response_mask"][rows].tolist(),
        index=index,
        transform="gtpo_sepa",
        logprobs=batch["old_log_probs"][rows].tolist(),
        plan=batch["planning_mask"][rows].int().tolist(),
        lam=0.5,
    )
    seconds = cpu_time(lambda: ref.pipeline(**args))
    extrapolated = seconds * bs / n_ref
    return extrapolated, extrapolated / vectorised_seconds


def reasoning_text(n_sentences: int, non_ascii: float, seed: int = 0) -> str:
    rng = random.Random(seed)
    words = (
        "the a of to and is we so then compute sum value number answer because therefore first next equals "
        "total let me think x y z check result step case both terms side"
    ).split()
    symbols = ["3", "12", "+", "=", "(x + 1)", "\\frac{1}{2}", "x^2"]
    out = []
    for _ in range(n_sentences):
        sentence = [rng.choice(words + symbols) for _ in range(rng.randint(6, 16))]
        if rng.random() < 0.15:
            sentence.insert(0, rng.choice(DEFAULT_STRATEGIC_GRAMS).capitalize() + ",")
        if rng.random() < non_ascii:
            sentence.append(rng.choice(["≈ 3.14", "π", "→", "×"]))
        out.append(" ".join(sentence).capitalize() + ".")
    return " ".join(out)


def detector_rows(tokenizer, bs: int, T: int, non_ascii: float) -> tuple[torch.Tensor, float]:
    text = reasoning_text(40000, non_ascii)
    ids = np.array(tokenizer(text)["input_ids"], dtype=np.int64)
    starts = np.random.default_rng(1).integers(0, len(ids) - T, bs)
    return torch.from_numpy(np.stack([ids[s : s + T] for s in starts])), len(text.encode()) / len(ids)


def bench_detector(bs: int, T: int, rounds: int) -> None:
    from transformers import AutoTokenizer

    from verl_ext.toy import ensure_tiny_assets

    tokenizer = AutoTokenizer.from_pretrained(ensure_tiny_assets().model_dir)
    t0 = time.perf_counter()
    detector = PlanningDetector(tokenizer)
    print(f"  detector construction (token table): {time.perf_counter() - t0:.3f} s")
    high = torch.tensor([any(b >= 0x80 for b in piece) for piece in token_byte_table(tokenizer)])
    for label, non_ascii in (("ASCII text", 0.0), ("text with some non-ASCII symbols", 0.013)):
        ids, bytes_per_token = detector_rows(tokenizer, bs, T, non_ascii)
        mask = torch.ones_like(ids)
        best = min(cpu_time(lambda: detector(ids, mask)) for _ in range(rounds))  # noqa: B023  (called at once)
        frac = float(detector(ids, mask).float().mean())
        rows_non_ascii = float(high[ids].any(dim=1).float().mean())
        rate = bs * T / best / 1e6
        print(
            f"  {label:34s} {rate:7.2f} M tokens/s {DETECTOR_TARGET.verdict(rate)}  ({bs}x{T}, "
            f"{bytes_per_token:.2f} bytes/token, {rows_non_ascii:.0%} rows non-ASCII, "
            f"planning-token fraction {frac:.3f})"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--responses", type=int, default=4096)
    parser.add_argument("--tokens", type=int, default=2048)
    parser.add_argument("--group-size", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--ref-responses", type=int, default=32, help="slice the per-token reference is timed on")
    parser.add_argument("--threads", type=int, default=1, help="torch threads for everything (1 = one core)")
    parser.add_argument("--detector-responses", type=int, default=None, help="default: --responses")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    register()

    bs, T = args.responses, args.tokens
    print(
        f"batch {bs} responses x {T} tokens, groups of {args.group_size}, torch threads {args.threads}, "
        f"best of {args.rounds} interleaved rounds (CPU seconds)"
    )
    batch = make_batch(bs, T, args.group_size)
    best = bench_estimators(batch, args.rounds)
    base = best[BASELINE]
    print("\n1. estimators vs verl grpo_vectorized")
    for label, seconds in best.items():
        verdict = "" if label == BASELINE else ESTIMATOR_TARGET.verdict(seconds / base)
        print(f"  {label:42s} {seconds * 1e3:8.1f} ms   {seconds / base:5.2f}x {verdict}".rstrip())

    n_ref = min(args.ref_responses, bs)
    extrapolated, speedup = reference_speedup(batch, n_ref, best["gtpo_sepa"])
    print(
        f"\n2. gtpo_sepa, per-token reference (extrapolated from {n_ref} responses to {bs}): {extrapolated:.1f} s; "
        f"vectorised {best['gtpo_sepa']:.3f} s; speed-up {speedup:,.0f}x (extrapolated)"
    )

    print("\n3. planning detector, one thread")
    bench_detector(args.detector_responses or bs, T, args.rounds)


if __name__ == "__main__":
    main()
