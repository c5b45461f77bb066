"""Benchmark: verl's actor passes on the CPU backend against plain torch on the same rows, as a ratio.

Runs fast DAPO on the real model (`+preset=real_cpu`: SmolLM2-135M-Instruct, vLLM-CPU rollout, FSDP2 actor) for a
few steps with the rollouts dumped, then replays each step's training rows (prompt + response tokens, the run's
micro-batch size) through plain torch in this process: forward + backward + AdamW step (what `update_actor` does)
and a no-grad forward with log-softmax gather (what `old_log_prob` does). Both sides run fp32 on every core, one
after the other on the same machine. Printed per step: seconds, ms per token, and verl / torch.

Usage: .venv/bin/python scripts/bench_actor_cpu.py [--steps 2] [--out outputs/bench_actor_cpu] [-- overrides...]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from verl_ext.metrics_log import read_jsonl


def run_verl(out: Path, steps: int, overrides: list[str]) -> list[dict]:
    cmd = [
        sys.executable,
        "-m",
        "recipe.fast_dapo.main",
        "+preset=real_cpu",
        f"trainer.total_training_steps={steps}",
        "trainer.test_freq=-1",
        "trainer.val_before_train=false",
        "trainer.save_freq=-1",
        "trainer.plot_keys=[]",
        f"trainer.default_local_dir={out / 'run'}",
        f"trainer.rollout_data_dir={out / 'rollouts'}",
        *overrides,
    ]
    print(f"[bench] verl: {' '.join(cmd[2:])}", flush=True)
    with open(out / "run.log", "w") as f:
        subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, check=True)
    return read_jsonl(out / "run" / "metrics.jsonl")


def step_rows(out: Path, step: int, tok) -> list[tuple[list[int], int]]:
    """(token ids, prompt length) of every training row of a step, from verl's rollout dump."""
    rows = []
    for line in open(out / "rollouts" / f"{step}.jsonl"):
        d = json.loads(line)
        prompt = tok(d["input"], add_special_tokens=False)["input_ids"]
        response = tok(d["output"], add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
        rows.append((prompt + response, len(prompt)))
    return rows


def _micro_batches(rows, size: int):
    import torch

    for i in range(0, len(rows), size):
        chunk = rows[i : i + size]
        width = max(len(ids) for ids, _ in chunk)
        ids = torch.zeros(len(chunk), width, dtype=torch.long)
        mask = torch.zeros(len(chunk), width, dtype=torch.long)
        target = torch.zeros(len(chunk), width - 1, dtype=torch.bool)  # response positions
        for j, (row, plen) in enumerate(chunk):
            ids[j, : len(row)] = torch.tensor(row)
            mask[j, : len(row)] = 1
            target[j, plen - 1 : len(row) - 1] = True
        yield ids, mask, target


def _log_probs(model, ids, mask):
    import torch

    logits = model(input_ids=ids, attention_mask=mask).logits[:, :-1].float()
    return torch.log_softmax(logits, dim=-1).gather(-1, ids[:, 1:, None]).squeeze(-1)


def torch_update(model, opt, rows, micro: int) -> float:
    start = time.perf_counter()
    opt.zero_grad()
    for ids, mask, target in _micro_batches(rows, micro):
        lp = _log_probs(model, ids, mask)
        (-(lp * target).sum() / max(1, int(target.sum()))).backward()
    opt.step()
    return time.perf_counter() - start


def torch_log_probs(model, rows, micro: int) -> float:
    import torch

    start = time.perf_counter()
    with torch.no_grad():
        for ids, mask, _ in _micro_batches(rows, micro):
            _log_probs(model, ids, mask)
    return time.perf_counter() - start


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--micro", type=int, default=None, help="torch micro-batch (default: the run's actor micro-batch)")
    p.add_argument("--out", default="outputs/bench_actor_cpu")
    p.add_argument("--reuse", action="store_true", help="replay an earlier run in --out instead of running verl")
    p.add_argument("overrides", nargs="*", help="Hydra overrides for the verl run")
    args = p.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    metrics = read_jsonl(out / "run" / "metrics.jsonl") if args.reuse else run_verl(out, args.steps, args.overrides)

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from verl_ext.cpu.shims import use_all_cores
    from verl_ext.pretrained.smollm2 import ensure_smollm2

    threads = use_all_cores()
    path = ensure_smollm2()
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation="eager")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-6)
    micro = args.micro or 16
    print(f"[bench] torch {torch.__version__}, {threads} threads, fp32, micro-batch {micro}", flush=True)
    header = f"{'step':>4} {'rows':>5} {'tokens':>7} | {'verl upd s':>10} {'torch upd s':>11} {'ratio':>6} | "
    header += f"{'verl lp s':>9} {'torch lp s':>10} {'ratio':>6} | {'verl ms/tok upd':>15} {'torch':>6}"
    print(header)
    ratios_u, ratios_l = [], []
    for m in metrics:
        rows = step_rows(out, m["step"], tok)
        tokens = sum(len(ids) for ids, _ in rows)
        tu, tl = torch_update(model, opt, rows, micro), torch_log_probs(model, rows, micro)
        vu, vl = m["timing_s/update_actor"], m["timing_s/old_log_prob"]
        ratios_u.append(vu / tu)
        ratios_l.append(vl / tl)
        print(
            f"{m['step']:>4} {len(rows):>5} {tokens:>7} | {vu:>10.1f} {tu:>11.1f} {vu / tu:>6.2f} | {vl:>9.1f} "
            f"{tl:>10.1f} {vl / tl:>6.2f} | {1000 * vu / tokens:>15.1f} {1000 * tu / tokens:>6.1f}",
            flush=True,
        )
    print(
        f"[bench] median verl / torch: update_actor {statistics.median(ratios_u):.2f}x, "
        f"old_log_prob {statistics.median(ratios_l):.2f}x"
    )


if __name__ == "__main__":
    main()
