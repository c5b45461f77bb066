"""SepaController: linear and auto schedules, the correctness gate, and the checkpoint round trip."""

import math

import pytest

from verl_ext.advantage import AdvantageConfig, SepaController
from verl_ext.advantage import reference as ref


@pytest.mark.parametrize("steps,delay", [(500, 50), (10, 0), (0, 5), (3, 7)])
def test_linear_schedule(steps, delay):
    ctl = SepaController(steps, "linear", delay, correct_rate_gate=0.0)
    for step in range(0, steps + delay + 20):
        assert ctl.resolve(step) == pytest.approx(ref.sepa_linear(step, steps, delay))
    if steps:
        assert ctl.resolve(delay + steps) == 1.0 and ctl.resolve(delay) == 0.0


def test_gate_holds_lambda_at_zero_until_reached_then_stays_open():
    ctl = SepaController(10, "linear", 0, correct_rate_gate=0.3)
    assert ctl.resolve(20) == 0.0
    ctl.observe(None, 0.29)
    assert ctl.resolve(20) == 0.0
    ctl.observe(None, float("nan"))
    assert ctl.resolve(20) == 0.0
    ctl.observe(None, 0.3)
    assert ctl.resolve(5) == 0.5
    ctl.observe(None, 0.0)  # sticky
    assert ctl.resolve(20) == 1.0


def plain_auto(observations, step, steps, delay):
    """The auto schedule written out from ALGORITHMS.md."""
    ema, var0 = None, None
    for k, v in enumerate(observations, start=1):
        ema = v if ema is None else 0.99 * ema + 0.01 * v
        if var0 is None and k >= 50:
            var0 = max(ema, 1e-8)
    auto = 0.0 if var0 is None else 1 - min((ema / var0) / 0.2, 1)
    return max(auto, ref.sepa_linear(step, steps, delay))


def test_auto_schedule_follows_the_variance_ema():
    ctl = SepaController(1000, "auto", 100, correct_rate_gate=0.0)
    observations = [4.0 * math.exp(-k / 60) for k in range(400)]
    for k, v in enumerate(observations):
        assert ctl.resolve(k) == pytest.approx(plain_auto(observations[:k], k, 1000, 100), abs=1e-12)
        ctl.observe(v, 0.5)
    assert ctl.resolve(400) > ref.sepa_linear(400, 1000, 100)  # the variance fell: auto leads the ramp
    ctl.observe(float("inf"), 0.5)  # ignored
    assert ctl.n_observed == 400


def test_state_round_trip_continues_identically():
    a = SepaController(300, "auto", 10, correct_rate_gate=0.2)
    for k in range(70):
        a.observe(1.0 / (k + 1), 0.25 if k > 5 else 0.1)
    sepa = {"steps": 300, "schedule": "auto", "delay_steps": 10, "correct_rate_gate": 0.2}
    b = SepaController.from_config(AdvantageConfig.from_algorithm({"sepa": sepa}).sepa)
    b.load_state_dict(a.state_dict())
    assert b.state_dict() == a.state_dict() and b.var_0 is not None and b.gate_open
    for k in range(70, 120):
        a.observe(0.5 / (k + 1), 0.3)
        b.observe(0.5 / (k + 1), 0.3)
        assert a.resolve(k) == b.resolve(k)


def test_bad_construction_and_state():
    with pytest.raises(ValueError, match="schedule"):
        SepaController(schedule="cosine")
    with pytest.raises(ValueError, match="correct_rate_gate"):
        SepaController(correct_rate_gate=1.5)
    with pytest.raises(ValueError, match="missing keys"):
        SepaController().load_state_dict({"var_ema": 1.0})
