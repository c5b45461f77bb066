"""trajectory.assemble_segments / truncate against a slow, obviously-correct reference, on random episodes."""

from __future__ import annotations

import random

import pytest

from verl_ext.agent.trajectory import Round, Segment, assemble_segments, truncate


def reference_segments(rounds: list[Round]) -> list[dict]:
    """Per round: is it a continuation (its prompt starts, token by token, with the previous round's prompt +
    response in the same segment)? Then label every token of the joined sequence by who produced it."""
    out: list[dict] = []
    for r in rounds:
        cont = False
        if out:
            prev = out[-1]["full"]
            cont = len(r.prompt_ids) >= len(prev) and all(r.prompt_ids[i] == prev[i] for i in range(len(prev)))
        if not cont:
            out.append({"prompt": list(r.prompt_ids), "full": list(r.prompt_ids), "labels": [], "lps": [], "n": 0})
        seg = out[-1]
        for i in range(len(seg["full"]), len(r.prompt_ids)):  # environment / template tokens
            seg["full"].append(r.prompt_ids[i])
            seg["labels"].append(0)
            seg["lps"].append(0.0)
        for j, tok in enumerate(r.response_ids):  # sampled by the policy
            seg["full"].append(tok)
            seg["labels"].append(1)
            seg["lps"].append(r.log_probs[j])
        seg["n"] += 1
    return out


def random_episode(rng: random.Random, n_rounds: int, p_rewrite: float) -> list[Round]:
    rounds, seq = [], [rng.randrange(100) for _ in range(rng.randrange(1, 6))]
    for _ in range(n_rounds):
        if rounds and rng.random() < p_rewrite:  # rewrite: change or drop a token the episode already holds
            k = rng.randrange(len(seq))
            seq = seq[:k] + ([] if rng.random() < 0.5 else [seq[k] + 1000]) + seq[k + 1 :]
        prompt = seq + [rng.randrange(100) for _ in range(rng.randrange(0, 4))]
        resp = [rng.randrange(100) for _ in range(rng.randrange(0, 5))]
        rounds.append(Round(prompt, resp, [-rng.random() for _ in resp]))
        seq = prompt + resp
    return rounds


@pytest.mark.parametrize("seed", range(200))
def test_matches_reference(seed):
    rng = random.Random(seed)
    rounds = random_episode(rng, rng.randrange(1, 6), p_rewrite=0.3)
    got, want = assemble_segments(rounds), reference_segments(rounds)
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.prompt_ids == w["prompt"]
        assert g.tokens == w["full"]
        assert g.response_mask == w["labels"]
        assert g.log_probs == pytest.approx(w["lps"])
        assert g.n_rounds == w["n"]


def test_continuing_rounds_join_with_context_masked():
    rounds = [Round([1, 2], [3, 4], [-0.1, -0.2]), Round([1, 2, 3, 4, 9, 9], [5], [-0.3])]
    (seg,) = assemble_segments(rounds)
    assert seg.prompt_ids == [1, 2]
    assert seg.response_ids == [3, 4, 9, 9, 5] and seg.response_mask == [1, 1, 0, 0, 1]
    assert seg.log_probs == [-0.1, -0.2, 0.0, 0.0, -0.3] and seg.num_turns == 4


def test_rewrite_splits_and_round_without_logprobs_drops_them():
    rounds = [Round([1, 2], [3]), Round([1, 7, 3, 9], [4], None)]
    segs = assemble_segments([Round([1, 2], [3], [-0.5]), rounds[1]])
    assert [s.first_round for s in segs] == [0, 1]
    assert segs[1].prompt_ids == [1, 7, 3, 9] and segs[1].log_probs is None
    joined = assemble_segments([Round([1], [2], [-0.1]), Round([1, 2, 5], [6], None)])
    assert len(joined) == 1 and joined[0].log_probs is None


def test_log_probs_must_match_tokens():
    with pytest.raises(ValueError, match="2 response tokens but 1 log-probs"):
        Round([1], [2, 3], [-0.1])


def test_truncate_cuts_all_columns_alike():
    seg = Segment([1], [2, 3, 4, 5], [1, 0, 0, 1], [-0.2, 0.0, 0.0, -0.5], 0, 2)
    t = truncate(seg, 3)
    assert (t.response_ids, t.response_mask, t.log_probs) == ([2, 3, 4], [1, 0, 0], [-0.2, 0.0, 0.0])
    assert truncate(seg, 4) is seg
