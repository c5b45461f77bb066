"""Agent episodes for the Composer's agent-trace tests, as the gateway records them (`core.Session.turns`):

- `probe_episodes`: the real model's recorded calculator episodes. SmolLM2-135M-Instruct's replies to the first 30
  held-out arithmetic questions after the agent preset's two worked exchanges
  (`mathgen.prompts.LINE_CALL_DEMONSTRATION`), greedy and 3 samples a question at T 0.7, each call run by the real
  calculator and the model's answer after its result (docs/AGENT_REAL_MODEL.md, "Which worked exchange"; every reply in
  docs/results/agent_real_model/probe_agent_exchanges.json, exchange `two`), written as the turns the gateway records
  when the Agents SDK agent (`verl_ext/agent/examples/agents_sdk_calc.py`) plays them: its tool schema, its call
  echoed with `content: null` (normalised to ""), the tool's answer as a `tool` message.
- `gateway_episodes`: episodes played by that agent itself, unchanged, as a process, against the project's gateway on
  127.0.0.1 (the tiny tokenizer with the line-call chat template `smollm2.LINE_TOOL_CHAT_TEMPLATE`, the `line` tool
  parser), the rollout scripted with replies in the real model's failure modes; the agent's own calculator answers.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from verl_ext.mathgen.prompts import LINE_CALL_DEMONSTRATION, prompt_messages

ROOT = Path(__file__).resolve().parents[2]
PROBE = ROOT / "docs/results/agent_real_model/probe_agent_exchanges.json"
# the Agents SDK's schema of `calc` (`FunctionTool.params_json_schema`) as the gateway keeps it (`toolcall.check_tools`)
SDK_CALC = {
    "type": "function",
    "function": {
        "name": "calc",
        "description": "Evaluate arithmetic: + - * / and parentheses, on integers and decimals.",
        "parameters": {
            "properties": {"expr": {"title": "Expr", "type": "string"}},
            "required": ["expr"],
            "title": "calc_args",
            "type": "object",
            "additionalProperties": False,
        },
    },
}


def probe_episodes() -> list[dict]:
    """Each recorded probe reply as {"question", "gold", "turns" (the gateway's record), "acc", "row" (the probe's)}."""
    data = json.loads(PROBE.read_text())
    items = data["items"]
    out = []
    for gen in data["generation"]:
        if gen["exchange"] != "two":
            continue
        for k, row in enumerate(gen["rows"]):
            item = items[row["q"]]
            first = prompt_messages(
                item["question"].removesuffix(" Give the final answer in \\boxed{}."), LINE_CALL_DEMONSTRATION
            )
            assert first[-1]["content"] == item["question"]
            if row["expr"] is None:  # answered without the tool: one turn
                turns = [
                    {
                        "messages": first,
                        "tools": [SDK_CALC],
                        "tool_choice": "auto",
                        "reply": {"role": "assistant", "content": row["reply"]},
                    }
                ]
                acc = float(row["direct"]["correct"])
            else:
                cid = f"call_{gen['decoding']}_{k}"
                call = {
                    "id": cid,
                    "type": "function",
                    "function": {"name": "calc", "arguments": json.dumps({"expr": row["expr"]})},
                }
                second = first + [
                    {"role": "assistant", "content": "", "tool_calls": [call]},
                    {"role": "tool", "tool_call_id": cid, "content": row["result"]},
                ]
                turns = [
                    {
                        "messages": first,
                        "tools": [SDK_CALC],
                        "tool_choice": "auto",
                        "reply": {"role": "assistant", "content": "", "tool_calls": [call]},
                    },
                    {
                        "messages": second,
                        "tools": [SDK_CALC],
                        "tool_choice": "auto",
                        "reply": {"role": "assistant", "content": row["final"]},
                    },
                ]
                acc = float(row["final_grade"]["correct"])
            out.append({"question": item["question"], "gold": item["gold"], "turns": turns, "acc": acc, "row": row})
    return out


# Scripted replies in the real model's failure modes (docs/AGENT_REAL_MODEL.md): per question, the policy's reply at
# each of its turns. The calculator's answers in between are the agent's own.
GATEWAY_SCRIPTS = {
    # a parenthesis left open (the tool answers with a syntax error), then the fraction's numerator alone
    "Calculate 16 divided by 5.": ("16/5", ["calc: (16 / 5", "calc: 16 / 5", "The final answer is \\boxed{16}."]),
    # an operation the question does not name
    "What is the distance between 0.4 and 0.03?": ("0.37", ["calc: 0.4 + 0.03", "The final answer is \\boxed{0.43}."]),
    # no call at all
    "What is -1 divided by -2?": ("1/2", ["The final answer is \\boxed{1}."]),
    # a right call and its result boxed
    "What is 2 - -2?": ("4", ["calc: 2 - -2", "The final answer is \\boxed{4}."]),
    # a right call, then an answer without a box (graded wrong; no rule names this mistake)
    "What is 3 + 5?": ("8", ["calc: 3 + 5", "The final answer is 8."]),
}


def _task(question: str, gold: str) -> dict:
    return {
        "prompt": prompt_messages(question, LINE_CALL_DEMONSTRATION),
        "reward_model": {"ground_truth": gold},
        "extra_info": {},
        "data_source": "arithmetic",
    }


def gateway_episodes(scripts: dict = GATEWAY_SCRIPTS) -> tuple[list[dict], object]:
    """Play each scripted question with the Agents SDK calculator agent through the gateway; returns per question
    {"question", "session" (the gateway's, closed), "outcome", "score"} and the tokenizer the gateway rendered with."""
    from transformers import AutoTokenizer

    from tests.agent.conftest import LoopThread, ScriptedBackend, make_gateway
    from verl_ext.agent.agent_process import run_episode
    from verl_ext.agent.settings import AgentSettings
    from verl_ext.pretrained.smollm2 import LINE_TOOL_CHAT_TEMPLATE
    from verl_ext.toy import ensure_tiny_assets

    tok = AutoTokenizer.from_pretrained(ensure_tiny_assets().model_dir)
    tok.chat_template = LINE_TOOL_CHAT_TEMPLATE

    def policy(prompt_text: str) -> str:
        question = next(q for q in scripts if q in prompt_text)
        asked = prompt_text.index(question)
        done = prompt_text[asked:].count("<|im_start|>assistant\n") - 1  # the generation prompt opens one more
        return scripts[question][1][done]

    loop = LoopThread()
    backend = ScriptedBackend(tok, policy)
    gw = make_gateway(tok, backend, tool_parser="line", prompt_length=2048, response_length=2048)
    settings = AgentSettings.from_mapping(
        {
            "command": [sys.executable, "-m", "verl_ext.agent.examples.agents_sdk_calc"],
            "launch": "process",  # a process per episode, as the agent runs on its own
            "api_key": "k",
            "timeout_s": 240,
        }
    )
    out = []
    try:
        loop.run(gw.start())
        for question, (gold, _) in scripts.items():
            res = loop.run(run_episode(gw, settings, _task(question, gold), {"temperature": 1.0, "logprobs": True}))
            out.append({"question": question, "session": res.session, "outcome": res.outcome, "res": res})
    finally:
        loop.run(gw.stop())
        loop.close()
    return out, tok
