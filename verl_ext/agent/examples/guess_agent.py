"""Two-round number guessing: the agent holds a secret digit (the task's ground truth), asks the model to guess it,
answers "higher"/"lower", lets it guess once more. Score 1 if either guess is right, else 0.

    python -m verl_ext.agent.examples.guess_agent      (run by the external_agent loop; env from the gateway)

Guesses are read from `\\boxed{d}` (the toy model's answer format); a reply without one is a wrong guess. Each
reply is capped at `GUESS_MAX_TOKENS` (env, default 16) tokens; when the episode's token budget is used up the
gateway answers 400 (`context_length_exceeded`, as OpenAI does) and the game ends with what was guessed so far.
"""

from __future__ import annotations

import os
import re

from openai import BadRequestError, OpenAI

from verl_ext.agent.examples.score import post_score, task

BOXED = re.compile(r"\\boxed\{\s*(-?\d+)\s*\}")


def guess_of(text: str) -> int | None:
    m = BOXED.search(text or "")
    return int(m.group(1)) if m else None


def play(client: OpenAI, t: dict) -> float:
    """One game on task `t` through `client` (whose base URL is the episode's); returns the score."""
    secret = int(str(t["reward_model"]["ground_truth"]).strip())
    hi = int((t.get("extra_info") or {}).get("max_digit", 4))
    messages = [
        {
            "role": "user",
            "content": f"Guess my secret number between 0 and {hi}. Put the final answer within \\boxed{{}}.",
        }
    ]
    won = False
    max_tokens = int(os.environ.get("GUESS_MAX_TOKENS", "16"))
    for round_ in range(2):
        try:
            out = client.chat.completions.create(model="policy", messages=messages, max_tokens=max_tokens)
        except BadRequestError as e:
            if e.code != "context_length_exceeded":
                raise
            break  # no budget left for another guess
        reply = out.choices[0].message.content
        messages.append({"role": "assistant", "content": reply})
        g = guess_of(reply)
        if g == secret:
            won = True
            break
        if round_ == 0:
            hint = "No answer found." if g is None else ("Higher." if g < secret else "Lower.")
            messages.append(
                {"role": "user", "content": f"{hint} Guess again. Put the final answer within \\boxed{{}}."}
            )
    return 1.0 if won else 0.0


def main() -> None:
    post_score(play(OpenAI(), task()))


if __name__ == "__main__":
    main()
