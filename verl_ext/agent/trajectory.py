"""Join the rounds of one agent episode into verl's multi-turn sample format (pure: no I/O, no Ray).

An episode is a sequence of rounds, each what the gateway sent to the rollout and what came back:
`prompt_ids` (the full context of that call, already templated), `response_ids` (the tokens the policy sampled) and
their `log_probs`. Round k *continues* the trajectory when its prompt starts with everything seen so far
(prompt_0 + response_0 + context_1 + response_1 + ... + response_{k-1}), token for token; the tokens between the
previous response and the end of round k's prompt are the environment's (tool results, user turns, the chat
template's turn markers) and get mask 0, the sampled tokens mask 1 - verl's layout:

    responses:     | sampled_0 | context_1 | sampled_1 | ... |
    response_mask: | 1 ... 1   | 0 ... 0   | 1 ... 1   | ... |

A round whose prompt does not extend the trajectory means the agent rewrote earlier history (edited or dropped a
message, summarised the context): training on the joined tokens would credit the policy with text it never
produced in that context. Such an episode is *split*: a new segment starts at that round. Which segment is trained
(or none) is the caller's policy (`external_agent.on_rewrite`); this module only finds the segments.

`truncate` cuts a sample to verl's `rollout.response_length` (as verl's own loops do): the tail is lost, never
shifted, so masks and log-probs stay aligned with their tokens.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Round:
    prompt_ids: list[int]
    response_ids: list[int]
    log_probs: list[float] | None = None  # None when the rollout did not return log-probs
    policy_version: int | None = None  # the rollout's weight version (verl's global_steps) that sampled it

    def __post_init__(self):
        if self.log_probs is not None and len(self.log_probs) != len(self.response_ids):
            raise ValueError(f"round has {len(self.response_ids)} response tokens but {len(self.log_probs)} log-probs")


@dataclass
class Segment:
    """One trainable sample: rounds[first:first + n_rounds] of the episode joined."""

    prompt_ids: list[int]
    response_ids: list[int] = field(default_factory=list)
    response_mask: list[int] = field(default_factory=list)
    log_probs: list[float] | None = field(default_factory=list)
    first_round: int = 0
    n_rounds: int = 0

    min_version: int | None = None  # oldest policy version among its rounds (None: the rollout reported none)

    @property
    def tokens(self) -> list[int]:
        return self.prompt_ids + self.response_ids

    @property
    def num_turns(self) -> int:
        """verl's `__num_turns__` convention (messages): the first prompt, then per round one assistant turn and,
        between rounds, one context block: 1 + n + (n - 1)."""
        return 2 * self.n_rounds


def _start(r: Round, index: int) -> Segment:
    return Segment(
        prompt_ids=list(r.prompt_ids),
        response_ids=list(r.response_ids),
        response_mask=[1] * len(r.response_ids),
        log_probs=list(r.log_probs) if r.log_probs is not None else None,
        first_round=index,
        n_rounds=1,
        min_version=r.policy_version,
    )


def _older(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else min(a, b)


def extends(seq: list[int], prompt_ids: list[int]) -> bool:
    """True iff `prompt_ids` starts with all of `seq` (so nothing the policy produced was changed)."""
    return len(prompt_ids) >= len(seq) and prompt_ids[: len(seq)] == seq


def assemble_segments(rounds: list[Round]) -> list[Segment]:
    """Split an episode's rounds into maximal continuing segments (see module docstring). O(total tokens)."""
    segments: list[Segment] = []
    seq: list[int] = []  # the current segment's tokens, kept flat so the prefix test is one slice compare
    for i, r in enumerate(rounds):
        if segments and extends(seq, r.prompt_ids):
            seg = segments[-1]
            context = r.prompt_ids[len(seq) :]
            seg.response_ids += context + list(r.response_ids)
            seg.response_mask += [0] * len(context) + [1] * len(r.response_ids)
            if seg.log_probs is not None and r.log_probs is not None:
                seg.log_probs += [0.0] * len(context) + list(r.log_probs)
            else:
                seg.log_probs = None  # one round without log-probs: the sample has none (verl then recomputes)
            seg.n_rounds += 1
            seg.min_version = _older(seg.min_version, r.policy_version)
            seq += context + list(r.response_ids)
        else:
            segments.append(_start(r, i))
            seq = list(r.prompt_ids) + list(r.response_ids)
    return segments


def truncate(seg: Segment, max_response_len: int) -> Segment:
    """The segment with its response side cut to `max_response_len` tokens (mask and log-probs cut alike)."""
    if len(seg.response_ids) <= max_response_len:
        return seg
    return Segment(
        prompt_ids=seg.prompt_ids,
        response_ids=seg.response_ids[:max_response_len],
        response_mask=seg.response_mask[:max_response_len],
        log_probs=seg.log_probs[:max_response_len] if seg.log_probs is not None else None,
        first_round=seg.first_round,
        n_rounds=seg.n_rounds,
        min_version=seg.min_version,
    )
