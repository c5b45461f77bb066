"""The reference verifier for the reward tests: math_verify alone, called directly (no pool, no mocks)."""

from __future__ import annotations

import logging
from functools import cache

import pytest


@cache
def _math_verify_accepts(gold: str, pred: str) -> bool:
    # Exactly the project worker's call (verl_ext/reward/_verify_worker.py): gold by LaTeX extraction, prediction by
    # LaTeX then plain expression, both wrapped in \boxed{}. In the main thread, so math_verify's own timeouts work.
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify

    logging.disable(logging.WARNING)  # math_verify logs every parse failure
    g = parse("\\boxed{" + gold + "}", (LatexExtractionConfig(),))
    p = parse("\\boxed{" + pred + "}", (LatexExtractionConfig(), ExprExtractionConfig()))
    return bool(g and p and verify(g, p))


@pytest.fixture(scope="session")
def math_verify_accepts():
    """``math_verify_accepts(gold, pred) -> bool``: math_verify's verdict on ``\\boxed{gold}`` vs ``\\boxed{pred}``."""
    return _math_verify_accepts
