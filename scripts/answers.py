"""What a model writes on the held-out questions: greedy answers of checkpoints side by side, scored, with their shapes.

    .venv/bin/python scripts/answers.py released \\
        sdpo_s1_step8=outputs/campaign/composer_real_cpu/sdpo_s1/global_step_8/actor [--n 144] [--out answers.jsonl]

Each model is `released` (SmolLM2-135M-Instruct as released), NAME=DIR with DIR a Hugging Face directory (an exported
teacher, say), or NAME=DIR with DIR a verl actor checkpoint (its FSDP shards, exported to a temporary float32
directory first, as `python -m verl_ext.pretrained.export` does). The questions are the real preset's held-out set
(the arithmetic mix, verl_ext/config/real/smollm2_arithmetic.yaml), or `--data` any parquet of the same columns;
answers are greedy, up to the real preset's response length, graded by the project's reward
(verl_ext/reward/math_reward.py), as the trainers' greedy validation grades them.

Prints per model the accuracy and its most common answer shapes (every number replaced by N): a collapse to one
template ("The answer is \\boxed{N}." in 113 of 144) shows there where an accuracy alone does not. `--out` keeps every
answer (JSONL: model, question, ground truth, answer, score). HF transformers on CPU, fp32; no Ray, no vLLM.

    .venv/bin/python scripts/answers.py --dumped RUN/validation/heldout/*.jsonl

reads instead the answers a run dumped at its held-out evaluations (verl_ext/trainer/heldout.py: one file a step,
graded as the run graded them, its `acc`), no model loaded: whether an answer form takes over as a long run goes on.
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import sys
import tempfile
from pathlib import Path

from verl_ext.config.settings import YamlDefaults

REPO = Path(__file__).resolve().parents[1]
REAL = YamlDefaults(REPO / "verl_ext/config/real/smollm2_arithmetic.yaml")  # the held-out set's response length
NUMBER = re.compile(r"-?\d+(?:[./]\d+)?")


def say(line: str) -> None:
    print(f"[answers] {line}", file=sys.stderr, flush=True)


def shape(answer: str) -> str:
    """The answer with every number replaced by N: the template a model answers in."""
    return NUMBER.sub("N", answer.strip())


def model_dir(spec: str, scratch: Path) -> tuple[str, Path]:
    """(name, Hugging Face directory) of one `released` / NAME=DIR argument; a verl actor checkpoint is exported."""
    from verl_ext.pretrained.export import ExportError, model_directory

    try:
        return model_directory(spec, scratch, log=say)
    except ExportError as e:
        raise SystemExit(f"[answers] {e}") from None


def load_questions(data: Path | None, n: int) -> list[dict]:
    import pyarrow.parquet as pq

    if data is None:
        from verl_ext.mathgen.cache import ensure_task
        from verl_ext.mathgen.task import TaskSpec

        data = ensure_task(TaskSpec(mix="arithmetic")) / "val.parquet"
    rows = pq.read_table(data).to_pylist()[:n]
    return [
        {
            "messages": r["prompt"],
            "question": (r.get("extra_info") or {}).get("question") or r["prompt"][-1]["content"],
            "ground_truth": str(r["reward_model"]["ground_truth"]),
            "data_source": r.get("data_source", "mathgen"),
        }
        for r in rows
    ]


def greedy_answers(directory: Path, questions: list[dict], max_new: int, batch: int) -> list[str]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(directory)
    tok.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(directory, torch_dtype=torch.float32).eval()
    eos = tok.eos_token_id
    answers = []
    for i in range(0, len(questions), batch):
        chunk = questions[i : i + batch]
        contexts = [tok.apply_chat_template(q["messages"], add_generation_prompt=True, tokenize=False) for q in chunk]
        enc = tok(contexts, return_tensors="pt", padding=True, add_special_tokens=False)
        with torch.no_grad():
            out = model.generate(**enc, do_sample=False, max_new_tokens=max_new, pad_token_id=eos, eos_token_id=eos)
        answers += tok.batch_decode(out[:, enc["input_ids"].shape[1] :], skip_special_tokens=True)
    return answers


def dumped_rows(path: Path) -> list[dict]:
    """The answers of one held-out dump (<run>/validation/heldout/<step>.jsonl), as rows of one model named after the
    run and the step; a row is right when the run scored its accuracy 1 (`acc`, else its `score`)."""
    name = f"{path.parents[2].name} step {path.stem}" if len(path.parents) > 2 else path.stem
    rows = []
    for line in path.read_text().splitlines():
        d = json.loads(line)
        if "output" not in d:
            raise SystemExit(f"[answers] {path} is not a held-out dump: a line without `output`")
        right = d.get("acc", d.get("score"))
        rows.append({"model": name, "question": d.get("input", ""), "ground_truth": str(d.get("gts", "")),
                     "answer": d["output"], "score": float(right == 1.0)})  # fmt: skip
    return rows


def summarise(rows: list[dict], name: str, shapes: int) -> None:
    """One model's accuracy and its `shapes` most common answer shapes."""
    mine = [r for r in rows if r["model"] == name]
    right = sum(r["score"] == 1.0 for r in mine)
    print(f"{name}: accuracy {right / len(mine):.3f} ({right}/{len(mine)})")
    for form, count in collections.Counter(shape(r["answer"]) for r in mine).most_common(shapes):
        print(f"  {count:4d} x {form!r}")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("models", nargs="*", help="`released` or NAME=DIR (a Hugging Face directory or a verl actor)")
    p.add_argument("--dumped", nargs="+", type=Path, default=[], help="held-out dumps of a run instead of models")
    p.add_argument("--data", type=Path, help="a parquet of prompts (default: the real preset's held-out set)")
    p.add_argument("--n", type=int, default=None, help="the first N questions (default: all)")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--shapes", type=int, default=3, help="answer shapes shown per model")
    p.add_argument("--threads", type=int, default=2, help="torch threads (1 beside a running training job)")
    p.add_argument("--out", type=Path, help="JSONL with every answer")
    args = p.parse_args(argv)
    if bool(args.models) == bool(args.dumped):
        p.error("name models to answer, or --dumped files to read, not both")
    rows = [r for path in args.dumped for r in dumped_rows(path)]
    for name in dict.fromkeys(r["model"] for r in rows):
        summarise(rows, name, args.shapes)
    if args.models:
        rows = answer_questions(args)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text("".join(json.dumps(r) + "\n" for r in rows))
        print(f"every answer: {args.out}")
    return 0


def answer_questions(args: argparse.Namespace) -> list[dict]:
    """Each model's greedy answers to the questions, graded and summarised as they come."""
    import torch

    from verl_ext.reward.math_reward import compute_score

    torch.set_num_threads(args.threads)
    questions = load_questions(args.data, args.n if args.n is not None else 10**9)
    max_new = int(REAL.value("data.max_response_length"))
    rows = []
    with tempfile.TemporaryDirectory(prefix="answers-") as scratch:
        for spec in args.models:
            name, directory = model_dir(spec, Path(scratch))
            say(f"{name}: {len(questions)} questions, greedy, up to {max_new} tokens")
            for q, answer in zip(questions, greedy_answers(directory, questions, max_new, args.batch)):
                score = float(compute_score(q["data_source"], answer, q["ground_truth"])["score"])
                rows.append({"model": name, "question": q["question"], "ground_truth": q["ground_truth"],
                             "answer": answer, "score": score})  # fmt: skip
            summarise(rows, name, args.shapes)
    return rows


if __name__ == "__main__":
    sys.exit(main())
