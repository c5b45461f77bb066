"""An episode's transcript (`verl_ext.agent.transcript`): the conversation the gateway compared and the ids it
recorded, side by side (on real episodes: tests/recipe/composer/test_e2e_composer_real.py)."""

from __future__ import annotations

import json

from verl_ext.agent.gateway.core import Session
from verl_ext.agent.trajectory import Round, assemble_segments
from verl_ext.agent.transcript import transcript, write_transcript


def test_transcript_holds_the_messages_the_tools_and_the_trained_ids(tmp_path):
    s = Session(episode_id="e1", sampling_params={})
    s.history = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]
    s.tools_key = json.dumps([{"type": "function", "function": {"name": "calc"}}])
    s.rounds = [Round([1, 2], [3, 4], None)]
    s.turns = [{"messages": s.history[:1], "tools": None, "tool_choice": "auto", "reply": s.history[1]}]
    (segment,) = assemble_segments(s.rounds)
    path = write_transcript(tmp_path / "t", transcript(s, "ok", segment))
    record = json.loads(path.read_text())
    assert path.name == "e1.json" and record["status"] == "ok" and record["rounds"] == 1
    assert record["messages"] == s.history and record["tools"][0]["function"]["name"] == "calc"
    assert record["turns"] == s.turns  # each round's request and reply (the Composer reads them back)
    assert record["prompt_ids"] == [1, 2] and record["response_ids"] == [3, 4] and record["response_mask"] == [1, 1]
    dropped = transcript(Session(episode_id="e2", sampling_params={}), "crashed", None)
    assert dropped["messages"] is None and dropped["tools"] is None and dropped["prompt_ids"] is None
