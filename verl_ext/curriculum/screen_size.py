"""How many fresh prompts a fast DAPO generation call should screen: just enough to fill the next training batch.

A fixed ``data.gen_batch_size`` is right for one keep rate only. Above it, a call keeps more prompts than a step
trains and the surplus waits: in fast mode its screening responses are one policy update older per step it waits
(on the flat toy at N = 16, 32 screened per call for 8 trained kept ~19, and the trained rows were 1.6 updates old
on average, up to 7). Below it, a step needs a second call. The keep rate also drifts as the model learns.

Rule (``curriculum.auto_gen_batch``; docs/CURRICULUM.md). Before a call, with ``have`` = complete groups plus kept
prompts this call continues, the call should keep ``wanted = B - have mod B`` prompts (B = train_batch_size): what
completes the next batch not yet covered, so each call continues one batch and screens the next, as SPEED-RL's
fused call does. With keep rate ``p`` estimated over the last ``window`` calls, screen the smallest ``m`` such
that ``P(Binomial(m, p) >= wanted) >= confidence``, capped at ``data.gen_batch_size``. A shortfall costs a whole
extra generation call and delays the step; a surplus costs only a few rows one update older, so the recipe's
``confidence`` errs toward the surplus (above one half; its value, and ``window``'s, are set in fast_dapo.yaml only:
these functions take them as arguments). Before any screening (no estimate) the call screens the cap.

Assumptions: prompts are kept independently with one probability (a batch of mixed difficulty makes the binomial
a little too wide, which only adds surplus); the estimate pools the last ``window`` calls so it follows the drift.
"""

from __future__ import annotations

import math


def kept_prompts_wanted(groups_ready: int, prompts_awaiting: int, train_batch_size: int) -> int:
    """Kept prompts that complete the next training batch not yet covered by ready groups and awaiting prompts;
    always in [1, train_batch_size]."""
    if train_batch_size < 1 or groups_ready < 0 or prompts_awaiting < 0:
        raise ValueError(f"bad counts: ready {groups_ready}, awaiting {prompts_awaiting}, batch {train_batch_size}")
    return train_batch_size - (groups_ready + prompts_awaiting) % train_batch_size


def binomial_at_least(m: int, p: float, k: int) -> float:
    """P(Binomial(m, p) >= k), summed in log space (exact for the small m of a screening call)."""
    if k <= 0:
        return 1.0
    if k > m or p <= 0.0:
        return 0.0
    if p >= 1.0:
        return 1.0
    below = sum(
        math.exp(
            math.lgamma(m + 1)
            - math.lgamma(j + 1)
            - math.lgamma(m - j + 1)
            + j * math.log(p)
            + (m - j) * math.log1p(-p)
        )
        for j in range(k)
    )
    return max(0.0, 1.0 - below)


def screening_size(wanted: int, keep_rate: float | None, cap: int, *, confidence: float) -> int:
    """Fresh prompts to screen so that at least ``wanted`` are kept with probability >= ``confidence``, at most
    ``cap``. ``keep_rate`` None or not a positive number (no screening yet, or nothing kept lately): ``cap``."""
    if cap < 1 or wanted < 1:
        raise ValueError(f"screening_size: need cap >= 1 and wanted >= 1, got cap {cap}, wanted {wanted}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"screening_size: confidence must be in (0, 1), got {confidence}")
    if keep_rate is None or not keep_rate > 0.0:
        return cap
    m = min(cap, wanted)  # a call cannot keep more prompts than it screens
    while m < cap and binomial_at_least(m, keep_rate, wanted) < confidence:
        m += 1
    return m


def recent_keep_rate(history: list[tuple[int, int]], window: int) -> float | None:
    """Kept / screened pooled over the last ``window`` calls that screened anything; None before the first."""
    recent = [(s, k) for s, k in history if s > 0][-window:]
    screened = sum(s for s, _ in recent)
    return sum(k for _, k in recent) / screened if screened else None
