"""Rule-based math reward for verl: the final ``\\boxed{}`` (or a configured regex) checked against the ground truth.

Several boxes (``\\boxed{1}, \\boxed{2}`` for a multi-part question) are joined the way math_verify joins them, by
letting math_verify read the response: a response with two or more box commands is scored by math_verify on the
response itself (from the line holding a point ``MULTI_BOX_CONTEXT_CHARS`` before the last box, to the end), not
on an extracted string. So ``\\boxed{1}, \\boxed{2}`` scores 1 for gold ``(1, 2)``, ``1, 2`` or ``\\{1, 2\\}`` and
0 for gold ``2``, while ``we get \\boxed{3}. So the final answer is \\boxed{5}`` scores 1 for gold ``5``, exactly as
math_verify scores them. Such responses skip the fast path (one child-process check each).

Use it as verl's custom reward function::

    reward.custom_reward_function.path=pkg://verl_ext.reward.math_reward
    reward.custom_reward_function.name=compute_score
    # optional, any MathRewardConfig field:
    +reward.custom_reward_function.reward_kwargs.timeout_s=3.0

Decision order, cheapest first. The reward is never more lenient than math_verify: steps 2-3 accept only pairs
math_verify accepts too, apart from four listed exceptions (``normalize``'s module docstring and docs/REWARD.md:
a trailing percent sign, a sentence-ending period, the degree signs ``°``/``\\degree``, SI thin-space thousands),
and they are stricter in one place (decimals compare exactly: ``0.333333`` is not ``1/3``).
1. bound the response to its last ``max_response_chars`` characters and extract the answer;
   no answer -> score 0, ``no_answer=1``; an answer longer than ``max_answer_chars`` -> score 0 (never parsed);
   an empty or missing ground truth is a data error -> ValueError;
2. normalised strings equal -> 1 (``normalize.fast_verdict``); skipped for a response with several boxes;
3. both sides plain numbers -> exact rational comparison (``normalize.as_rational``; decimals are exact here,
   where math_verify would round to 6 places);
4. otherwise math_verify in a child process with a hard time limit (``verify_pool``); overrun -> score 0,
   ``timeout=1``. Results of step 4 are cached per (ground truth, answer) pair, since a group of n samples
   often repeats an answer.

Returned dict (the same keys on every call: verl builds its extra-info arrays from the first call's keys):
``score`` and ``acc`` (1.0/0.0; ``acc`` is the filter metric of the fast DAPO curriculum), ``no_answer`` and
``timeout`` (0/1 floats, become validation metrics), and ``pred`` (the extracted answer, at most
``max_answer_chars`` characters, '' when none). verl 0.9.1 skips string values when it averages validation
metrics and uses ``pred`` for its maj@N vote (``trainer/ppo/metric_utils.process_validation_metrics``);
set ``return_pred=False`` to get numeric keys only.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, fields
from functools import lru_cache

import numpy as np

from verl_ext.reward.answer_extraction import box_count, boxed_answer, compile_answer_pattern, last_pattern_match
from verl_ext.reward.normalize import fast_verdict
from verl_ext.reward.verify_pool import VerifyTimeout, shared_pool


@dataclass(frozen=True)
class MathRewardConfig:
    """Reward options, passed as ``reward.custom_reward_function.reward_kwargs``."""

    timeout_s: float = 3.0
    """Hard wall-clock limit for one symbolic check (seconds). 2-5 is sensible: real answers verify in
    milliseconds, and a killed check costs a ~1-2 s worker restart in the background."""
    answer_pattern: str | None = None
    """Regex whose last match is the answer (group 1 if present), used instead of ``\\boxed{}``.
    E.g. ``(?i)Answer:\\s*([^\\n]+)`` for DAPO's original prompt. Default None: the final ``\\boxed{}`` (several
    adjacent final boxes joined, see the module docstring)."""
    max_response_chars: int = 32768
    """Only the last this-many characters of a response are searched (the final answer is at the end)."""
    max_answer_chars: int = 400
    """Longer extracted answers score 0 without parsing: sympy parse time grows fast with length."""
    pool_size: int = 1
    """math_verify worker processes per calling process. 1 on a 2-core machine; up to the cores a reward
    worker may use elsewhere."""
    return_pred: bool = True
    """Include the extracted answer as ``pred`` (string). False -> numeric keys only."""
    cache_size: int = 65536
    """Entries of the (ground truth, answer) -> verdict cache for math_verify results."""

    def __post_init__(self) -> None:
        if not self.timeout_s > 0:
            raise ValueError(f"timeout_s must be > 0, got {self.timeout_s}")
        for name in ("max_response_chars", "max_answer_chars", "pool_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.answer_pattern is not None:
            compile_answer_pattern(self.answer_pattern)  # raises ValueError on a bad pattern


# Keyword arguments verl's reward managers pass besides ours; accepted and ignored.
_VERL_KWARGS = frozenset({"reward_router_address", "reward_model_tokenizer"})
_CONFIG_FIELDS = frozenset(f.name for f in fields(MathRewardConfig))


@lru_cache(maxsize=256)
def _config(items: tuple) -> MathRewardConfig:
    return MathRewardConfig(**dict(items))


def _config_from_kwargs(kwargs: dict) -> MathRewardConfig:
    unknown = set(kwargs) - _CONFIG_FIELDS - _VERL_KWARGS
    if unknown:
        raise TypeError(
            f"compute_score got unknown option(s) {sorted(unknown)}; valid reward_kwargs: {sorted(_CONFIG_FIELDS)}"
        )
    return _config(tuple(sorted((k, v) for k, v in kwargs.items() if k in _CONFIG_FIELDS)))


def ground_truth_candidates(ground_truth) -> list[str]:
    """Ground truth as a list of answer strings: verl rows hold a string, a list of strings, or a number."""
    if ground_truth is None:
        return []
    if isinstance(ground_truth, str):
        values: Sequence = [ground_truth]
    elif isinstance(ground_truth, (list, tuple, np.ndarray)):
        values = list(ground_truth)
    else:
        values = [ground_truth]
    out = []
    for value in values:
        if value is None or (isinstance(value, float) and math.isnan(value)):
            continue
        if isinstance(value, (float, np.floating)) and float(value).is_integer():
            value = int(value)  # AMC-style answers stored as 27.0
        text = str(value).strip()
        if text:
            out.append(text)
    return out


@lru_cache(maxsize=4)
def _verdict_cache(size: int):
    @lru_cache(maxsize=size)
    def cached(gold: str, pred: str, pool_size: int, timeout_s: float, raw: bool = False) -> bool:
        return shared_pool(pool_size, timeout_s).verify(gold, pred, raw=raw)

    return cached


MULTI_BOX_CONTEXT_CHARS = 4096
"""How far before the last box a multi-box response is handed to math_verify (rounded back to a line start, since
math_verify's inline ``$...$`` environments never span lines). Bounds math_verify's regex work on long responses."""


def multi_box_context(tail: str) -> str:
    """The part of a response with several boxes that math_verify reads (see the module docstring)."""
    last_box = max(tail.rfind("\\boxed"), tail.rfind("\\fbox"))
    start = max(0, last_box - MULTI_BOX_CONTEXT_CHARS)
    return tail[tail.rfind("\n", 0, start) + 1 if start else 0 :]


def _equivalent(gold: str, pred: str, cfg: MathRewardConfig) -> bool:
    """Steps 2-4 of the module docstring for one ground-truth candidate. May raise VerifyTimeout."""
    verdict = fast_verdict(gold, pred)
    if verdict is not None:
        return verdict
    # VerifyTimeout propagates through lru_cache without caching, so a timed-out pair is retried next time.
    return _verdict_cache(cfg.cache_size)(gold, pred, cfg.pool_size, cfg.timeout_s)


def extract_answer(solution_str: str, cfg: MathRewardConfig) -> str | None:
    tail = solution_str[-cfg.max_response_chars :]
    if cfg.answer_pattern is not None:
        answer = last_pattern_match(tail, cfg.answer_pattern)
    else:
        answer = boxed_answer(tail)
    if answer is None:
        return None
    answer = answer.strip()
    return answer or None


def _result(score: float, pred: str, no_answer: bool, timed_out: bool, cfg: MathRewardConfig) -> dict:
    out = {"score": score, "acc": score, "no_answer": float(no_answer), "timeout": float(timed_out)}
    if cfg.return_pred:
        out["pred"] = pred[: cfg.max_answer_chars]
    return out


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs) -> dict:
    """verl reward function: see the module docstring for the decision order and the returned keys."""
    cfg = _config_from_kwargs(kwargs)
    if not isinstance(solution_str, str):
        raise TypeError(f"solution_str must be str, got {type(solution_str).__name__}")
    pred = extract_answer(solution_str, cfg)
    if pred is None:
        return _result(0.0, "", no_answer=True, timed_out=False, cfg=cfg)
    golds = ground_truth_candidates(ground_truth)
    if not golds:
        # A data bug (preprocessing drops such rows): fail loudly rather than train on a silent 0.
        raise ValueError(
            f"empty ground truth {ground_truth!r} (data_source={data_source!r}, extra_info={extra_info!r})"
        )
    if len(pred) > cfg.max_answer_chars:
        return _result(0.0, pred, no_answer=False, timed_out=False, cfg=cfg)
    context = None
    if cfg.answer_pattern is None:
        tail = solution_str[-cfg.max_response_chars :]
        if box_count(tail) >= 2:
            context = multi_box_context(tail)  # math_verify joins several boxes by its own rules: let it read them
    timed_out = False
    for gold in golds:
        try:
            if context is not None:
                accepted = _verdict_cache(cfg.cache_size)(gold, context, cfg.pool_size, cfg.timeout_s, raw=True)
            else:
                accepted = _equivalent(gold, pred, cfg)
            if accepted:
                return _result(1.0, pred, no_answer=False, timed_out=False, cfg=cfg)
        except VerifyTimeout:
            timed_out = True
    return _result(0.0, pred, no_answer=False, timed_out=timed_out, cfg=cfg)
