"""Post an episode's score to the gateway (`AGENT_SCORE_URL`); standard library only, so an agent needs nothing
but `openai`. Body: {"score": float, "acc": float?, "step_metas": [dict|null]?}. `answer_score` grades a final answer
with the project's math reward (imported on call)."""

from __future__ import annotations

import json
import os
import urllib.request


def post_score(score: float, acc: float | None = None, step_metas: list | None = None, url: str | None = None) -> dict:
    """POST the score to `url` (default: the AGENT_SCORE_URL of a process-mode agent)."""
    body = {"score": float(score)}
    if acc is not None:
        body["acc"] = float(acc)
    if step_metas is not None:
        body["step_metas"] = step_metas
    req = urllib.request.Request(
        url or os.environ["AGENT_SCORE_URL"],
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {os.environ.get('OPENAI_API_KEY', '')}"},
    )
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.loads(resp.read())


def task() -> dict:
    return json.loads(os.environ["AGENT_TASK"])


def answer_score(answer: str, t: dict) -> float:
    """The project's math reward (`verl_ext.reward.math_reward`, the trainer's reward function on the math tasks) of
    an agent's final answer against the task's ground truth: so an agent's accuracy is graded as the same model's
    answers without tools are (``\\boxed{0.5}`` is right for ``1/2``)."""
    from verl_ext.reward.math_reward import compute_score

    truth = str(t["reward_model"]["ground_truth"]).strip()
    return float(compute_score(str(t.get("data_source") or ""), answer or "", truth)["score"])
