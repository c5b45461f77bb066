"""The toy task for CPU runs: copy a digit from the prompt into `\\boxed{}`, with headroom for RL.

Two difficulty profiles share the task, the data and the reward and differ only in the warm-up
(`WARMUP_PROFILES`):

- ``flat`` (the demo's default): every digit starts with a mixed pass rate (0.6 for 0 down to 0.15 for 9).
- ``heavy_tail`` (where two-phase curriculum sampling should pay): digits 0-1 are right almost always, 2-4 sometimes
  (0.4, 0.2, 0.08) and 5-9 never: about half the prompts start all-wrong and a fifth all-right at 16 samples, the
  pass-rate shape reported for Qwen2.5-Math-1.5B on DAPO-Math-17k (docs/CURRICULUM.md). The difficulty shares its
  structure: every wrong answer is the same off-by-one shift, laid by one warm-up stage over one copy circuit that
  serves every digit, so RL that pushes the mixed digits from the shift to the copy can also lift the all-wrong
  ones (whether and how fast it does is measured, not assumed: docs/CURRICULUM.md).

Digits 0-9 are drawn uniformly, so the best constant answer passes about 1/10 of the prompts (exactly: the share of
the most frequent digit in the set, `constant_answer_baseline`). The asset build warms the random-init model up by
SFT in two stages: right answers only (the format and the copy), then the same prompts with a systematic mistake:
for digit d the shown answer is d with probability WARMUP_CORRECT_RATE[d] (0.6 for 0 down to 0.15 for 9) and the
off-by-one digit (d + 1) mod 10 otherwise. (One mixed stage alone left the tiny model answering one constant digit
in 300 steps: the copy is learned much faster from clean targets.) The
warmed-up model therefore samples the right answer for some prompts and the wrong one for others, with a pass rate
that differs by digit, and its greedy answer is often the off-by-one digit. RL has to learn, digit by digit, that
the copy and not the off-by-one answer is rewarded; greedy validation accuracy can only exceed the constant-answer
baseline by reading the prompt. The curriculum has real work: easy digits become all-correct, hard ones start
nearly all-wrong.
"""

from __future__ import annotations

import random
import re

from verl_ext.dataset.baselines import constant_answer_baseline  # noqa: F401  (re-exported: the task's baseline)

DATA_SOURCE = "toy_copy_digit"
NUM_DIGITS = 10
_TEMPLATES = [
    "Copy the digit {d}. Put the final answer within \\boxed{{}}.",
    "Repeat this number: {d}. Put the final answer within \\boxed{{}}.",
    "The digit is {d}; write it in \\boxed{{}}.",
]
# Share of warm-up answers that are right, per digit; the rest show the off-by-one digit (d + 1) mod 10.
WARMUP_PROFILES = {
    "flat": tuple(round(0.6 - 0.05 * d, 2) for d in range(NUM_DIGITS)),
    "heavy_tail": (1.0, 1.0, 0.4, 0.2, 0.08, 0.0, 0.0, 0.0, 0.0, 0.0),
}
WARMUP_CORRECT_RATE = WARMUP_PROFILES["flat"]
_BOXED = re.compile(r"\\boxed\{([^{}]*)\}")


def make_prompt(d: int, template: int) -> str:
    return _TEMPLATES[template % len(_TEMPLATES)].format(d=d)


def answer_text(d: int) -> str:
    # Bare: the tiny model learns the copy within the warm-up budget with this form, not with a longer sentence.
    return f"\\boxed{{{d}}}"


def tokenizer_corpus(seed: int) -> list[str]:
    from verl_ext.toy.tokenizer import CHAT_TEMPLATE  # noqa: F401  (the template's pieces are in the prompts below)

    rng = random.Random(seed)
    lines = []
    # Enough task lines that the merges " 0".." 9" are learned: the prompt's digit is then a different token from
    # the answer's digit, a mapping the tiny model learns in the warm-up; with both the same token it did not.
    for _ in range(2000):
        d = rng.randrange(NUM_DIGITS)
        lines.append("<|im_start|>user\n" + make_prompt(d, rng.randrange(3)) + "<|im_end|>\n<|im_start|>assistant\n")
        lines.append(answer_text(d) + "<|im_end|>")
    # Words a reasoning model writes, so planning-token detection has something realistic to find.
    lines += [
        "wait let me think. let me check that. on second thought, let me verify: is this right? double check.",
        "try another approach: go back and start over. that's not right, that doesn't work. another way to see it,",
        "or we could ask what if we add them. notice that the key is the key insight. so the answer is 42.",
        "first compute the sum, then divide by two, the result is a fraction \\frac{1}{2} = 0.5 and x^2 + y^2.",
    ] * 20
    return lines


def warmup_examples(seed: int, size: int = 4000, mistakes: bool = True, profile: str = "flat") -> list[tuple[str, str]]:
    """(prompt, shown answer) pairs. mistakes=False: always the right digit (the first warm-up stage, which teaches
    the format and the copy); True: the right digit with WARMUP_PROFILES[profile][d], else the off-by-one digit."""
    if profile not in WARMUP_PROFILES:
        raise ValueError(f"unknown toy difficulty profile {profile!r}: choose one of {sorted(WARMUP_PROFILES)}")
    rates = WARMUP_PROFILES[profile]
    rng = random.Random(seed + (17 if mistakes else 29))
    out = []
    for _ in range(size):
        d = rng.randrange(NUM_DIGITS)
        shown = d if not mistakes or rng.random() < rates[d] else (d + 1) % NUM_DIGITS
        out.append((make_prompt(d, rng.randrange(3)), answer_text(shown)))
    return out


def write_dataset(path, size: int, seed: int, split: str) -> None:
    import pandas as pd

    rng = random.Random(seed)
    rows = []
    for i in range(size):
        d = rng.randrange(NUM_DIGITS)
        rows.append(
            {
                "data_source": DATA_SOURCE,
                "prompt": [{"role": "user", "content": make_prompt(d, rng.randrange(3))}],
                "ability": "copy",
                "reward_model": {"style": "rule", "ground_truth": str(d)},
                "extra_info": {"split": split, "index": i},
            }
        )
    pd.DataFrame(rows).to_parquet(path)


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs) -> dict:
    """verl custom reward: 1.0 iff the last \\boxed{} holds the ground truth. `acc` is the curriculum's filter
    metric."""
    found = _BOXED.findall(solution_str or "")
    pred = found[-1].strip() if found else ""
    acc = float(pred == str(ground_truth).strip())
    return {"score": acc, "acc": acc}


if __name__ == "__main__":
    import argparse

    p = argparse.ArgumentParser(description="Print the best constant answer of a toy data set and its accuracy.")
    p.add_argument("parquet")
    answer, acc = constant_answer_baseline(p.parse_args().parquet)
    print(f"best constant answer {answer!r}: accuracy {acc:.4f}")
