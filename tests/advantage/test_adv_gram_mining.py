"""Mining strategic grams from replies (verl_ext/advantage/gram_mining.py): each rule of the module docstring on
hand-written replies, and the whole rule against a slow re-statement of it."""

from __future__ import annotations

import itertools
import re

import pytest

from verl_ext.advantage.gram_mining import FUNCTION_WORDS, candidates, mine_grams

REPLIES = [
    "First, subtract 2 from both sides: 3*x = 12. Then divide both sides by 3: x = 4. The final answer is \\boxed{4}.",
    "First, subtract 5 from both sides: x = 1. The final answer is \\boxed{1}.",
    "Then divide both sides by 2: y = 3. The final answer is \\boxed{3}.",
    "I think it is 7. The final answer is \\boxed{7}.",
]
RIGHT = [True, True, False, True]
BOILERPLATE = ["The final answer is \\boxed{}."]


def test_candidates_never_span_a_number_or_symbol():
    got = candidates("Subtract 2 from both sides: 3*x = 12", max_words=3)
    assert "subtract" in got and "from both sides" in got and "both sides" in got
    assert not any(re.search(r"\d|\*|=", g) for g in got)
    assert "subtract from" not in got  # the number between them cuts the stretch


def test_each_rule_on_hand_written_replies():
    got = {m.gram: (m.df_right, m.df_all) for m in mine_grams(REPLIES, RIGHT, BOILERPLATE, min_df=0.5)}
    # rule 2: in 2 of 3 right replies; "divide both sides by" is in one right reply only
    assert got["subtract"] == pytest.approx((2 / 3, 2 / 4))
    assert "divide both sides by" not in got
    # rule 3: the answer sentence is boilerplate, "the" alone is a function word
    assert not any("final" in g or "answer" in g for g in got) and "the" not in got
    # rule 4: "from both sides" is in every right reply "both sides" is in, so it absorbs it; "first" stands alone
    assert "from both sides" in got and "both sides" not in got and "first" in got


def _slow(replies, right, exclude, min_df, max_words, absorb):
    def grams(text):
        out = set()
        for stretch in re.split(r"[^A-Za-z' ]+", text):
            words = [w for w in stretch.lower().split() if len(w.strip("'")) > 1]
            for n in range(1, max_words + 1):
                for i in range(len(words) - n + 1):
                    out.add(tuple(words[i : i + n]))
        return out

    per = [grams(t) for t in replies]
    n_right = sum(right)
    boiler = set().union(*(grams(t) for t in exclude))
    everything = set().union(*per)
    kept = {}
    for g in everything:
        df = sum(1 for gs, r in zip(per, right) if r and g in gs) / n_right
        if df >= min_df and g not in boiler and not all(w in FUNCTION_WORDS for w in g):
            kept[g] = df

    def inside(g, h):
        return any(h[i : i + len(g)] == g for i in range(len(h) - len(g) + 1)) and g != h

    return {" ".join(g): df for g, df in kept.items() if not any(inside(g, h) and kept[h] >= absorb * df for h in kept)}


@pytest.mark.parametrize("min_df,absorb", [(0.3, 0.8), (0.6, 1.0), (0.01, 0.5)])
def test_matches_a_slow_restatement_of_the_rule(min_df, absorb):
    words = ["first", "then", "subtract", "both", "sides", "from", "divide", "by", "the", "result", "is"]
    replies, right = [], []
    for i, combo in enumerate(itertools.islice(itertools.permutations(words, 5), 0, 400, 7)):
        replies.append(" ".join(combo[:3]) + f" {i} = {i + 1}. " + " ".join(combo[3:]) + ". The final answer is 3.")
        right.append(i % 3 != 0)
    got = {m.gram: m.df_right for m in mine_grams(replies, right, BOILERPLATE, min_df, 4, absorb)}
    want = _slow(replies, right, BOILERPLATE, min_df, 4, absorb)
    assert got.keys() == want.keys() and all(got[g] == pytest.approx(want[g]) for g in got)


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="differ in length"):
        mine_grams(["a"], [True, False])
    with pytest.raises(ValueError, match="no right reply"):
        mine_grams(["first step"], [False])
    with pytest.raises(ValueError, match="min_df"):
        mine_grams(["first step"], [True], min_df=0)
