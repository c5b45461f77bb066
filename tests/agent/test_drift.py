"""Drift accounting from the batch column to the step's metrics and the ledger (pure parts, real files)."""

from __future__ import annotations

import json

from verl_ext.agent.gateway.core import SPLIT_REASONS, TOOL_FAULTS, Drift
from verl_ext.agent.ledger import EpisodeLedger
from verl_ext.metrics_log import read_jsonl
from verl_ext.trainer.agent_episodes import drift_metrics


def column(*drifts: Drift):
    return [json.dumps(d.as_dict(), sort_keys=True) for d in drifts]


def test_drift_metrics_sum_the_episodes_and_name_every_reason():
    a = Drift(extended=3)
    b = Drift(extended=1)
    b.split["rewrite"] += 1
    b.split["template_mismatch"] += 2
    b.tool_faults["malformed"] += 2
    c = Drift()  # a one-round episode: nothing to join
    m, notable = drift_metrics(column(a, b, c))
    assert m["agent/drift/extended"] == 4
    assert {r: m[f"agent/drift/split/{r}"] for r in SPLIT_REASONS} == {
        "rewrite": 1,
        "reply_changed": 0,
        "parse_failure": 0,
        "tools_changed": 0,
        "template_mismatch": 2,
    }
    assert {k: m[f"agent/tool_faults/{k}"] for k in TOOL_FAULTS} == {
        "malformed": 2,
        "unknown_tool": 0,
        "choice_unmet": 0,
    }
    assert m["agent/drift/splits_per_1k_rounds"] == 1000 * 3 / 7  # 3 splits of 7 joins
    assert sorted(notable) == [0, 1]
    assert drift_metrics(column(c))[0]["agent/drift/splits_per_1k_rounds"] == 0.0


def test_ledger_records_drift_per_episode(tmp_path):
    led = EpisodeLedger(tmp_path / "episodes.jsonl")
    d = Drift(extended=2)
    d.split["reply_changed"] += 1
    led.record(1, ["e1", "e2"], ["ok", "rewrite"], [0, 0], drift={"e2": d.as_dict()})
    led.record(2, ["e3"], ["ok"], [0])
    led.close()
    lines = read_jsonl(tmp_path / "episodes.jsonl")
    assert lines[0]["drift"] == {"e2": {"extended": 2, "split": {"reply_changed": 1}, "tool_faults": {}}}
    assert "drift" not in lines[1]
