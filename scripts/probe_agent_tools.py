"""Probe: does SmolLM2-135M-Instruct, as released, call a calculator tool on the project's arithmetic, and in which
tool-call format? HF transformers only (no vLLM, no Ray, no gateway process); measured for docs/AGENT_REAL_MODEL.md.

The held-out questions of the real preset's task (``mathgen`` mix ``arithmetic``, validation split, the first
--questions rows) are asked with a calculator tool rendered into the prompt in each tool-call format (``FORMATS``:
agent_tool_formats.py), with and without one worked tool-call exchange before the question, greedy and at
--temperature (--samples samples a question). Per reply: does the format's lenient reading find a call
(``parse_reply``), does the gateway's own codec read it (`ToolCallCodec` with the format's parser: verl's ``hermes``,
the project's ``line``), does the call evaluate to the gold answer, and, with the calculator's result appended as the
template's tool turn (the reply cut after its first call), does the model then box the right answer (the project's
math reward). ``oracle``: the same second turn after a correct call (the question's own expression) and its correct
result. The example agents' requests and their token costs are `probe_agent_frameworks.py`'s.

    python scripts/probe_agent_tools.py --out outputs/probe_agent_tools.json [--tool calc] [--formats line]
    python scripts/probe_agent_tools.py --resummarize A.json B.json --out merged.json   # recount, no model

Costs (2 cores, shared): ~1 s per batch step of 30-90 rows; a format's four conditions take 5-40 min.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
import time
from fractions import Fraction
from pathlib import Path

from agent_tool_formats import (
    DEMO_EXCHANGES,
    FORMATS,
    TOOLS,
    after_call,
    call_message,
    conversation,
    parse_reply,
    render,
    split_format,
    tool_schema,
)

from verl_ext.agent.gateway.toolcall import ToolCallCodec
from verl_ext.mathgen.calculator import calculate, same_number
from verl_ext.mathgen.prompts import INSTRUCTION

# ---------------------------------------------------------------------------------------------- the oracle's call
_N = r"(-?\d+(?:\.\d+)?)"
_WORDS = [  # the generator's phrasings (mathematics_dataset 1.0.1 modules/arithmetic.py) -> an expression
    (rf"^(?:Add|Sum|Total of|Put together|Add together) {_N} and {_N}\.?$", "{0} + {1}"),
    (rf"^(?:What is )?{_N} plus {_N}\??$", "{0} + {1}"),
    (rf"^(?:What is )?{_N} (?:minus|take away) {_N}\??$", "{0} - {1}"),
    (rf"^What is {_N} less than {_N}\?$", "{1} - {0}"),
    (rf"^Subtract {_N} from {_N}\.$", "{1} - {0}"),
    (rf"^(?:Multiply|Product of|What is the product of) {_N} and {_N}[.?]$", "{0} * {1}"),
    (rf"^(?:What is )?{_N} times {_N}\??$", "{0} * {1}"),
    (rf"^(?:Divide) {_N} by {_N}\.$", "{0} / {1}"),
    (rf"^(?:What is |Calculate )?{_N} divided by {_N}[.?]?$", "{0} / {1}"),
]


def question_expression(question: str, gold: str) -> str | None:
    """The question's own expression (None when the phrasing is not known or the expression does not give `gold`)."""
    q = question.removesuffix(INSTRUCTION).strip()
    m = re.match(rf"^What is the (?:distance|difference) between {_N} and {_N}\?$", q)
    expr = None
    if m:
        a, b = m.groups()
        expr = f"{a} - {b}" if Fraction(a) >= Fraction(b) else f"{b} - {a}"
    for pattern, form in [] if m else _WORDS:
        if m := re.match(pattern, q):
            expr = form.format(*m.groups())
            break
    if expr is None:
        m = re.match(r"^(?:What is the value of |What is |Evaluate |Calculate |Work out )?(.+?)[.?]?$", q)
        expr = m.group(1) if m else q
    try:
        return expr if same_number(calculate(expr), gold) else None
    except ValueError:
        return None


# ---------------------------------------------------------------------------------------------- generation
class Generator:
    def __init__(self, model_dir, threads: int, seed: int):
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        torch.set_num_threads(threads)
        torch.manual_seed(seed)
        self.torch, self.tokens = torch, 0
        self.tok = AutoTokenizer.from_pretrained(model_dir)
        self.tok.padding_side = "left"
        self.model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
        self.eos = self.tok.eos_token_id

    def generate(self, texts: list[str], n: int, temperature: float, max_new: int, batch: int) -> list[list[int]]:
        """n continuations per text (greedy when temperature is 0), each cut after its first <|im_end|>."""
        out: list[list[int]] = []
        for i in range(0, len(texts), batch):
            enc = self.tok(texts[i : i + batch], return_tensors="pt", padding=True, add_special_tokens=False)
            kw = {"do_sample": False} if temperature == 0 else {"do_sample": True, "temperature": temperature}
            with self.torch.no_grad():
                gen = self.model.generate(**enc, max_new_tokens=max_new, num_return_sequences=n, top_k=None,
                                          top_p=None, pad_token_id=self.eos, eos_token_id=self.eos, **kw)  # fmt: skip
            for row in gen[:, enc["input_ids"].shape[1] :].tolist():
                cut = row.index(self.eos) + 1 if self.eos in row else len(row)
                out.append(row[:cut])
                self.tokens += cut
            print(f"  generated {len(out)} rows ({self.tokens} tokens so far)", file=sys.stderr, flush=True)
        return out


def grade(reply: str, gold: str) -> dict:
    from verl_ext.reward.math_reward import compute_score

    r = compute_score("mathgen", reply, gold)
    return {"boxed": not r["no_answer"], "correct": r["score"] == 1.0, "pred": r.get("pred", "")}


def read_first_turn(q: int, text: str, read, fmt: str, tool: str, gold: str) -> tuple[dict, int | None]:
    """One first-turn reply: its first call read leniently and by the gateway's codec (`read`), and what the call
    evaluates to, or the reply's own grade when it makes none; with the end of that call in `text`."""
    expr, end, attempted = parse_reply(fmt, text, TOOLS[tool][0])
    row = {"q": q, "reply": text, "expr": expr, "attempted": attempted, "gateway_calls": len(read.tool_calls),
           "gateway_faults": dict(read.faults)}  # fmt: skip
    row["direct"] = grade(text, gold) if expr is None else None
    if expr is not None:
        try:
            row["result"] = calculate(expr)
            row["expr_ok"] = same_number(row["result"], gold)
        except ValueError as e:
            row["result"], row["expr_ok"] = f"error: {e}", False
    return row, end


def oracle_turn(gen: Generator, fmt: str, tool: str, convs, items, n: int, temperature: float, args) -> list[dict]:
    """A correct call (the question's own expression) and its correct result, then the model's answer, graded."""
    oracle_items = [(q, it) for q, it in enumerate(items) if it["expr"]]
    right = [[{"role": "assistant", "content": "", "tool_calls": [call_message(it["expr"], tool)]},
              {"role": "tool", "tool_call_id": "call_0", "content": it["gold"]}] for _, it in oracle_items]  # fmt: skip
    oracle_prompts = [render(gen.tok, fmt, convs[q] + r, tool) for (q, _), r in zip(oracle_items, right)]
    oracle = []
    for k, ids in enumerate(gen.generate(oracle_prompts, n, temperature, args.answer_max_new_tokens, args.batch_size)):
        text = gen.tok.decode(ids, skip_special_tokens=True)
        oracle.append({"q": oracle_items[k // n][0], "reply": text, **grade(text, oracle_items[k // n][1]["gold"])})
    return oracle


def run_condition(gen: Generator, name: str, demo: bool, decoding: str, items, args) -> dict:
    fmt, opening = split_format(name, TOOLS[args.tool][0])
    tok, tool = gen.tok, args.tool
    codec = ToolCallCodec(tok, FORMATS[fmt][1], "none")
    loop = asyncio.new_event_loop()
    temperature, n = (0.0, 1) if decoding == "greedy" else (args.temperature, args.samples)
    convs = [conversation(fmt, demo, it["question"], tool, args.exchange) for it in items]
    prompts = [render(tok, fmt, c, tool) for c in convs]
    t0 = time.perf_counter()
    first = gen.generate([p + opening for p in prompts], n, temperature, args.max_new_tokens, args.batch_size)
    rows, second_prompts, second_rows = [], [], []
    for k, ids in enumerate(first):
        q, text = k // n, opening + tok.decode(ids, skip_special_tokens=True)
        read = loop.run_until_complete(codec.parse(ids, [tool_schema(tool)], "auto", (), opening))
        row, end = read_first_turn(q, text, read, fmt, tool, items[q]["gold"])
        if row["expr"] is not None:  # the prompt, the reply cut after its first call, end of turn, the tool turn
            tool_turn = after_call(tok, fmt, convs[q], row["expr"], row["result"], tool)
            second_prompts.append(prompts[q] + text[:end] + "<|im_end|>" + tool_turn)
            second_rows.append(row)
        rows.append(row)
    loop.close()
    finals = gen.generate(second_prompts, 1, temperature, args.answer_max_new_tokens, args.batch_size)
    for row, ids in zip(second_rows, finals, strict=True):
        row["final"] = tok.decode(ids, skip_special_tokens=True)
        row["final_grade"] = grade(row["final"], items[row["q"]]["gold"])
    # the oracle's second turn (a forced opening changes nothing there)
    oracle = oracle_turn(gen, fmt, tool, convs, items, n, temperature, args) if not opening and FORMATS[fmt][0] else []
    return {
        "format": name, "tool": tool, "demo": demo, "exchange": args.exchange if demo else None, "decoding": decoding,
        "temperature": temperature,
        "samples_per_question": n, "seconds": round(time.perf_counter() - t0, 1),
        "prompt_tokens_mean": sum(len(tok(p, add_special_tokens=False)["input_ids"]) for p in prompts) / len(prompts),
        "summary": summarize(rows, oracle, items), "rows": rows, "oracle_rows": oracle, "example_prompt": prompts[0],
    }  # fmt: skip


_NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:/\d+)?")


def mentions(text: str, value: str) -> bool:
    """Whether `text` writes the number `value` anywhere (boxed or not)."""
    return any(same_number(m, value) for m in _NUMBER.findall(text or ""))


def summarize(rows: list[dict], oracle: list[dict], items: list[dict]) -> dict:
    """Counts over one condition's replies (`rows`) and its oracle second turns."""
    calls = [r for r in rows if r["expr"] is not None]
    direct = [r for r in rows if r["expr"] is None]
    return {
        "replies": len(rows),
        "attempted": sum(r["attempted"] for r in rows),
        "parsed_calls": len(calls),
        "gateway_calls": sum(r.get("gateway_calls", r.get("codec", {}).get("calls", 0)) > 0 for r in rows),
        "call_result_right": sum(r["expr_ok"] for r in calls),
        "final_boxed_after_call": sum(r["final_grade"]["boxed"] for r in calls),
        "final_mentions_result": sum(mentions(r["final"], r["result"]) for r in calls),
        "final_right_after_right_call": sum(r["final_grade"]["correct"] for r in calls if r["expr_ok"]),
        "no_call_right": sum(r["direct"]["correct"] for r in direct),
        "episode_right": sum(r["direct"]["correct"] for r in direct) + sum(r["final_grade"]["correct"] for r in calls),
        "oracle_n": len(oracle),
        "oracle_right": sum(o["correct"] for o in oracle),
        "oracle_mentions_result": sum(mentions(o["reply"], items[o["q"]]["gold"]) for o in oracle),
    }


def table(results: list[dict]) -> str:
    """The measurements as a markdown table (a/b = a of b)."""
    head = ("tool", "format", "demo", "decoding", "prompt tokens", "call attempted", "call read (lenient)",
            "gateway reads", "call = gold", "boxed after result", "writes result", "right after right call",
            "right without call", "episode right", "oracle: right", "oracle: writes result")  # fmt: skip
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in results:
        s, n = r["summary"], r["summary"]["replies"]
        calls, on = s["parsed_calls"], s["oracle_n"]
        lines.append("| " + " | ".join([
            r.get("tool", "calculator"), r["format"], (r.get("exchange") or "yes") if r["demo"] else "no",
            r["decoding"],
            f"{r['prompt_tokens_mean']:.0f}", f"{s['attempted']}/{n}", f"{calls}/{n}", f"{s['gateway_calls']}/{n}",
            f"{s['call_result_right']}/{calls}", f"{s['final_boxed_after_call']}/{calls}",
            f"{s['final_mentions_result']}/{calls}", f"{s['final_right_after_right_call']}/{s['call_result_right']}",
            f"{s['no_call_right']}/{n - calls}", f"{s['episode_right']}/{n} ({s['episode_right'] / n:.3f})",
            *((f"{s[k]}/{on}" if on else "-") for k in ("oracle_right", "oracle_mentions_result")),
        ]) + " |")  # fmt: skip
    return "\n".join(lines)


def load_items(n: int) -> list[dict]:
    import pyarrow.parquet as pq

    from verl_ext.mathgen.cache import ensure_task
    from verl_ext.mathgen.task import TaskSpec

    rows = pq.read_table(ensure_task(TaskSpec(mix="arithmetic")) / "val.parquet").to_pylist()[:n]
    items = []
    for row in rows:
        question, gold = row["prompt"][-1]["content"], str(row["reward_model"]["ground_truth"])
        items.append({"question": question, "gold": gold, "expr": question_expression(question, gold)})
    return items


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--out", required=True, help="JSON results (every reply included)")
    p.add_argument("--tool", default="calculator", choices=sorted(TOOLS), help="the tool's name and schema")
    p.add_argument("--questions", type=int, default=30, help="held-out questions (validation split, arithmetic mix)")
    p.add_argument("--samples", type=int, default=3, help="samples per question at --temperature")
    p.add_argument("--temperature", type=float, default=0.7)
    p.add_argument("--max-new-tokens", type=int, default=96, help="first turn (the call)")
    p.add_argument("--answer-max-new-tokens", type=int, default=48, help="the turn after the tool's result")
    p.add_argument("--formats", default="hermes,apigen,line", help=f"comma-separated: {list(FORMATS)}[+forced]")
    p.add_argument("--decodings", default="greedy,sampled", help="greedy and/or sampled")
    p.add_argument("--demos", default="both", choices=("both", "yes", "no"), help="with / without the worked exchange")
    p.add_argument("--exchange", default="sum", choices=sorted(DEMO_EXCHANGES), help="which worked exchange(s)")
    p.add_argument("--batch-size", type=int, default=15, help="prompts per generate call (x samples rows)")
    p.add_argument("--threads", type=int, default=1, help="torch threads (the machine is shared)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--resummarize", nargs="+", default=None, help="recount earlier --out files (merged); no model")
    args = p.parse_args()
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    if args.resummarize:
        reports = [json.loads(Path(f).read_text()) for f in args.resummarize]
        report = {"merged_from": [{"file": f, "args": rep["args"]} for f, rep in zip(args.resummarize, reports)]}
        report["generation"] = [r for rep in reports for r in rep.get("generation", [])]
        for r in report["generation"]:
            r["summary"] = summarize(r["rows"], r["oracle_rows"], reports[0]["items"])
        report["items"], report["table"] = reports[0]["items"], table(report["generation"])
        print(report["table"])
        out.write_text(json.dumps(report, indent=1))
        return

    from verl_ext.pretrained.smollm2 import ensure_smollm2

    items = load_items(args.questions)
    report = {"args": vars(args), "items": items, "generation": []}
    gen = Generator(ensure_smollm2(), args.threads, args.seed)
    for fmt in args.formats.split(","):
        for demo in {"both": (False, True), "yes": (True,), "no": (False,)}[args.demos]:
            for decoding in args.decodings.split(","):
                r = run_condition(gen, fmt, demo, decoding, items, args)
                report["generation"].append(r)
                tag = f"{fmt} demo={demo and args.exchange} {decoding}"
                print(f"{tag}: {r['summary']} ({r['seconds']} s)", file=sys.stderr, flush=True)
                out.write_text(json.dumps(report, indent=1))
    report["table"], report["generated_tokens"] = table(report["generation"]), gen.tokens
    print(report["table"])
    out.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
