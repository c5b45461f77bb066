"""DAPO-Math-17k -> deduplicated verl train/test parquet files with the math_dataset.py prompt.

The published BytedTsinghua-SIA/DAPO-Math-17k has 1.79M rows: about 17.9k ids, each row repeated 100 times,
and 17,398 distinct problems. Columns: ``data_source`` ('math_dapo'), ``prompt`` (one user message whose content
wraps the problem in DAPO's "Solve the following math problem step by step. The last line of your response
should be of the form Answer: $Answer ..." instruction and ends with 'Remember to put your answer on its own
line after "Answer:".'), ``ability``, ``reward_model`` {ground_truth, style}, ``extra_info`` {index}.

This script strips DAPO's wrapper, deduplicates by normalised problem text (see ``dedup``), takes a seeded
1,000-problem test set (the rest, 16,398 on the real file, is train) and writes verl rows whose prompt is the
problem plus "Let's think step by step and output the final answer within \\boxed{}." (chat messages, or a raw
string with ``--use-chat-template off``).

    python -m data_preprocess.dapo17k --input BytedTsinghua-SIA/DAPO-Math-17k --out-dir ~/data/dapo17k \
        --test-size 1000 --seed 42 --use-chat-template on
"""

from __future__ import annotations

import argparse
import os
import re
import time
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from data_preprocess.dedup import DedupStats, dedup_problems, split_by_hash
from data_preprocess.sources import pick_column, read_source
from data_preprocess.verl_schema import parse_on_off, verl_table, write_table

DATA_SOURCE = "dapo17k"
_WRAPPER_HEAD = re.compile(
    r"^\s*Solve the following math problem step by step\..*?where \$Answer is the answer to the problem\.\s*", re.S
)
_WRAPPER_TAIL = re.compile(r"\s*Remember to put your answer on its own line after \"Answer:\"\.?\s*$")


def strip_dapo_wrapper(content: str) -> tuple[str, bool]:
    """(problem text, whether DAPO's instruction wrapper was found and removed)."""
    head = _WRAPPER_HEAD.match(content)
    tail = _WRAPPER_TAIL.search(content)
    if head is None and tail is None:
        return content.strip(), False
    start = head.end() if head else 0
    end = tail.start() if tail else len(content)
    return content[start:end].strip(), True


def first_message_content(prompt: pa.ChunkedArray) -> pa.ChunkedArray:
    """Content of the first chat message per row (null for null/empty prompts); strings pass through."""
    if pa.types.is_string(prompt.type) or pa.types.is_large_string(prompt.type):
        return prompt
    if not (pa.types.is_list(prompt.type) or pa.types.is_large_list(prompt.type)):
        raise TypeError(f"prompt column must be a list of messages or a string, got {prompt.type}")
    has_message = pc.fill_null(pc.greater(pc.list_value_length(prompt), 0), False)
    # list_element fails on empty lists: null them first, they are counted as malformed downstream.
    safe = pc.if_else(has_message, prompt, pa.scalar(None, prompt.type))
    first = pc.list_element(safe, 0)
    return pc.struct_field(first, "content")


@dataclass
class Dapo17kResult:
    train_path: str
    test_path: str
    n_train: int
    n_test: int
    stats: DedupStats


def preprocess_dapo17k(
    source: str,
    out_dir: str,
    *,
    test_size: int = 1000,
    seed: int = 42,
    use_chat_template: bool = True,
    hub_split: str = "train",
    data_source: str = DATA_SOURCE,
) -> Dapo17kResult:
    table = read_source(source, split=hub_split, columns=["prompt", "reward_model", "extra_info"])
    for col in ("prompt", "reward_model"):
        pick_column(table, (col,), col)
    content = first_message_content(table["prompt"])
    answers = pc.struct_field(table["reward_model"], "ground_truth")
    ids = None
    if "extra_info" in table.column_names and "index" in [f.name for f in table["extra_info"].type]:
        ids = pc.cast(pc.struct_field(table["extra_info"], "index"), pa.string())

    stats = DedupStats()
    stats.notes["problems without DAPO's instruction wrapper (kept as is)"] = 0

    def to_problem(text: str) -> str:
        problem, wrapped = strip_dapo_wrapper(text)
        if not wrapped:
            stats.notes["problems without DAPO's instruction wrapper (kept as is)"] += 1
        return problem

    rows, stats = dedup_problems(content, answers, ids, to_problem=to_problem, stats=stats)
    train, test = split_by_hash(rows, test_size, seed)
    paths = {}
    for split, split_rows in (("train", train), ("test", test)):
        table = verl_table(split_rows, data_source, split, use_chat_template)
        paths[split] = write_table(table, os.path.join(out_dir, f"{data_source}_{split}.parquet"))
    train_path, test_path = paths["train"], paths["test"]
    return Dapo17kResult(train_path, test_path, len(train), len(test), stats)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--input", required=True, help="local .parquet/.jsonl/.json/dir, or a hub dataset id")
    parser.add_argument("--hub-split", default="train", help="split to load when --input is a hub id")
    parser.add_argument("--out-dir", required=True)
    parser.add_argument("--test-size", type=int, default=1000, help="held-out problems (seed: 1000)")
    parser.add_argument("--seed", type=int, default=42, help="selects the test set; same seed, same split")
    parser.add_argument(
        "--use-chat-template",
        type=parse_on_off,
        default=True,
        help="on: chat messages (instruct models); off: raw string prompt (base models)",
    )
    parser.add_argument("--data-source", default=DATA_SOURCE, help="data_source value; names validation metrics")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    result = preprocess_dapo17k(
        args.input,
        os.path.expanduser(args.out_dir),
        test_size=args.test_size,
        seed=args.seed,
        use_chat_template=args.use_chat_template,
        hub_split=args.hub_split,
        data_source=args.data_source,
    )
    print(result.stats.report(args.data_source))
    print(f"[{args.data_source}] train: {result.n_train} -> {result.train_path}")
    print(f"[{args.data_source}] test: {result.n_test} -> {result.test_path}")
    print(f"[{args.data_source}] chat template: {'on' if args.use_chat_template else 'off'}")
    print(f"[{args.data_source}] took {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
