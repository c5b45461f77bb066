"""Benchmark: DAPO-Math-17k preprocessing on a full-size synthetic file, and math reward throughput.

    .venv/bin/python scripts/bench_data.py                 # everything
    .venv/bin/python scripts/bench_data.py --skip-preprocess --responses 1000

1. Preprocessing (goal: under 60 s on this machine): writes a 1,791,700-row file shaped like the real one
   (``data_preprocess.fixtures.make_dapo17k(full_size=True)``; generation is timed separately), then runs
   ``preprocess_dapo17k`` on it (dedup to 17,398 problems, 1,000-problem test split).
2. Reward (goal: >= 1,000 responses/s on one core, time limit in force): the process and every child it starts
   are pinned to CPU 0. A realistic mix (see ``realistic_mix``) is scored by ``verl_ext.reward.math_reward`` and,
   on the same inputs, by verl's own ``verl.utils.reward_score.math_verify.compute_score``; both are warmed up
   first (pool start-up excluded). Printed side by side, with the ratio and the verdict agreement.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time

from benchlib import Target

PREPROCESS_TARGET = Target("<", 60, " s")  # the full-size file's preprocessing
REWARD_TARGET = Target(">=", 1000, " responses/s")  # on one core, the time limit in force

_SENTENCES = [
    "First, note that the expression can be rewritten as $(x+{a})^2 - {b}$.",
    "Substituting $n = {a}$ gives ${b}$, which we keep for later.",
    "By the AM-GM inequality, $\\frac{{a+b}}{{2}} \\ge \\sqrt{{ab}}$, with equality when $a = b$.",
    "So the number of valid pairs is $\\binom{{{a}}}{{2}} = {b}$.",
    "We check the case $k = {a}$ separately: the remainder modulo ${b}$ is ${a}$.",
    "Hence the area is $\\frac{{1}}{{2}} \\cdot {a} \\cdot {b}$, and we simplify.",
    "Wait, let me recompute: ${a} \\times {b} = {c}$.",
    "Therefore, combining the two cases, we obtain the total.",
]

# MATH-500-like answers with an equivalent spelling that only math_verify recognises, and a wrong one.
_LATEX_ANSWERS = [
    ("\\frac{\\sqrt{3}}{2}", "\\dfrac{\\sqrt3}{2}", "\\frac{\\sqrt{2}}{2}"),
    ("2\\sqrt{2}", "\\sqrt{8}", "2\\sqrt{3}"),
    ("[1,2)", "[1, 2)", "(1,2]"),
    ("\\{1,2,3\\}", "\\{3,2,1\\}", "\\{1,2\\}"),
    ("x^2+7x+10", "(x+5)(x+2)", "(x+5)(x+3)"),
    ("6-5i", "6 - 5i", "6+5i"),
    ("\\left( 3, \\frac{\\pi}{2} \\right)", "(3,\\frac{\\pi}{2})", "(3,\\pi)"),
    ("2\\pi", "\\pi \\cdot 2", "\\pi"),
]


def _reasoning(rng: random.Random, chars: int) -> str:
    parts, total = [], 0
    while total < chars:
        s = rng.choice(_SENTENCES).format(a=rng.randint(2, 99), b=rng.randint(2, 999), c=rng.randint(2, 9999))
        parts.append(s)
        total += len(s) + 1
    return " ".join(parts)


def realistic_mix(n: int, seed: int = 0, group: int = 16) -> list[tuple[str, str]]:
    """(response, ground truth) pairs in groups of ``group`` samples per prompt, like one RL generation batch.

    80% of prompts have DAPO-style integer answers, 20% MATH-500-style LaTeX answers. Per sample: integer
    prompts 35% exact boxed answer, 5% reformatted (``42.0``, ``\\text{42}``, units), 45% wrong integer (from 3
    per-prompt wrong values: models repeat mistakes), 5% wrong symbolic answer, 10% no box (truncated);
    LaTeX prompts 20% exact, 40% equivalent respelling, 30% wrong, 10% no box. Responses have 1,500-4,000
    characters of reasoning before the answer.
    """
    rng = random.Random(seed)
    out: list[tuple[str, str]] = []
    while len(out) < n:
        if rng.random() < 0.8:
            gold = str(rng.randint(0, 99999))
            wrong = [str(rng.randint(0, 99999)) for _ in range(3)]
            reformatted = [f"{gold}.0", f"\\text{{{gold}}}", f"{gold} \\text{{ cm}}"]
            symbolic = [f"\\frac{{{rng.randint(1, 50)}}}{{{rng.randint(51, 99)}}}", f"\\sqrt{{{rng.randint(2, 50)}}}"]
            choices = [([gold], 0.35), (reformatted, 0.05), (wrong, 0.45), (symbolic, 0.05), ([None], 0.10)]
        else:
            gold, equivalent, wrong_latex = rng.choice(_LATEX_ANSWERS)
            choices = [([gold], 0.2), ([equivalent], 0.4), ([wrong_latex], 0.3), ([None], 0.1)]
        for _ in range(group):
            r, acc = rng.random(), 0.0
            for options, p in choices:  # noqa: B007  (the option picked is used after the loop)
                acc += p
                if r < acc:
                    break
            answer = rng.choice(options)
            body = _reasoning(rng, rng.randint(1500, 4000))
            tail = f"\n\nThe final answer is $\\boxed{{{answer}}}$." if answer is not None else " and so"
            out.append((body + tail, gold))
    return out[:n]


def bench_preprocess(tmpdir: str) -> None:
    from data_preprocess.dapo17k import preprocess_dapo17k
    from data_preprocess.fixtures import make_dapo17k

    path = os.path.join(tmpdir, "dapo-math-17k-full.parquet")
    start = time.perf_counter()
    facts = make_dapo17k(path, full_size=True)
    gen_s = time.perf_counter() - start
    size_mb = os.path.getsize(path) / 2**20
    print(f"[preprocess] generated {facts.rows:,} rows ({facts.ids:,} ids, {size_mb:.0f} MB parquet) in {gen_s:.1f} s")
    start = time.perf_counter()
    result = preprocess_dapo17k(path, os.path.join(tmpdir, "out"), test_size=1000, seed=42)
    took = time.perf_counter() - start
    print(result.stats.report("preprocess"))
    print(f"[preprocess] train {result.n_train:,} / test {result.n_test:,}")
    print(
        f"[preprocess] {facts.rows:,} rows in {took:.1f} s = {facts.rows / took:,.0f} rows/s "
        f"{PREPROCESS_TARGET.verdict(took)}"
    )


def _time_scorer(name: str, fn, pairs) -> tuple[float, list[float]]:
    start, cpu0 = time.perf_counter(), time.process_time()
    scores = [fn(resp, gold) for resp, gold in pairs]
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu0
    rate = len(pairs) / wall
    print(
        f"[reward] {name:<34} {len(pairs):>6} responses {wall:7.2f} s  {rate:9,.0f} /s  (this process cpu {cpu:.2f} s)"
    )
    return rate, scores


def bench_reward(n: int, timeout_s: float) -> None:
    os.sched_setaffinity(0, {0})  # before any worker starts: every child inherits the single core
    from verl_ext.reward.math_reward import compute_score
    from verl_ext.reward.verify_pool import shared_pool

    pairs = realistic_mix(n)
    print(f"[reward] pinned to CPU {sorted(os.sched_getaffinity(0))}; {n} responses; time limit {timeout_s} s")

    def ours(resp, gold, **kw):
        return compute_score("bench", resp, gold, timeout_s=timeout_s, **kw)["score"]

    ours(pairs[0][0], "\\sqrt{2}")  # start and warm the worker (and its standby) outside the timing
    ours(pairs[0][0], "\\sqrt{2}", cache_size=1)
    time.sleep(5)  # let the standby child finish starting: it shares the one core
    rate_ours, s_ours = _time_scorer("verl_ext math_reward", ours, pairs)
    rate_nocache, _ = _time_scorer("verl_ext math_reward (no cache)", lambda r, g: ours(r, g, cache_size=1), pairs)

    from verl.utils.reward_score import math_verify as verl_math_verify

    verl_math_verify.compute_score(pairs[0][0], pairs[0][1])  # spawns and warms verl's 4-process pool
    rate_verl, s_verl = _time_scorer("verl math_verify.compute_score", verl_math_verify.compute_score, pairs)

    agree = sum(a == b for a, b in zip(s_ours, s_verl)) / len(pairs)
    print(
        f"[reward] ratio ours/verl: {rate_ours / rate_verl:.1f}x (no cache: {rate_nocache / rate_verl:.1f}x); "
        f"verdict agreement {agree:.1%}; mean score ours {sum(s_ours) / n:.3f}, verl {sum(s_verl) / n:.3f}"
    )
    print(f"[reward] on one core: {rate_ours:,.0f} responses/s {REWARD_TARGET.verdict(rate_ours)}")
    print(f"[reward] no cache:    {rate_nocache:,.0f} responses/s {REWARD_TARGET.verdict(rate_nocache)}")

    start = time.perf_counter()
    result = compute_score("bench", "\\boxed{9^{9^{9^{9}}}}", "5", timeout_s=timeout_s)
    print(
        f"[reward] pathological answer: {time.perf_counter() - start:.2f} s, result {result}, "
        f"worker kills so far {shared_pool(1, timeout_s).kills}"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--responses", type=int, default=3000)
    parser.add_argument("--timeout-s", type=float, default=3.0)
    parser.add_argument("--skip-preprocess", action="store_true")
    parser.add_argument("--skip-reward", action="store_true")
    args = parser.parse_args(argv)
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cpus, load average {os.getloadavg()}")
    if not args.skip_preprocess:
        with tempfile.TemporaryDirectory() as tmpdir:
            bench_preprocess(tmpdir)
    if not args.skip_reward:
        bench_reward(args.responses, args.timeout_s)


if __name__ == "__main__":
    main()
