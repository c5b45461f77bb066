"""Strategic grams mined from a model's own replies (HICRA, Wang et al., arXiv 2509.03646, derive theirs from their
models' reasoning text; the 18 defaults in gram_match.py are phrases of long chain-of-thought models, which a small
model writing short worked steps never says). Pure: texts in, grams out.

The rule, applied to sampled replies to training questions and whether each was right:

1. Candidates: runs of 1 to ``max_words`` words (lower-cased, two letters or more) inside stretches of text with no
   digit or symbol, so a gram never spans a number, a variable or an operator: ``subtract 2 from both sides`` gives
   ``subtract`` and ``from both sides``, never ``2``.
2. Kept if it occurs in at least ``min_df`` of the **right** replies (document frequency): the moves that lead to
   right answers, not any frequent phrase.
3. Dropped if it is boilerplate the prompt fixes: any candidate that also occurs in one of ``exclude`` (the answer
   sentence ``The final answer is \\boxed{}`` and the instruction), or made of function words only (``of the``).
4. Dropped if a longer kept gram containing it occurs in at least ``absorb`` of its right replies: the phrase is the
   unit (``divide both sides by`` absorbs ``divide both``).

Returned with their document frequencies in right and in all replies, most frequent first.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

# words that carry no move on their own (a gram made of these only is dropped; they may sit inside a kept gram)
FUNCTION_WORDS = frozenset(
    "a an and are as at be by can for from get gets in is it its of on or that the this to we with you".split()
)
DEFAULT_MIN_DF = 0.1  # rule 2's share of right replies
_STRETCH = re.compile(r"[^A-Za-z' ]+")


@dataclass(frozen=True)
class MinedGram:
    gram: str
    df_right: float  # share of right replies containing it
    df_all: float  # share of all replies containing it


def candidates(text: str, max_words: int) -> set[str]:
    """The word n-grams (1 to max_words) of one text, within digit- and symbol-free stretches (rule 1)."""
    out = set()
    for stretch in _STRETCH.split(text):
        words = [w for w in stretch.lower().split() if len(w.strip("'")) > 1]
        for n in range(1, max_words + 1):
            for i in range(len(words) - n + 1):
                out.add(" ".join(words[i : i + n]))
    return out


def mine_grams(
    replies: Sequence[str],
    right: Sequence[bool],
    exclude: Iterable[str] = (),
    min_df: float = DEFAULT_MIN_DF,
    max_words: int = 4,
    absorb: float = 0.8,
) -> list[MinedGram]:
    """Strategic grams of these replies by the module's rule."""
    if len(replies) != len(right):
        raise ValueError(f"replies ({len(replies)}) and right ({len(right)}) differ in length")
    n_right = sum(bool(r) for r in right)
    if n_right == 0:
        raise ValueError("no right reply: the rule counts grams in right replies")
    if not (0 < min_df <= 1 and 0 < absorb <= 1 and max_words >= 1):
        raise ValueError(f"need 0 < min_df <= 1, 0 < absorb <= 1, max_words >= 1; got {min_df}, {absorb}, {max_words}")
    per_reply = [candidates(t, max_words) for t in replies]
    df_right = Counter(g for grams, r in zip(per_reply, right) if r for g in grams)
    df_all = Counter(g for grams in per_reply for g in grams)
    boilerplate = set().union(*(candidates(t, max_words) for t in exclude)) if exclude else set()
    kept = {
        g: c / n_right
        for g, c in df_right.items()
        if c / n_right >= min_df and g not in boilerplate and not set(g.split()) <= FUNCTION_WORDS
    }
    absorbed = {g for g in kept if any(h != g and f" {g} " in f" {h} " and kept[h] >= absorb * kept[g] for h in kept)}
    out = [MinedGram(g, kept[g], df_all[g] / len(replies)) for g in kept if g not in absorbed]
    return sorted(out, key=lambda m: (-m.df_right, m.gram))
