"""Slow, plainly written reference forms of every formula (ALGORITHMS.md sections 1-4): Python loops over groups,
responses and tokens, floats in double precision. The package's vectorised estimators are checked against these
(tests/advantage/) and scripts/bench_advantages.py times them, so they live in the library where both import them.
Nothing here imports verl_ext.advantage's math: a slip in the fast code cannot be repeated in its reference.
"""

from __future__ import annotations

import math
import re

U_CAP = 50.0


def grpo(rewards: list[float], index: list) -> list[float]:
    out = []
    for i, r in enumerate(rewards):
        group = [rewards[j] for j in range(len(rewards)) if index[j] == index[i]]
        out.append(r - sum(group) / len(group))
    return out


def maxrl(rewards: list[float], index: list) -> list[float]:
    out = []
    for i, r in enumerate(rewards):
        group = [rewards[j] for j in range(len(rewards)) if index[j] == index[i]]
        mu = sum(group) / len(group)
        out.append(0.0 if mu <= 1e-6 else (r - mu) / (mu + 1e-6))
    return out


def uninformative(rewards: list[float], index: list) -> tuple[list[bool], int, int]:
    """(per response: its group is all-equal within 1e-6, n all-correct groups, n all-wrong groups)."""
    groups = {}
    for r, uid in zip(rewards, index):
        groups.setdefault(uid, []).append(r)
    flat = {uid: max(g) - min(g) <= 1e-6 for uid, g in groups.items()}
    correct = sum(1 for uid, g in groups.items() if flat[uid] and sum(g) / len(g) > 0.5)
    wrong = sum(1 for uid in groups if flat[uid]) - correct
    return [flat[uid] for uid in index], correct, wrong


def uncertainty(kind: str, logp: float, entropy: float | None) -> float:
    if kind == "surprisal":
        return min(-logp, U_CAP)
    if kind == "predictive_variance":
        p = math.exp(max(logp, -U_CAP))
        return p * (1.0 - p)
    if kind == "shannon_entropy":
        return min(entropy, U_CAP)
    raise ValueError(kind)


def sepa(u: list[float], plan: list[int], lam: float) -> list[float]:
    lam = max(0.0, min(1.0, lam))
    if lam == 0.0:
        return list(u)
    exec_vals = [x for x, p in zip(u, plan) if not p]
    if not exec_vals:
        return list(u)
    mu = sum(exec_vals) / len(exec_vals)
    return [x if p else lam * mu + (1.0 - lam) * x for x, p in zip(u, plan)]


def gtpo(advantage: float, u: list[float], beta: float) -> list[float]:
    if not u:
        return []
    mean_u = sum(u) / len(u)
    if beta == 0.0 or mean_u < 1e-7:
        return [advantage] * len(u)
    return [advantage * max(0.0, 1.0 + beta * (x / (mean_u + 1e-8) - 1.0)) for x in u]


def hicra(token_advs: list[float], plan: list[int], alpha: float) -> list[float]:
    return [a + alpha * abs(a) * p for a, p in zip(token_advs, plan)]


def pipeline(
    token_rewards: list[list[float]],
    mask: list[list[int]],
    index: list,
    *,
    advantage_mode: str = "maxrl",
    transform: str = "none",
    kind: str = "surprisal",
    logprobs: list[list[float]] | None = None,
    entropys: list[list[float]] | None = None,
    plan: list[list[int]] | None = None,
    beta: float = 0.1,
    alpha: float = 0.2,
    lam: float = 0.0,
) -> list[list[float]]:
    """Token advantages, one list of T floats per response (0 on padding)."""
    rewards = [sum(row) for row in token_rewards]
    episode = grpo(rewards, index) if advantage_mode == "grpo" else maxrl(rewards, index)
    flat, _, _ = uninformative(rewards, index)
    episode = [0.0 if f else a for a, f in zip(episode, flat)]
    out = []
    for i, row_mask in enumerate(mask):
        T = len(row_mask)
        positions = [t for t in range(T) if row_mask[t]]
        if transform == "none":
            values = [episode[i]] * len(positions)
        else:
            u = [uncertainty(kind, logprobs[i][t], entropys[i][t] if entropys else None) for t in positions]
            p = [plan[i][t] for t in positions] if plan is not None else [0] * len(positions)
            if transform == "gtpo_sepa":
                u = sepa(u, p, lam)
            values = gtpo(episode[i], u, beta)
            if transform == "gtpo_hicra":
                values = hicra(values, p, alpha)
        row = [0.0] * T
        for t, v in zip(positions, values):
            row[t] = v
        out.append(row)
    return out


def sepa_linear(step: int, steps: int, delay: int) -> float:
    s = step - delay
    return 0.0 if steps <= 0 or s <= 0 else min(s / steps, 1.0)


def planning_tokens(tokenizer, ids: list[int], mask: list[int], grams: list[str]) -> list[int]:
    """Planning flags of one row, straight from the rule: decode, one independent regex per gram searched at every
    character, token character spans from decoding prefixes."""
    valid = [t for t in range(len(ids)) if mask[t]]
    if not valid:
        return [0] * len(ids)
    n = valid[-1] + 1
    text = tokenizer.decode(ids[:n], skip_special_tokens=False)
    covered = [False] * len(text)
    for gram in grams:
        words = []
        for word in gram.split():
            pieces = []
            for ch in word:
                if ch == "'":
                    pieces.append("['\u2019]")
                elif ch.isascii() and ch.isalpha():
                    pieces.append("[" + ch.lower() + ch.upper() + "]")
                else:
                    pieces.append(re.escape(ch))
            words.append("".join(pieces))
        pattern = re.compile(r"\b" + r"\W+".join(words) + r"\b")
        for start in range(len(text)):
            m = pattern.match(text, start)
            if m:
                for k in range(m.start(), m.end()):
                    covered[k] = True
    flags = [0] * len(ids)
    for t in range(n):
        lo = len(tokenizer.decode(ids[:t], skip_special_tokens=False))
        hi = len(tokenizer.decode(ids[: t + 1], skip_special_tokens=False))
        if mask[t] and any(covered[lo:hi]):
            flags[t] = 1
    return flags
