"""The reference verifier for the reward tests: math_verify alone, called directly (no pool, no mocks).

math_verify parses a string in 5-40 ms here (ANTLR in pure Python), which dominates the property test. Its verdicts
are therefore kept in pytest's cache directory (``.pytest_cache``), keyed by the installed versions of math-verify,
latex2sympy2_extended, the ANTLR runtime and sympy: a later run on the same machine and versions reuses them, a fresh
checkout (CI) or any version change computes every verdict anew; ``pytest --cache-clear`` or
``-p no:cacheprovider`` forces that too.
"""

from __future__ import annotations

import importlib.metadata
import logging

import pytest

_PACKAGES = ("math-verify", "latex2sympy2_extended", "antlr4-python3-runtime", "sympy")


def _math_verify_verdict(gold: str, pred: str) -> bool:
    # Exactly the project worker's call (verl_ext/reward/_verify_worker.py): gold by LaTeX extraction, prediction by
    # LaTeX then plain expression, both wrapped in \boxed{}. In the main thread, so math_verify's own timeouts work.
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify

    logging.disable(logging.WARNING)  # math_verify logs every parse failure
    g = parse("\\boxed{" + gold + "}", (LatexExtractionConfig(),))
    p = parse("\\boxed{" + pred + "}", (LatexExtractionConfig(), ExprExtractionConfig()))
    return bool(g and p and verify(g, p))


@pytest.fixture(scope="session")
def math_verify_accepts(request):
    """``math_verify_accepts(gold, pred) -> bool``: math_verify's verdict on ``\\boxed{gold}`` vs ``\\boxed{pred}``."""
    versions = "-".join(f"{name}={importlib.metadata.version(name)}" for name in _PACKAGES)
    key = f"verl_ext/math_verify_verdicts/{versions}"
    cache = getattr(request.config, "cache", None)  # None under -p no:cacheprovider: every verdict computed
    stored = cache.get(key, {}) if cache is not None else {}
    verdicts = {tuple(k.split("\0", 1)): v for k, v in stored.items()}
    fresh = 0

    def accepts(gold: str, pred: str) -> bool:
        nonlocal fresh
        if (gold, pred) not in verdicts:
            verdicts[gold, pred] = _math_verify_verdict(gold, pred)
            fresh += 1
        return verdicts[gold, pred]

    yield accepts
    if fresh and cache is not None:
        cache.set(key, {f"{g}\0{p}": v for (g, p), v in verdicts.items()})
