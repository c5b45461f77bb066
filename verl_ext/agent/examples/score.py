"""Post an episode's score to the gateway (`AGENT_SCORE_URL`); standard library only, so an agent needs nothing
but `openai`. Body: {"score": float, "acc": float?, "step_metas": [dict|null]?}."""

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
