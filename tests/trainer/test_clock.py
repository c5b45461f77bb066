"""The training clock: counts on from a checkpoint's total, laps between rows, and readings taken in between (a
checkpoint save) do not shorten the next lap."""

from __future__ import annotations

from verl_ext.trainer import clock as clock_module
from verl_ext.trainer.clock import TrainClock


def test_the_clock_counts_on_from_the_checkpoint_and_laps_between_rows(monkeypatch):
    now = [100.0]
    monkeypatch.setattr(clock_module.time, "monotonic", lambda: now[0])
    c = TrainClock(50.0)  # a resumed checkpoint's total
    assert c.read() == 50.0, "before the loop starts: the total it starts from"
    c.start()
    now[0] = 103.0
    assert c.lap() == 3.0 and c.total_s == 53.0
    now[0] = 104.5
    assert c.read() == 54.5  # a checkpoint save reads the clock mid-step
    now[0] = 106.0
    assert c.lap() == 3.0 and c.total_s == 56.0, "the lap runs from the previous row, not from the save"
    c.start()  # a second fit() on the same trainer counts on from the total so far
    now[0] = 107.0
    assert c.lap() == 1.0 and c.total_s == 57.0


def test_an_evaluating_step_is_expected_to_take_its_evaluation_too(monkeypatch):
    """The budget's prediction: a step's mean net of evaluation (10 s), plus the mean evaluation (20 s, over the one
    before training and one in the loop) when the step about to start evaluates; 0 before anything was measured."""
    now = [0.0]
    monkeypatch.setattr(clock_module.time, "monotonic", lambda: now[0])
    c = TrainClock()
    assert c.expected_step_s(evaluates=True) == 0.0 and not c.ends_budget(0.5, evaluates=True)
    assert not c.ends_budget(None, evaluates=True), "no budget: never the last"
    c.note_evaluation(30.0)  # the evaluation before training
    c.start()
    now[0] = 10.0
    c.lap()  # a plain step
    now[0] = 30.0
    c.lap(evaluation_s=10.0)  # 10 s of training, 10 s of evaluation
    assert c.expected_step_s(evaluates=False) == 10.0 and c.expected_step_s(evaluates=True) == 30.0
    assert not c.ends_budget(41.0, evaluates=False) and c.ends_budget(41.0, evaluates=True)
    assert c.ends_budget(40.0, evaluates=False), "30 s so far and a 10 s step reach 40 s"
