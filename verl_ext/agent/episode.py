"""What becomes of one agent episode: trained, or dropped with a counted reason (pure: no I/O, no Ray).

An episode ends in exactly one status. Only `ok` episodes are trained; every other status is dropped, and a
dropped episode still occupies its row of verl's batch (verl's batch shape is fixed by the dataloader) as a
placeholder whose response mask is all 0, so it contributes no loss, and which `verl_ext.trainer.agent_episodes`
moves out of its task's advantage group and records in the episode log. Nothing is dropped silently: the status is a
column of the batch and a counter of the step's metrics.

Statuses, in the order they are checked:
- `timeout`:  the agent process did not finish within `external_agent.timeout_s` (it is killed);
- `crashed`:  the agent exited with a non-zero code (killed mid-episode, an exception, ...);
- `no_rounds`: the agent never called the model;
- `rewrite`:  the agent rewrote earlier history (see `trajectory`) and `on_rewrite=drop`;
- `no_score`: the agent posted no score and `score_source=agent` (with `score_source=reward_fn` verl's reward
  function scores the trained transcript instead and a posted score is ignored: one source per run, so every row
  of a batch carries the same reward keys);
- `ok`;
- `stale` (decided by the trainer, not here): in async mode the episode was sampled by a policy more than
  `external_agent.max_staleness` updates older than the one it would train (see `staleness`).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

import numpy as np

from verl_ext.agent.trajectory import Round, Segment, assemble_segments

ON_REWRITE = ("drop", "last")  # the first is the default
SCORE_SOURCES = ("agent", "reward_fn")  # the first is the default


class Status(StrEnum):
    OK = "ok"
    TIMEOUT = "timeout"
    CRASHED = "crashed"
    NO_ROUNDS = "no_rounds"
    REWRITE = "rewrite"
    NO_SCORE = "no_score"
    STALE = "stale"


DROP_STATUSES = tuple(s.value for s in Status if s is not Status.OK)


@dataclass(frozen=True)
class Outcome:
    status: Status
    segment: Segment | None  # what is trained (None when dropped)
    n_segments: int  # > 1: the agent rewrote history n_segments - 1 times
    use_agent_score: bool  # False: the reward function scores the transcript


def check_rules(on_rewrite: str, score_source: str, where: str = "") -> None:
    """ValueError unless both are known (`where`: the config block's prefix for the message)."""
    if on_rewrite not in ON_REWRITE:
        raise ValueError(f"{where}on_rewrite must be one of {ON_REWRITE}, got {on_rewrite!r}")
    if score_source not in SCORE_SOURCES:
        raise ValueError(f"{where}score_source must be one of {SCORE_SOURCES}, got {score_source!r}")


def decide(
    rounds: list[Round],
    *,
    exit_code: int | None,
    timed_out: bool,
    score_posted: bool,
    on_rewrite: str = ON_REWRITE[0],
    score_source: str = SCORE_SOURCES[0],
) -> Outcome:
    """The status of a finished episode and the segment to train (see module docstring for the order)."""
    check_rules(on_rewrite, score_source)
    segments = assemble_segments(rounds)
    n = len(segments)
    use_agent_score = score_posted and score_source != "reward_fn"
    if timed_out:
        return Outcome(Status.TIMEOUT, None, n, use_agent_score)
    if exit_code != 0:
        return Outcome(Status.CRASHED, None, n, use_agent_score)
    if n == 0:
        return Outcome(Status.NO_ROUNDS, None, n, use_agent_score)
    if n > 1 and on_rewrite == "drop":
        return Outcome(Status.REWRITE, None, n, use_agent_score)
    if score_source == "agent" and not score_posted:
        return Outcome(Status.NO_SCORE, None, n, use_agent_score)
    # The last segment is the one that led to the final outcome the score rates.
    return Outcome(Status.OK, segments[-1], n, use_agent_score)


def staleness(trained_step: int, min_version) -> np.ndarray:
    """Policy updates between the oldest weights that sampled an episode and the weights it trains.

    verl stamps every generation with the rollout's weight version `v` (the `global_steps` of the last weight sync:
    0 before any update, k after step k's). Step k trains the policy of version k - 1, so an episode whose oldest
    round came from version v is (k - 1) - v updates stale: 0 in sync mode, 1 for an episode generated one step
    ahead (async). An unknown version (None/NaN: the rollout reported none) counts as 0, i.e. on-policy.
    """
    v = np.asarray([np.nan if x is None else x for x in np.atleast_1d(min_version)], dtype=np.float64)
    return np.where(np.isnan(v), 0, (trained_step - 1) - np.nan_to_num(v)).astype(np.int64)


def stale_mask(trained_step: int, min_version, max_staleness: int) -> np.ndarray:
    """True where an episode is more than `max_staleness` updates stale (dropped as `stale`)."""
    if max_staleness < 0:
        raise ValueError(f"max_staleness must be >= 0, got {max_staleness}")
    return staleness(trained_step, min_version) > max_staleness
