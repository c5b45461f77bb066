"""Probe: what the example framework agents send, and what their tools cost in SmolLM2-135M-Instruct's tokens
(measured for docs/AGENT_REAL_MODEL.md, the table "What the tools cost in this tokenizer").

The example agents (`verl_ext.agent.examples.agents_sdk_calc`, `langgraph_calc`) run unchanged against a canned
OpenAI-compatible server on 127.0.0.1 (a `calc` call first, then an answer) with the real task's prompt (mathgen's
worked exchange, then a question); the request bodies they send are recorded, and their first request is rendered
by the released template and by each tool chat template. Only the tokenizer is loaded.

    python scripts/probe_agent_frameworks.py --out outputs/probe_agent_frameworks.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import threading
import time
from pathlib import Path

from verl_ext.pretrained.smollm2 import LINE_TOOL_CHAT_TEMPLATE, TOOL_CHAT_TEMPLATE

TEMPLATES = {"hermes": TOOL_CHAT_TEMPLATE, "line": LINE_TOOL_CHAT_TEMPLATE}


def canned_reply(body: dict) -> dict:
    """The canned server's chat completion: a `calc` call first, the final answer once a tool result is in the chat."""
    if not any(m["role"] == "tool" for m in body["messages"]):
        args = json.dumps({"expr": "2 - -2"})
        msg = {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "calc", "arguments": args}}]}  # fmt: skip
        finish = "tool_calls"
    else:
        msg, finish = {"role": "assistant", "content": "The final answer is \\boxed{4}."}, "stop"
    return {
        "id": "c", "object": "chat.completion", "created": int(time.time()), "model": "policy",
        "choices": [{"index": 0, "message": msg, "finish_reason": finish}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}  # fmt: skip


def start_canned_server(bodies: list[dict]) -> int:
    """A chat completions server on a free port of 127.0.0.1, in a daemon thread: it appends each request's body to
    `bodies` and answers with `canned_reply`. Returns the port."""
    from aiohttp import web

    async def chat(req):
        body = await req.json()
        bodies.append(body)
        return web.json_response(canned_reply(body))

    ready, port = threading.Event(), {}

    def serve():
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        app = web.Application()
        app.router.add_post("/v1/chat/completions", chat)
        runner = web.AppRunner(app)
        loop.run_until_complete(runner.setup())
        site = web.TCPSite(runner, "127.0.0.1", 0)
        loop.run_until_complete(site.start())
        port["p"] = site._server.sockets[0].getsockname()[1]
        ready.set()
        loop.run_forever()

    threading.Thread(target=serve, daemon=True).start()
    ready.wait(10)
    return port["p"]


def capture_frameworks() -> dict:
    """The example agents, unchanged, against a canned server on 127.0.0.1: the request bodies they send."""
    bodies: list[dict] = []
    os.environ["OPENAI_BASE_URL"] = f"http://127.0.0.1:{start_canned_server(bodies)}/v1"
    os.environ["OPENAI_API_KEY"] = "probe"
    from verl_ext.agent.examples import agents_sdk_calc, langgraph_calc
    from verl_ext.mathgen.prompts import DEMONSTRATION, INSTRUCTION

    # the real preset's task row: the worked example, then the question
    task = {"prompt": [*DEMONSTRATION, {"role": "user", "content": f"What is 2 - -2? {INSTRUCTION}"}],
            "reward_model": {"ground_truth": "4"}}  # fmt: skip
    out = {}
    out["agents_sdk"] = {"final": asyncio.run(agents_sdk_calc.play(task)), "requests": list(bodies)}
    bodies.clear()
    out["langgraph"] = {"final": langgraph_calc.play(task), "requests": list(bodies)}
    return out


def framework_costs(tok, captured: dict) -> dict:
    """Tokens of each framework's first request: the released template (tools dropped) and each tool template; the
    tools block's cost is the difference."""
    from verl_ext.agent.gateway.core import normalize_message
    from verl_ext.agent.gateway.toolcall import check_tools, for_template

    out = {}
    for name, cap in captured.items():
        first = cap["requests"][0]
        msgs = [for_template(normalize_message(m, i)) for i, m in enumerate(first["messages"])]
        tools = check_tools(first.get("tools"))
        n = lambda text: len(tok(text, add_special_tokens=False)["input_ids"])  # noqa: E731
        row = {
            "messages": [m["role"] for m in first["messages"]],
            "system_message": next((m["content"] for m in first["messages"] if m["role"] == "system"), None),
            "tools": first.get("tools"),
            "tools_json_chars": len(json.dumps(first.get("tools"))),
            "tools_json_tokens": n(json.dumps(first.get("tools"))),
            "released_template_tokens": n(tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)),
        }
        for fmt, template in TEMPLATES.items():
            text = tok.apply_chat_template(msgs, tools=tools, chat_template=template, tokenize=False,
                                           add_generation_prompt=True)  # fmt: skip
            row[f"{fmt}_template_tokens"] = n(text)
        row["second_request_messages"] = [m["role"] for m in cap["requests"][1]["messages"]]
        row["second_request_assistant_content"] = next(
            m.get("content", "<absent>") for m in cap["requests"][1]["messages"] if m["role"] == "assistant" and
            m.get("tool_calls"))  # fmt: skip
        out[name] = row
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="JSON: the captured requests and their token costs")
    args = p.parse_args()
    from transformers import AutoTokenizer

    from verl_ext.pretrained.smollm2 import ensure_smollm2

    tok = AutoTokenizer.from_pretrained(ensure_smollm2())
    captured = capture_frameworks()
    report = {"captured": captured, "costs": framework_costs(tok, captured)}
    print(json.dumps(report["costs"], indent=1))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
