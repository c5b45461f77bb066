"""Benchmark of the agent gateway (verl_ext.agent.gateway): what it costs per request, and whether concurrent agents
reach the rollout as large generation batches.

Set-up, all in one process on 127.0.0.1: the tiny model behind a batching rollout (every engine pass takes all the
requests waiting at that moment, up to --max-batch, and decodes them together, padded, up to --max-tokens new tokens
each: the way a continuous-batching server such as vLLM sees a burst). `--agents` agents (default 64), each an
`openai.AsyncOpenAI` client on its own episode URL, play `--rounds` chat rounds (the two-round guessing game's
shape: prompt, reply, a user turn, reply).

Measured side by side in one run:
1. direct: the same agents' rounds sent straight to the rollout as token ids (no HTTP, no chat template): the
   rollout's own time per request.
2. gateway: the agents through the gateway. Overhead per request = the gateway's time in its handlers outside the
   rollout call (parsing, chat template / Continuous Token merge, bookkeeping, decoding), and the end-to-end wall
   time against direct.
3. batching: mean generation batch size of the rollout engine against agents in flight (goal >= 0.8).

Goal (issue 10): gateway overhead < 5% of the rollout's time per request. The tiny model on CPU makes the rollout's
time per request small, so the ratio here is an upper bound of what a real model's rollout would show.

    .venv/bin/python scripts/bench_agent.py                 # 64 agents, 2 rounds
    .venv/bin/python scripts/bench_agent.py --agents 16 --rounds 3
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

import torch


class BatchingRollout:
    """Token-in/token-out rollout over the tiny HF model that batches whatever is waiting (see module docstring).

    `generate(request_id, prompt_ids, sampling_params) -> (ids, log_probs)`, the gateway's GenerateFn."""

    def __init__(self, model_dir: str, eos_id: int, pad_id: int, max_batch: int, admit_s: float, seed: int = 0):
        from transformers import AutoModelForCausalLM

        self.model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
        self.eos_id, self.pad_id, self.max_batch, self.admit_s = eos_id, pad_id, max_batch, admit_s
        self.gen = torch.Generator().manual_seed(seed)
        self.queue: list[tuple[list[int], int, asyncio.Future]] = []
        self.batch_sizes: list[int] = []
        self.busy_s = 0.0
        self._wake = asyncio.Event()
        self._task: asyncio.Task | None = None

    def start(self):
        self._task = asyncio.get_running_loop().create_task(self._engine())

    async def stop(self):
        self._task.cancel()

    async def generate(self, request_id, prompt_ids, sampling_params):
        fut = asyncio.get_running_loop().create_future()
        self.queue.append((list(prompt_ids), int(sampling_params["max_tokens"]), fut))
        self._wake.set()
        return await fut

    async def _engine(self):
        loop = asyncio.get_running_loop()
        while True:
            await self._wake.wait()
            self._wake.clear()
            if self.admit_s:  # admission window: requests arriving within it join the pass (a continuous
                await asyncio.sleep(self.admit_s)  # batching server adds them at its next decode step instead)
            while self.queue:
                batch, self.queue = self.queue[: self.max_batch], self.queue[self.max_batch :]
                t0 = time.perf_counter()
                outs = await loop.run_in_executor(None, self._decode, [(p, m) for p, m, _ in batch])
                self.busy_s += time.perf_counter() - t0
                self.batch_sizes.append(len(batch))
                for (_, _, fut), out in zip(batch, outs, strict=True):
                    fut.set_result(out)

    @torch.no_grad()
    def _decode(self, reqs):
        """Left-padded batch, KV cache, sampling at temperature 1; each row stops at EOS or its max_tokens."""
        width = max(len(p) for p, _ in reqs)
        ids = torch.tensor([[self.pad_id] * (width - len(p)) + p for p, _ in reqs])
        attn = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p, _ in reqs])
        limit = torch.tensor([m for _, m in reqs])
        pos = (attn.cumsum(-1) - 1).clamp(min=0)
        out = self.model(input_ids=ids, attention_mask=attn, position_ids=pos, use_cache=True)
        past, logits = out.past_key_values, out.logits[:, -1]
        done = torch.zeros(len(reqs), dtype=torch.bool)
        toks, lps = [[] for _ in reqs], [[] for _ in reqs]
        for step in range(int(limit.max())):
            logp = torch.log_softmax(logits.float(), -1)
            nxt = torch.multinomial(logp.exp(), 1, generator=self.gen)[:, 0]
            for i in range(len(reqs)):
                if not done[i]:
                    toks[i].append(int(nxt[i]))
                    lps[i].append(float(logp[i, nxt[i]]))
            done |= (nxt == self.eos_id) | (step + 1 >= limit)
            if bool(done.all()):
                break
            attn = torch.cat([attn, torch.ones(len(reqs), 1, dtype=attn.dtype)], -1)
            pos = pos[:, -1:] + 1
            out = self.model(
                input_ids=nxt[:, None], attention_mask=attn, position_ids=pos, past_key_values=past, use_cache=True
            )
            past, logits = out.past_key_values, out.logits[:, -1]
        return [(t, lp) for t, lp in zip(toks, lps, strict=True)]


SAMPLING = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "logprobs": True}
ASK = "Guess my secret number between 0 and 4. Put the final answer within \\boxed{}."


async def agent(base_url: str, rounds: int, max_tokens: int, wall: list[float]):
    from openai import AsyncOpenAI

    client = AsyncOpenAI(base_url=base_url, api_key="bench", max_retries=50)
    messages = [{"role": "user", "content": ASK}]
    for _ in range(rounds):
        t0 = time.perf_counter()
        r = await client.chat.completions.create(model="policy", messages=messages, max_tokens=max_tokens)
        wall.append(time.perf_counter() - t0)
        messages += [
            {"role": "assistant", "content": r.choices[0].message.content},
            {"role": "user", "content": "Lower. Guess again. Put the final answer within \\boxed{}."},
        ]
    await client.close()


async def direct_agent(rollout, builder, rounds: int, max_tokens: int, wall: list[float]):
    """The same rounds as token ids straight to the rollout: the continuation is appended as ids (no HTTP, no
    template rendering of the history)."""
    ids = builder.build_initial_tokens([{"role": "user", "content": ASK}])
    turn = builder.build_initial_tokens([{"role": "user", "content": "Lower. Guess again."}])
    for _ in range(rounds):
        t0 = time.perf_counter()
        out, _ = await rollout.generate("direct", ids, {**SAMPLING, "max_tokens": max_tokens})
        wall.append(time.perf_counter() - t0)
        ids = ids + out + turn


async def main_async(args):
    from transformers import AutoTokenizer
    from verl.utils.tokenizer.continuous_token_wiring import create_continuous_token_builder

    from verl_ext.agent.gateway import Gateway
    from verl_ext.toy import ensure_tiny_assets

    assets = ensure_tiny_assets()
    tok = AutoTokenizer.from_pretrained(assets.model_dir)
    builder = create_continuous_token_builder(tok, hf_model_type="qwen2")
    results = {"direct": [], "gateway": []}
    # interleaved (direct, gateway) pairs; the first pair is warm-up, the medians of the others are reported
    for mode in ("direct", "gateway") * (args.repeats + 1):
        rollout = BatchingRollout(
            assets.model_dir, tok.eos_token_id, tok.pad_token_id or 0, args.max_batch, args.admit_ms / 1e3
        )
        rollout.start()
        wall: list[float] = []
        gw = None
        t0 = time.perf_counter()
        if mode == "direct":
            await asyncio.gather(
                *[direct_agent(rollout, builder, args.rounds, args.max_tokens, wall) for _ in range(args.agents)]
            )
        else:
            gw = Gateway(
                tokenizer=tok,
                builder=builder,
                generate=rollout.generate,
                model_name="tiny",
                prompt_length=256,
                response_length=args.rounds * (args.max_tokens + 40),
                max_inflight=args.agents,
                api_key="bench",
            )
            await gw.start()
            sessions = [gw.open_session(SAMPLING) for _ in range(args.agents)]
            await asyncio.gather(
                *[agent(gw.session_url(s.episode_id) + "/v1", args.rounds, args.max_tokens, wall) for s in sessions]
            )
        total = time.perf_counter() - t0
        await rollout.stop()
        n = len(wall)
        assert n == args.agents * args.rounds, n
        r = {
            "wall_s": total,
            "requests": n,
            "latency_mean_s": statistics.fmean(wall),
            "rollout_busy_per_request_s": rollout.busy_s / n,
            "mean_batch": statistics.fmean(rollout.batch_sizes),
            "engine_passes": len(rollout.batch_sizes),
        }
        if gw is not None:
            st = gw.stats
            r["gateway_overhead_per_request_s"] = (st.handler_s - st.generate_s) / st.generations
            r["rollout_call_per_request_s"] = st.generate_s / st.generations
            r["rejected_429"] = st.rejected_429
            await gw.stop()
        results[mode].append(r)
    return {m: {k: statistics.median(x[k] for x in rs[1:]) for k in rs[1]} for m, rs in results.items()}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--agents", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--max-batch", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=3, help="measured (direct, gateway) pairs after a warm-up pair")
    ap.add_argument("--admit-ms", type=float, default=0.0, help="engine admission window (same for both modes)")
    args = ap.parse_args()
    torch.set_num_threads(max(1, torch.get_num_threads()))
    res = asyncio.run(main_async(args))
    d, g = res["direct"], res["gateway"]
    print(
        f"agents={args.agents} rounds={args.rounds} max_tokens={args.max_tokens} admit_ms={args.admit_ms} "
        f"(tiny model, CPU; medians of {args.repeats} runs after a warm-up)"
    )
    print(f"{'':28s}{'direct':>12s}{'gateway':>12s}")
    for k in ("wall_s", "latency_mean_s", "rollout_busy_per_request_s", "mean_batch", "engine_passes"):
        print(f"{k:28s}{d[k]:12.4f}{g[k]:12.4f}")
    over = g["gateway_overhead_per_request_s"]
    print(
        f"gateway overhead per request: {over * 1e3:.2f} ms; rollout engine time per request (direct): "
        f"{d['rollout_busy_per_request_s'] * 1e3:.2f} ms"
    )
    print(f"RATIO overhead / rollout time per request = {over / d['rollout_busy_per_request_s']:.3f}  (goal < 0.05)")
    print(
        f"RATIO end-to-end wall gateway / direct     = {g['wall_s'] / d['wall_s']:.3f}  (the 64 openai clients "
        "run in this same process: client-side cost included)"
    )
    print(
        f"RATIO mean generation batch / agents       = {g['mean_batch'] / args.agents:.3f}  (goal >= 0.8; "
        f"direct {d['mean_batch'] / args.agents:.3f})"
    )
    print(f"429 rejections (max_inflight = agents): {g['rejected_429']}")


if __name__ == "__main__":
    main()
