"""The Composer trainer's replay channel on agent episodes, without Ray: its own `_submit_teacher_queries` and
`_collect_teacher_answers` on a batch in verl's layout made from episodes the Agents SDK calculator agent played
through the gateway (tests/composer/agent_episodes.py), with the gateway's record as the `agent_turns` column, asking
three teachers on a real OpenAI-compatible server on 127.0.0.1 (tests/composer/test_turn_replay.py's). Checked: one
request per distinct asked turn, dropped and split episodes asked nothing, the pairs written to the pairs file with
their turns' tokens, and the agreement count on actions. The rows' layout: tests/composer/test_turn_replay.py."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest
import torch
from verl import DataProto

from recipe.composer.composer_ray_trainer import AgentComposerTrainer
from tests.composer.test_turn_replay import TeacherServer, pool_config
from verl_ext.agent.settings import AgentSettings
from verl_ext.agent.trajectory import assemble_segments
from verl_ext.composer.disagreement import DisagreementConfig, PairReader, PairWriter, ReplayTally, answer_key
from verl_ext.composer.rows import pack_rows
from verl_ext.composer.teacher_pool import TeacherPool


@pytest.fixture(scope="module")
def played():
    from tests.composer.agent_episodes import gateway_episodes

    return gateway_episodes()


def agent_batch(episodes, tok, status=None, segments=None) -> DataProto:
    segs = [assemble_segments(e["session"].rounds)[0] for e in episodes]
    rows = pack_rows([s.prompt_ids for s in segs], [s.response_ids for s in segs], tok.pad_token_id)
    for i, s in enumerate(segs):
        rows["response_mask"][i] = 0
        rows["response_mask"][i, : len(s.response_mask)] = torch.tensor(s.response_mask)
    n = len(episodes)
    nt = {
        "uid": np.array([e["question"] for e in episodes], dtype=object),
        "agent_episode_id": np.array([e["session"].episode_id for e in episodes], dtype=object),
        "agent_status": np.array(status or ["ok"] * n, dtype=object),
        "agent_segments": np.array(segments or [1] * n, dtype=object),
        "agent_turns": np.array([json.dumps(e["session"].turns) for e in episodes], dtype=object),
    }
    return DataProto.from_dict(tensors=rows, non_tensors=nt)


def trainer_parts(server, tmp_path) -> AgentComposerTrainer:
    """The agent trainer's replay state as its __init__ builds it (agent settings, teacher pool, pairs file, rule,
    tally), no workers."""
    t = object.__new__(AgentComposerTrainer)
    block = {"command": [sys.executable, "-V"], "launch": "process", "tool_parser": "line"}
    t.agent_settings = AgentSettings.from_mapping(block)
    t.global_steps = 3
    t.pool = TeacherPool(pool_config(server))
    t.pair_writer = PairWriter(tmp_path / "pairs.jsonl")
    t.pair_reader = PairReader(tmp_path / "pairs.jsonl")
    t.disagreement = DisagreementConfig(rule="majority", min_agree=2, normalize=answer_key)
    t.tally = ReplayTally()
    t._pending = []
    from collections import deque

    t._pair_queue = deque()
    return t


def test_agent_turns_are_asked_and_paired_by_the_trainer(played, tmp_path):
    episodes, tok = played
    server = TeacherServer()
    t = trainer_parts(server, tmp_path)
    try:
        # the fourth episode dropped (timeout), the fifth split: neither is asked
        batch = agent_batch(episodes, tok, status=["ok", "ok", "ok", "timeout", "ok"], segments=[1, 1, 1, 1, 2])
        t._submit_teacher_queries(batch)
        built = t._collect_teacher_answers(wait=True)
    finally:
        t.pool.close()
        t.pair_writer.close()
        server.close()
    # turns asked: 3 + 2 + 1 (tool calls and final answers of the three trained episodes), each by three teachers
    assert len(server.bodies) == 3 * 6
    assert all(b["tools"] == episodes[0]["session"].turns[0]["tools"] for b in server.bodies)
    assert built == 4 and t.tally.pairs_built == 4 and len(t._pair_queue) == 4 and not t._pending
    pairs = list(t._pair_queue)
    ids = [e["session"].episode_id for e in episodes]
    answer = "The final answer is \\boxed{{{}}}.".format
    assert [(p.trace_id, p.chosen, p.rejected) for p in pairs] == [
        (f"{ids[0]}:0", "calc: 16/5", "calc: (16 / 5"),
        (f"{ids[0]}:2", answer("16/5"), answer("16")),
        (f"{ids[1]}:1", answer("0.37"), answer("0.43")),
        (f"{ids[2]}:0", "calc: -1 / -2", answer("1")),
    ]
    for p in pairs:  # each carries its turn's tokens: what the policy saw and sampled there
        turn = p.prompt["turn"]
        e = next(e for e in episodes if p.trace_id.startswith(e["session"].episode_id))
        round_ = e["session"].rounds[turn]
        assert p.prompt["ids"] + p.prompt["context"] == round_.prompt_ids
        assert p.prompt["rejected_ids"] == round_.response_ids
    # agreement over the 6 queries' teacher pairs, on actions (16/5 and (16)/(5) agree)
    assert t.tally.queries == 6 and t.tally.teacher_pairs == 18
    assert t.tally.agreeing_pairs == 3 + 1 + 1 + 1 + 1 + 1


def test_a_call_format_the_pairs_cannot_be_written_in_is_refused(played, tmp_path):
    episodes, tok = played
    server = TeacherServer()
    t = trainer_parts(server, tmp_path)
    # a parser the gateway reads (verl's) but whose call format the pairs are not written in
    block = {"command": [sys.executable, "-V"], "launch": "process", "tool_parser": "qwen3_coder"}
    t.agent_settings = AgentSettings.from_mapping(block)
    try:
        from verl_ext.config.errors import ConfigError

        with pytest.raises(ConfigError, match="external_agent.tool_parser must be one of"):
            t._submit_teacher_queries(agent_batch(episodes, tok))
    finally:
        t.pool.close()
        t.pair_writer.close()
        server.close()
    assert not server.bodies
