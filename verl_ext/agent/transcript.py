"""An episode's transcript: the conversation the gateway saw and the token ids it recorded, one JSON file per
episode in `external_agent.transcripts` (off by default).

Why: "token-true" is a claim about two things a user cannot see side by side: the messages the agent exchanged and
the ids that were trained. A transcript holds both (the last chat request's messages and tools, the reply appended,
as the gateway compared them: `core.Session.history`; the trained sample's prompt ids, response ids and mask), so
rendering the messages with the run's chat template and comparing the ids checks the claim on real episodes
(tests/recipe/composer/test_e2e_composer_real.py does, on the real agent).

It also holds each round's request as the policy saw it (`turns`: `core.Session.turns`, the messages, tools and tool
choice of that round's chat request and the reply it got), from which the Composer marks error sites at failed tool
results and asks teachers about a turn (`verl_ext/composer/tool_errors.py`, `turn_replay.py`): a recorded real
episode can be read back as the trainer would see it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def transcript(session, status: str, segment) -> dict[str, Any]:
    """The JSON-able transcript of a finished episode (`segment`: the trained one, None when dropped)."""
    return {
        "episode_id": session.episode_id,
        "status": status,
        "messages": session.history,
        "tools": json.loads(session.tools_key) if session.tools_key else None,
        "rounds": len(session.rounds),
        "turns": list(session.turns),
        "prompt_ids": None if segment is None else list(segment.prompt_ids),
        "response_ids": None if segment is None else list(segment.response_ids),
        "response_mask": None if segment is None else list(segment.response_mask),
    }


def write_transcript(directory: str | Path, record: dict[str, Any]) -> Path:
    path = Path(directory) / f"{record['episode_id']}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record))
    return path
