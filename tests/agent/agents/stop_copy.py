"""Test agent: one round on the task's own copy-digit prompt (the tiny model answers `\\boxed{d}`) with
`stop=["}"]` and `logprobs=true`, through the plain openai client. It writes what it received (the reply's text,
`finish_reason`, the returned token strings) to `<extra_info.stop_log_dir>/<episode id>.json` and scores 1 if the
reply is the boxed ground truth up to the stop string (OpenAI's semantics: the stop string is not in the text)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from openai import OpenAI

from verl_ext.agent.examples.score import post_score, task

if __name__ == "__main__":
    t = task()
    out = OpenAI().chat.completions.create(
        model="policy", messages=t["prompt"], max_tokens=16, stop=["}"], logprobs=True
    )
    choice = out.choices[0]
    record = {
        "content": choice.message.content,
        "finish_reason": choice.finish_reason,
        "tokens": [c.token for c in choice.logprobs.content],
    }
    log_dir = Path(t["extra_info"]["stop_log_dir"])
    (log_dir / f"{os.environ['AGENT_EPISODE_ID']}.json").write_text(json.dumps(record))
    truth = str(t["reward_model"]["ground_truth"]).strip()
    post_score(float((choice.message.content or "").strip() == f"\\boxed{{{truth}"))
