"""A long-running agent worker for `external_agent.launch=pool`: polls the gateway's `/tasks/next`, plays the
guessing game of `guess_agent` on each task through the episode's base URL, posts the score, and polls again.

    python -m verl_ext.agent.examples.pool_worker --gateway http://127.0.0.1:8700 [--max-idle-s 60]

The worker needs only the gateway's address and key (OPENAI_API_KEY); everything else comes with each task.
"""

from __future__ import annotations

import argparse
import json
import os
import urllib.request

from openai import OpenAI

from verl_ext.agent.examples.guess_agent import play
from verl_ext.agent.examples.score import post_score


def next_task(gateway: str, wait_s: float) -> dict | None:
    req = urllib.request.Request(
        f"{gateway}/tasks/next?wait_s={wait_s}",
        headers={"Authorization": f"Bearer {os.environ.get('OPENAI_API_KEY', '')}"},
    )
    with urllib.request.urlopen(req, timeout=wait_s + 30) as resp:
        return json.loads(resp.read()) if resp.status == 200 else None  # 204: nothing yet


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gateway", required=True, help="http://host:port of the external_agent gateway")
    ap.add_argument("--max-idle-s", type=float, default=60.0, help="exit after this long without a task")
    args = ap.parse_args()
    while True:
        job = next_task(args.gateway, args.max_idle_s)
        if job is None:
            return
        client = OpenAI(base_url=job["base_url"], api_key=os.environ.get("OPENAI_API_KEY", ""))
        post_score(play(client, job["task"]), url=job["score_url"])


if __name__ == "__main__":
    main()
