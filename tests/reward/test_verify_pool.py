"""VerifyPool: hard time limit by killing the child, recovery, thread safety."""

import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from verl_ext.reward.verify_pool import VerifyPool, VerifyTimeout

HANG = "9^{9^{9^{9}}}"  # sympy evaluates this for minutes


@pytest.fixture(scope="module")
def pool():
    p = VerifyPool(size=2, timeout_s=1.0)
    yield p
    p.close()


def test_verdicts():
    # A generous limit: these verdicts are about math_verify's answers, not the time limit (a symbolic check can take
    # over a second on a loaded 2-core machine).
    pool = VerifyPool(size=1, timeout_s=20.0)
    try:
        assert pool.verify("\\frac{1}{2}", "0.5") is True
        assert pool.verify("[1,2)", "(1,2]") is False
        assert pool.verify("x^2-1", "(x-1)(x+1)") is True
        # raw: the child extracts the answer from response text itself (several boxes joined by math_verify).
        assert pool.verify("(1, 2)", "The answers are $\\boxed{1}, \\boxed{2}$.", raw=True) is True
        assert pool.verify("2", "The answers are $\\boxed{1}, \\boxed{2}$.", raw=True) is False
    finally:
        pool.close()


def test_overrun_is_killed_and_pool_recovers(pool):
    pool.verify("1", "1")
    kills = pool.kills
    start = time.perf_counter()
    with pytest.raises(VerifyTimeout):
        pool.verify("5", HANG)
    assert time.perf_counter() - start < 1.0 + 2.0  # the limit plus scheduling slack on a loaded 2-core machine
    assert pool.kills == kills + 1
    assert pool.verify("2", "\\sqrt{4}") is True


def test_many_threads_share_the_pool(pool):
    pairs = [("\\frac{1}{2}", "0.5"), ("3", "4"), ("\\{1,2\\}", "\\{2,1\\}"), ("x+1", "1+x")] * 5
    with ThreadPoolExecutor(max_workers=8) as ex:
        results = list(ex.map(lambda p: pool.verify(*p), pairs))
    assert results == [True, False, True, True] * 5


def test_hang_in_one_thread_does_not_block_the_other_slot(pool):
    pool.verify("1", "1")
    with ThreadPoolExecutor(max_workers=2) as ex:
        hang = ex.submit(pool.verify, "5", HANG)
        start = time.perf_counter()
        assert ex.submit(pool.verify, "\\frac{2}{4}", "\\frac{1}{2}").result() is True
        fast = time.perf_counter() - start
        with pytest.raises(VerifyTimeout):
            hang.result()
    assert fast < 1.0  # served by the second child while the first was stuck


def test_bad_arguments_and_close():
    with pytest.raises(ValueError):
        VerifyPool(size=0)
    with pytest.raises(ValueError):
        VerifyPool(timeout_s=0)
    p = VerifyPool(size=1, timeout_s=1.0, standby=False)
    assert p.verify("1", "1.0") is True
    p.close()
    with pytest.raises(RuntimeError, match="closed"):
        p.verify("1", "1")
