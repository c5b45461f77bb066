"""The toy task for CPU runs: copy a digit from the prompt into `\\boxed{}`.

A random-init model cannot do it; the asset build warms the model up on the answer format with (mostly) random
digits drawn uniformly, so it starts near the 1/num_digits pass rate of a format-only guess. The RL data draws the
digits from a skewed distribution (DIGIT_WEIGHTS): a policy first gains by shifting its answers toward the frequent
digits (learnable within a few dozen CPU steps), and further only by actually copying. Pass rates therefore differ
across prompts and change as training goes, which gives the curriculum real work.
"""

from __future__ import annotations

import random
import re

DATA_SOURCE = "toy_copy_digit"
_TEMPLATES = [
    "Copy the digit {d}. Put the final answer within \\boxed{{}}.",
    "Repeat this number: {d}. Put the final answer within \\boxed{{}}.",
    "The digit is {d}; write it in \\boxed{{}}.",
]
DIGIT_WEIGHTS = (0.5, 0.2, 0.15, 0.1, 0.05)  # for digits 0..4; longer digit ranges get the last weight
_BOXED = re.compile(r"\\boxed\{([^{}]*)\}")


def make_prompt(d: int, template: int) -> str:
    return _TEMPLATES[template % len(_TEMPLATES)].format(d=d)


def answer_text(d: int) -> str:
    return f"The answer is \\boxed{{{d}}}"


def tokenizer_corpus(num_digits: int, seed: int) -> list[str]:
    from verl_ext.toy.tokenizer import CHAT_TEMPLATE  # noqa: F401  (the template's pieces are in the prompts below)

    rng = random.Random(seed)
    lines = []
    for _ in range(400):
        d = rng.randrange(10)
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


def warmup_examples(spec) -> list[tuple[str, str]]:
    rng = random.Random(spec.seed + 17)
    out = []
    for _ in range(2000):
        d = rng.randrange(spec.num_digits)
        shown = d if rng.random() < spec.warmup_correct_frac else rng.randrange(spec.num_digits)
        out.append((make_prompt(d, rng.randrange(3)), answer_text(shown)))
    return out


def write_dataset(path, size: int, num_digits: int, seed: int, split: str) -> None:
    import pandas as pd

    rng = random.Random(seed)
    weights = [DIGIT_WEIGHTS[min(i, len(DIGIT_WEIGHTS) - 1)] for i in range(num_digits)]
    rows = []
    for i in range(size):
        d = rng.choices(range(num_digits), weights=weights)[0]
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
    """verl custom reward: 1.0 iff the last \\boxed{} holds the ground truth. `acc` is the curriculum's filter metric."""
    found = _BOXED.findall(solution_str or "")
    pred = found[-1].strip() if found else ""
    acc = float(pred == str(ground_truth).strip())
    return {"score": acc, "acc": acc}
