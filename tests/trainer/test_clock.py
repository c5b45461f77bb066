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
