"""episode.decide: one status per episode, checked in the documented order."""

from __future__ import annotations

import pytest

from verl_ext.agent.episode import DROP_STATUSES, Status, decide, stale_mask, staleness
from verl_ext.agent.trajectory import Round

TWO = [Round([1], [2], [-0.1]), Round([1, 2, 3], [4], [-0.2])]
SPLIT = [Round([1], [2], [-0.1]), Round([9, 3], [4], [-0.2])]


def test_ok_trains_the_joined_episode():
    o = decide(TWO, exit_code=0, timed_out=False, score_posted=True)
    assert o.status is Status.OK and o.segment.response_ids == [2, 3, 4] and o.n_segments == 1 and o.use_agent_score


@pytest.mark.parametrize(
    "rounds, kw, status",
    [
        (TWO, {"exit_code": None, "timed_out": True, "score_posted": True}, Status.TIMEOUT),
        (TWO, {"exit_code": -9, "timed_out": False, "score_posted": False}, Status.CRASHED),
        ([], {"exit_code": 0, "timed_out": False, "score_posted": True}, Status.NO_ROUNDS),
        (SPLIT, {"exit_code": 0, "timed_out": False, "score_posted": True}, Status.REWRITE),
        (TWO, {"exit_code": 0, "timed_out": False, "score_posted": False}, Status.NO_SCORE),
        (SPLIT, {"exit_code": 1, "timed_out": False, "score_posted": False}, Status.CRASHED),  # crash checked first
    ],
)
def test_dropped(rounds, kw, status):
    o = decide(rounds, **kw)
    assert o.status is status and o.segment is None and status.value in DROP_STATUSES


def test_rewrite_last_trains_the_final_segment_and_reward_fn_needs_no_score():
    o = decide(SPLIT, exit_code=0, timed_out=False, score_posted=False, on_rewrite="last", score_source="reward_fn")
    assert o.status is Status.OK and o.n_segments == 2 and o.segment.prompt_ids == [9, 3] and not o.use_agent_score


def test_bad_policy_names():
    with pytest.raises(ValueError, match="on_rewrite"):
        decide(TWO, exit_code=0, timed_out=False, score_posted=True, on_rewrite="keep")
    with pytest.raises(ValueError, match="score_source"):
        decide(TWO, exit_code=0, timed_out=False, score_posted=True, score_source="judge")


def reference_staleness(step, version):
    return 0 if version is None else (step - 1) - version


@pytest.mark.parametrize("step", [1, 2, 5])
def test_staleness_and_the_bound(step):
    versions = [None, 0, 1, step - 1, step - 2, step - 3]
    got = staleness(step, versions)
    assert got.tolist() == [reference_staleness(step, v) for v in versions]
    # sync: every episode sampled by the weights the step trains (version step - 1) is 0 stale
    assert staleness(step, [step - 1]).tolist() == [0]
    for bound in (0, 1, 2):
        assert stale_mask(step, versions, bound).tolist() == [reference_staleness(step, v) > bound for v in versions]
    with pytest.raises(ValueError, match="max_staleness"):
        stale_mask(step, versions, -1)
