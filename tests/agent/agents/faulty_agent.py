"""A test agent whose behaviour is chosen by the task (extra_info.behavior), so one batch holds every fault case
with known counts. Uses the openai client (and raw HTTP only to send a malformed body on purpose).

    ok        play the guessing game (two rounds) and post a score
    crash     one round, then die by SIGKILL mid-episode (as a killed agent)
    slow      one round, then sleep past the loop's timeout
    bad_json  send a malformed body (must get 400), then play normally
    rewrite   two rounds where the second rewrites the first user message
    no_score  play, exit 0 without posting a score
"""

from __future__ import annotations

import json
import os
import signal
import time
import urllib.error
import urllib.request

from openai import OpenAI

from verl_ext.agent.examples.score import post_score, task

ASK = "Guess my secret number between 0 and 4. Put the final answer within \\boxed{}."


def chat(client, messages):
    # short rounds keep the test fast; the gateway also caps them by the episode's remaining response budget
    return client.chat.completions.create(model="policy", messages=messages, max_tokens=8).choices[0].message.content


def main() -> None:
    t = task()
    behavior = t["extra_info"]["behavior"]
    client = OpenAI(max_retries=50)
    messages = [{"role": "user", "content": ASK}]
    if behavior == "bad_json":
        req = urllib.request.Request(
            os.environ["OPENAI_BASE_URL"] + "/chat/completions",
            data=b"{not json",
            method="POST",
            headers={"Authorization": f"Bearer {os.environ['OPENAI_API_KEY']}"},
        )
        try:
            urllib.request.urlopen(req, timeout=30)
            raise SystemExit("malformed JSON was accepted")
        except urllib.error.HTTPError as e:
            if e.code != 400 or "not valid JSON" not in json.loads(e.read())["error"]["message"]:
                raise SystemExit(f"expected 400 for malformed JSON, got {e.code}") from None
    reply = chat(client, messages)
    if behavior == "crash":
        os.kill(os.getpid(), signal.SIGKILL)
    if behavior == "slow":
        time.sleep(3600)
    messages += [
        {"role": "assistant", "content": reply},
        {"role": "user", "content": "Again. Put the final answer within \\boxed{}."},
    ]
    if behavior == "rewrite":
        messages[0] = {"role": "user", "content": "Pick a number from 0 to 4 in \\boxed{}."}
    chat(client, messages)
    if behavior != "no_score":
        post_score(1.0 if str(t["reward_model"]["ground_truth"]) in reply else 0.0)


if __name__ == "__main__":
    main()
