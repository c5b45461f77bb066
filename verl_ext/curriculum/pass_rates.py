"""What a pass-rate probe measures and what it predicts (pure: no Ray, no I/O).

A probe samples k responses for each prompt of a data set and counts the correct ones, c_i of k for prompt i.
From those counts:

- the pass@k histogram in the bins of the SPEED-RL experiment log ("Initial Test to Dataset"): ``zeros`` (c = 0),
  ``ones`` (c = k), and ``a-b`` for an empirical pass rate c/k in [a, b) (``0.9-1.0`` ends below 1);
- the chance that j responses of prompt i are mixed (not all equal), estimated without bias for j <= k by drawing
  the j responses without replacement from the probe's k (hypergeometric):

      keep_j(i) = 1 - C(c_i, j)/C(k, j) - C(k - c_i, j)/C(k, j)

  and by the plug-in 1 - p^j - (1-p)^j with p = c_i/k for j > k (biased: prefer k >= N);
- pass@j, the chance that at least one of j responses is right, estimated without bias for j <= k the same way
  (Chen et al. 2021, arXiv 2107.03374, eq. 1): ``pass@j(i) = 1 - C(k - c_i, j)/C(k, j)``;
- the generation cost of each sampling mode, for N responses per training group, n screening responses (fast),
  B training prompts per step and G fresh prompts per generation call (docs/ALGORITHMS.md section 5):

      plain: N B responses and 1 call per step; keep_N of its groups are informative (non-zero GRPO advantage)
      dapo : N / keep_N responses per training group; B / (G keep_N) calls per step
      fast : n / keep_n + (N - n) per training group; B / (G keep_n) calls per step (each call also carries the
             previous call's continuations)

  and, since plain trains on uniform groups too, each mode's responses per *informative* training group (plain:
  N / keep_N, the same as dapo; dapo and fast: their cost per group). The ratios fast/dapo and fast/plain of that
  cost are the arithmetic part of the saving; training on full batches of informative groups adds more on top.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

BINS = ["zeros", "ones"] + [f"{i / 10:.1f}-{(i + 1) / 10:.1f}" for i in range(10)]


def pass_histogram(correct: np.ndarray, k: int) -> dict[str, float]:
    """Share of prompts per bin of ``BINS`` (masses sum to 1) from correct counts out of k."""
    c = _counts(correct, k)
    hist = dict.fromkeys(BINS, 0.0)
    hist["zeros"] = float(np.mean(c == 0))
    hist["ones"] = float(np.mean(c == k))
    # [a, b): the decile of a rate in (0, 1), on integers so that 3 of 10 lands in 0.3-0.4 (3/10*10 may be 2.999..)
    decile = (10 * c[(c > 0) & (c < k)]) // k
    for i in range(10):
        hist[BINS[2 + i]] = float(np.sum(decile == i) / len(c))
    return hist


def keep_probability(correct: np.ndarray, k: int, j: int) -> np.ndarray:
    """Per prompt, the probability that j responses are not all equal (module docstring): unbiased for j <= k."""
    c = _counts(correct, k)
    if j < 1:
        raise ValueError(f"keep_probability needs j >= 1, got {j}")
    if j <= k:
        total = math.comb(k, j)
        all_right = np.array([math.comb(int(x), j) for x in c], dtype=np.float64) / total
        all_wrong = np.array([math.comb(int(k - x), j) for x in c], dtype=np.float64) / total
        return 1.0 - all_right - all_wrong
    p = c / k
    return 1.0 - p**j - (1.0 - p) ** j


def pass_at(correct: np.ndarray, k: int, j: int) -> np.ndarray:
    """Per prompt, the unbiased estimate of pass@j from c right of k responses (module docstring), for 1 <= j <= k."""
    c = _counts(correct, k)
    if not 1 <= j <= k:
        raise ValueError(f"pass@j needs 1 <= j <= k={k}, got j={j}")
    total = math.comb(k, j)
    return 1.0 - np.array([math.comb(int(k - x), j) for x in c], dtype=np.float64) / total


def pass_at_grid(k: int) -> list[int]:
    """The j of pass@j reported for k responses a prompt: 1, 2, 4, ... up to k (k itself included)."""
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    grid = [2**i for i in range(k.bit_length()) if 2**i <= k]
    return grid if grid[-1] == k else [*grid, k]


@dataclass(frozen=True)
class ModeCost:
    """One sampling mode's predicted generation cost (per training step and per informative training group)."""

    keep_rate: float  # share of screened (fast) or sampled (dapo/plain) prompts whose group is mixed
    responses_per_step: float
    calls_per_step: float
    responses_per_informative_group: float


@dataclass(frozen=True)
class Prediction:
    N: int
    n: int
    train_batch_size: int
    gen_batch_size: int
    plain: ModeCost
    dapo: ModeCost
    fast: ModeCost
    fast_vs_dapo: float  # responses per informative group, fast / dapo
    fast_vs_plain: float  # responses per informative group, fast / plain
    best_n: int  # the screening size that minimises fast's cost per group (2 <= n < N)
    best_n_fast_vs_dapo: float

    def as_dict(self) -> dict:
        return asdict(self)


def predict_costs(
    correct: np.ndarray, k: int, N: int, n: int, train_batch_size: int, gen_batch_size: int
) -> Prediction:
    """The cost model on the probe's per-prompt counts (module docstring)."""
    if not 2 <= n < N:
        raise ValueError(f"fast sampling needs 2 <= n < N, got n={n}, N={N}")
    if train_batch_size < 1 or gen_batch_size < 1:
        raise ValueError(f"batch sizes must be >= 1, got train {train_batch_size}, gen {gen_batch_size}")
    B, G = train_batch_size, gen_batch_size
    keep_N = float(np.mean(keep_probability(correct, k, N)))

    def fast_cost(m: int) -> tuple[float, float]:
        keep_m = float(np.mean(keep_probability(correct, k, m)))
        return keep_m, (m / keep_m + (N - m)) if keep_m > 0 else math.inf

    keep_n, fast_group = fast_cost(n)
    dapo_group = N / keep_N if keep_N > 0 else math.inf
    plain = ModeCost(keep_N, float(N * B), 1.0, dapo_group)
    dapo = ModeCost(keep_N, dapo_group * B, _calls(B, G, keep_N), dapo_group)
    fast = ModeCost(keep_n, fast_group * B, _calls(B, G, keep_n), fast_group)
    costs = {m: fast_cost(m)[1] for m in range(2, N)}
    best = min(costs, key=lambda m: (costs[m], m))
    return Prediction(
        N=N,
        n=n,
        train_batch_size=B,
        gen_batch_size=G,
        plain=plain,
        dapo=dapo,
        fast=fast,
        fast_vs_dapo=_ratio(fast_group, dapo_group),
        fast_vs_plain=_ratio(fast_group, plain.responses_per_informative_group),
        best_n=best,
        best_n_fast_vs_dapo=_ratio(costs[best], dapo_group),
    )


def _calls(B: int, G: int, keep: float) -> float:
    return B / (G * keep) if keep > 0 else math.inf


def _ratio(a: float, b: float) -> float:
    return a / b if math.isfinite(a) and math.isfinite(b) and b > 0 else math.nan


def _counts(correct: np.ndarray, k: int) -> np.ndarray:
    c = np.asarray(correct, dtype=np.int64)
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    if c.ndim != 1 or len(c) == 0:
        raise ValueError("correct counts: a non-empty 1-d array, one count per prompt")
    if np.any(c < 0) or np.any(c > k):
        raise ValueError(f"correct counts must lie in [0, k={k}]")
    return c
