"""The episode ledger: every episode of every trained step once, across a crash and a resume."""

from __future__ import annotations

import pytest

from verl_ext.agent.ledger import EpisodeLedger
from verl_ext.metrics_log import read_jsonl


def step_ids(step: int, n: int = 4, attempt: int = 0) -> list[str]:
    return [f"s{step}-a{attempt}-e{i}" for i in range(n)]


def test_records_and_refuses_repeats(tmp_path):
    led = EpisodeLedger(tmp_path / "episodes.jsonl")
    led.record(1, step_ids(1), ["ok", "crashed", "ok", "timeout"], [0, 0, 0, 0])
    (line,) = read_jsonl(tmp_path / "episodes.jsonl")
    assert line == {
        "step": 1,
        "trained": ["s1-a0-e0", "s1-a0-e2"],
        "dropped": {"s1-a0-e1": "crashed", "s1-a0-e3": "timeout"},
        "staleness": {"s1-a0-e0": 0, "s1-a0-e2": 0},
    }
    with pytest.raises(RuntimeError, match="trained twice"):
        led.record(2, ["new", "s1-a0-e3"], ["ok", "ok"])  # a dropped id counts as used too
    with pytest.raises(RuntimeError, match="trained twice"):
        led.record(2, ["x", "x"], ["ok", "ok"])
    with pytest.raises(ValueError, match="statuses"):
        led.record(2, ["x"], ["ok", "ok"])
    led.close()


def test_kill_and_resume_loses_nothing_and_repeats_nothing(tmp_path):
    path = tmp_path / "episodes.jsonl"
    led = EpisodeLedger(path)
    for step in (1, 2, 3):
        led.record(step, step_ids(step), ["ok"] * 4)
    with open(path, "a") as f:  # killed while writing step 4's line
        f.write('{"step": 4, "trained": ["s4-a0')
    # Resume from the checkpoint of step 2: steps 3 and 4 are redone with new episodes.
    led = EpisodeLedger(path, resume_from_step=2)
    assert led.seen == set(step_ids(1) + step_ids(2))
    with pytest.raises(RuntimeError, match="trained twice"):
        led.record(3, step_ids(2), ["ok"] * 4)
    led.record(3, step_ids(3, attempt=1), ["ok", "ok", "no_score", "ok"])
    led.record(4, step_ids(4, attempt=1), ["ok"] * 4)
    led.close()
    lines = read_jsonl(path)
    assert [r["step"] for r in lines] == [1, 2, 3, 4]
    every = [e for r in lines for e in r["trained"] + list(r["dropped"])]
    assert len(every) == 16 == len(set(every))
    assert not any("a0" in e for r in lines[2:] for e in r["trained"])  # the killed attempt's episodes are gone
