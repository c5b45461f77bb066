"""Benchmark: vLLM-CPU generation on the real model, in the shape of a training call, settings side by side.

Loads SmolLM2-135M-Instruct in vLLM-CPU as the CPU backend's rollout does (float32, eager, prefix caching on, 1 GiB
of KV cache, every core) and generates what a fast DAPO call generates: P training prompts of the real task (chat
template, one worked example, the question) x S samples, each sample its own request (as verl's agent loop sends
them), temperature 0.6, up to 64 tokens, the sampled token's log-prob returned. Each setting runs in a subprocess of
its own (a fresh engine), one after the other; printed per setting: wall seconds of the call, generated tokens per
second, prompt tokens per request and the share vLLM served from its prefix cache; then each block size's tokens/s
against the first one's, beside its target (>= 1.5x) with PASS or MISS.

The lever it checks: vLLM-CPU's KV-cache block is 128 tokens unless set, and a prompt here is ~97 tokens, so no block
is ever full and prefix caching shares nothing: every sample prefills its whole prompt (the call computes ~4x as many
prompt tokens as it generates). With 16- or 32-token blocks the worked example (common to every prompt) and each
question's prompt (common to its samples) are computed once.

Usage: .venv/bin/python scripts/bench_generation_cpu.py [--prompts 32] [--samples 4] [--block-sizes 128 32 16]
"""

from __future__ import annotations

import argparse
import os
import time

from benchlib import Target, print_result, run_child

TEMPERATURE = 0.6
MAX_TOKENS = 64
TARGET = Target(">=", 1.5, "x")  # generated tokens/s at a smaller block against the first block size given


def prompts(n: int) -> list[list[int]]:
    import pyarrow.parquet as pq
    from transformers import AutoTokenizer

    from verl_ext.mathgen.cache import ensure_task
    from verl_ext.mathgen.task import TaskSpec
    from verl_ext.pretrained.smollm2 import ensure_smollm2

    tok = AutoTokenizer.from_pretrained(ensure_smollm2())
    table = pq.read_table(ensure_task(TaskSpec(mix="arithmetic")) / "train.parquet").to_pylist()[:n]
    out = []
    for row in table:
        ids = tok.apply_chat_template(list(row["prompt"]), add_generation_prompt=True, tokenize=True)
        out.append(list(ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids))
    return out


def one(block_size: int, n_prompts: int, samples: int) -> dict:
    """Run in a subprocess: one engine, one warm-up call on other prompts, then the timed call."""
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    from verl_ext.pretrained.smollm2 import ensure_smollm2

    kwargs = {} if block_size <= 0 else {"block_size": block_size}
    llm = LLM(
        model=str(ensure_smollm2()),
        dtype="float32",
        enforce_eager=True,
        enable_prefix_caching=True,
        max_model_len=224,
        max_num_seqs=256,
        seed=0,
        disable_log_stats=False,
        **kwargs,
    )
    ids = prompts(2 * n_prompts)
    params = SamplingParams(temperature=TEMPERATURE, max_tokens=MAX_TOKENS, logprobs=0, seed=None)

    def call(batch):
        reqs = [TokensPrompt(prompt_token_ids=p) for p in batch for _ in range(samples)]
        start = time.perf_counter()
        outs = llm.generate(reqs, params, use_tqdm=False)
        wall = time.perf_counter() - start
        return wall, sum(len(o.outputs[0].token_ids) for o in outs), sum(len(p) for p in batch) * samples

    call(ids[n_prompts:])  # warm-up on other prompts (their cached blocks hold the shared worked example too)
    hits0, queries0 = _prefix_stats(llm)
    wall, generated, prompt_tokens = call(ids[:n_prompts])
    hits1, queries1 = _prefix_stats(llm)
    cached = (hits1 - hits0) / max(1.0, queries1 - queries0) if queries1 is not None else float("nan")
    return {
        "block_size": llm.llm_engine.vllm_config.cache_config.block_size,
        "wall_s": wall,
        "generated": generated,
        "tokens_per_s": generated / wall,
        "prompt_tokens": prompt_tokens,
        "prefix_cached_frac": cached,
    }


def _prefix_stats(llm) -> tuple[float, float | None]:
    hits = queries = None
    for m in llm.get_metrics():
        if m.name == "vllm:prefix_cache_hits":
            hits = float(getattr(m, "value", 0.0))
        elif m.name == "vllm:prefix_cache_queries":
            queries = float(getattr(m, "value", 0.0))
    return (hits or 0.0), queries


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--prompts", type=int, default=32, help="prompts per call (fast DAPO's data.gen_batch_size)")
    p.add_argument("--samples", type=int, default=4, help="samples per prompt (the screening n)")
    p.add_argument("--block-sizes", type=int, nargs="+", default=[128, 32, 16], help="0 = vLLM's default")
    p.add_argument("--one", type=int, default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.one is not None:
        print_result(one(args.one, args.prompts, args.samples))
        return
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_NUM_OF_RESERVED_CPU": "0"}
    print(f"[bench] {args.prompts} prompts x {args.samples} samples, T {TEMPERATURE}, <= {MAX_TOKENS} tokens")
    print(f"{'block':>6} {'wall s':>7} {'generated':>9} {'tokens/s':>8} {'prompt tok/req':>14} {'prefix cached':>13}")
    results = []
    for bs in args.block_sizes:
        r = run_child(__file__, ["--one", str(bs), "--prompts", str(args.prompts), "--samples", str(args.samples)], env)
        results.append(r)
        print(
            f"{r['block_size']:>6} {r['wall_s']:>7.1f} {r['generated']:>9} {r['tokens_per_s']:>8.1f} "
            f"{r['prompt_tokens'] / (args.prompts * args.samples):>14.1f} {r['prefix_cached_frac']:>13.2f}",
            flush=True,
        )
    base = results[0]
    for r in results[1:]:
        ratio = r["tokens_per_s"] / base["tokens_per_s"]
        print(f"[bench] block {r['block_size']} vs {base['block_size']}: tokens/s {ratio:.2f}x {TARGET.verdict(ratio)}")


if __name__ == "__main__":
    main()
