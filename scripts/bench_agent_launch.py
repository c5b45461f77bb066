"""Benchmark of how agent episodes are launched (`external_agent.launch`): episodes per second of a trivial agent,
`process` (a new interpreter per episode) against `fork` (forked from a fork server that imported the agent's
libraries once), side by side in one run.

The agent (written to a temporary file) imports `--heavy` (default `agents`, the OpenAI Agents SDK; `openai` for the
client alone) and `openai` at its top level, plays one chat round with the `openai` client and posts its score: the
shape of a real agent's episode without the model's time. Episodes go through the real `run_episode` and the
project's gateway on 127.0.0.1, behind a rollout that answers at once with a fixed reply (the tiny test model's
tokenizer renders the chat; no model runs). Each repeat runs `--episodes` episodes, `--concurrency` at a time, in each
mode (the order alternates between repeats); a warm-up episode per mode first (for fork: the server's start and
preload, reported on its own). Printed: episodes/s per mode and repeat, their medians, the median of the per-repeat
ratio fork / process, and the load average before and after (the machine is shared: the figures are only comparable
within one run).

    .venv/bin/python scripts/bench_agent_launch.py                       # agents SDK, 32 episodes x 3, 8 at a time
    .venv/bin/python scripts/bench_agent_launch.py --heavy openai --episodes 16 --concurrency 4
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

AGENT_SOURCE = """\
import json
import os
import urllib.request

import {heavy}
from openai import OpenAI

client = OpenAI(max_retries=20)
reply = client.chat.completions.create(
    model="policy", messages=[{{"role": "user", "content": "Say ok."}}], max_tokens=8
).choices[0].message.content
req = urllib.request.Request(
    os.environ["AGENT_SCORE_URL"],
    data=json.dumps({{"score": 1.0 if reply else 0.0}}).encode(),
    headers={{"Content-Type": "application/json", "Authorization": "Bearer " + os.environ["OPENAI_API_KEY"]}},
)
urllib.request.urlopen(req, timeout=60).read()
"""
TASK = {"prompt": [{"role": "user", "content": "Say ok."}], "reward_model": {}, "extra_info": {}, "data_source": "b"}
SAMPLING = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "logprobs": True}


class InstantRollout:
    """A rollout that answers every request at once with the same short reply (token ids of the tokenizer)."""

    def __init__(self, tok):
        self.ids = tok.encode("ok", add_special_tokens=False) + [tok.eos_token_id]

    async def __call__(self, request_id, prompt_ids, sampling_params):
        ids = self.ids[: int(sampling_params["max_tokens"])]
        return ids, [-0.1] * len(ids), 0


def make_gateway():
    from transformers import AutoTokenizer
    from verl.utils.tokenizer.continuous_token_wiring import create_continuous_token_builder

    from verl_ext.agent.gateway.server import Gateway
    from verl_ext.toy import ensure_tiny_assets

    tok = AutoTokenizer.from_pretrained(ensure_tiny_assets().model_dir)
    return Gateway(
        tokenizer=tok,
        builder=create_continuous_token_builder(tok, hf_model_type="qwen2"),
        generate=InstantRollout(tok),
        model_name="tiny",
        prompt_length=512,
        response_length=64,
        api_key="k",
    )


async def batch(gw, settings, n: int, concurrency: int) -> tuple[float, list[str]]:
    """Run n episodes, at most `concurrency` at once: (wall seconds, statuses)."""
    from verl_ext.agent.agent_process import run_episode

    sem = asyncio.Semaphore(concurrency)

    async def one():
        async with sem:
            return await run_episode(gw, settings, TASK, SAMPLING)

    t0 = time.perf_counter()
    results = await asyncio.gather(*[one() for _ in range(n)])
    wall = time.perf_counter() - t0
    bad = [r for r in results if r.outcome.status.value != "ok"]
    if bad:
        raise SystemExit(f"{len(bad)} episodes not ok: {bad[0].outcome.status.value}: {bad[0].stderr[-1500:]}")
    return wall, [r.outcome.status.value for r in results]


async def main_async(args) -> None:
    from verl_ext.agent.fork_launch import LAUNCHERS
    from verl_ext.agent.settings import AgentSettings

    with tempfile.TemporaryDirectory() as tmp:
        agent = Path(tmp) / "trivial_agent.py"
        agent.write_text(AGENT_SOURCE.format(heavy=args.heavy))
        command = [sys.executable, str(agent)]
        settings = {
            mode: AgentSettings.from_mapping({"command": command, "launch": mode, "api_key": "k", "timeout_s": 600})
            for mode in ("process", "fork")
        }
        gw = make_gateway()
        await gw.start()
        load_before = os.getloadavg()
        print(f"{os.cpu_count()} cores, load average before: {load_before[0]:.2f} {load_before[1]:.2f}")
        imports = "openai" if args.heavy == "openai" else f"{args.heavy} + openai"
        print(f"agent: imports {imports}, one chat round, posts its score; {args.episodes} episodes per repeat,")
        print(f"{args.concurrency} at a time")
        try:
            for mode in ("process", "fork"):
                wall, _ = await batch(gw, settings[mode], 1, 1)
                note = "; the server's start and preload included" if mode == "fork" else ""
                print(f"warm-up {mode}: {wall:.2f} s (one episode{note})")
            launcher = LAUNCHERS.get(settings["fork"].command, settings["fork"].env)
            hello = launcher.server.hello if launcher.server else None
            if hello is None:
                raise SystemExit(f"fork mode fell back to processes: {launcher.fallback}")
            print(f"fork server preloaded {hello['preloaded']} in {hello['seconds']:.2f} s")
            rates: dict[str, list[float]] = {"process": [], "fork": []}
            for r in range(args.repeats):
                order = ("process", "fork") if r % 2 == 0 else ("fork", "process")
                for mode in order:
                    wall, _ = await batch(gw, settings[mode], args.episodes, args.concurrency)
                    rates[mode].append(args.episodes / wall)
                    print(f"repeat {r}: {mode:7s} {args.episodes / wall:7.2f} episodes/s ({wall:.2f} s)", flush=True)
            ratios = [f / p for f, p in zip(rates["fork"], rates["process"], strict=True)]
            load_after = os.getloadavg()
            print(f"load average after: {load_after[0]:.2f} {load_after[1]:.2f}")
            print(
                f"median episodes/s: process {statistics.median(rates['process']):.2f}, "
                f"fork {statistics.median(rates['fork']):.2f}; median ratio fork/process "
                f"{statistics.median(ratios):.2f} (per repeat: {', '.join(f'{x:.2f}' for x in ratios)})"
            )
        finally:
            await LAUNCHERS.aclose()
            await gw.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--heavy", default="agents", help="the module the agent imports (default: the Agents SDK)")
    ap.add_argument("--episodes", type=int, default=32)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=3)
    asyncio.run(main_async(ap.parse_args()))


if __name__ == "__main__":
    main()
