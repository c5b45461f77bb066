"""The run log without Ray: the rows it writes and prints, the row a crash between a checkpoint and its row would
lose, and the closing lines it returns (printed by the driver, not here)."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from verl_ext.config.trainer_settings import read_trainer_extras
from verl_ext.metrics_log import read_jsonl
from verl_ext.metrics_log.run_log import RunLog, expand_plot_keys

VAL = "val-core/toy/acc/mean@1"
BASELINE = {"label": "constant answer", "value": 0.18}


class Tracker:
    def __init__(self):
        self.logged = []

    def log(self, data, step):
        self.logged.append((step, dict(data)))


def _run_log(tmp_path, **trainer) -> RunLog:
    cfg = {
        "jsonl_metrics_path": str(tmp_path / "metrics.jsonl"),
        "logger": ["compact"],
        "val_baseline": BASELINE,
        "experiment_name": "e",
        "project_name": "p",
        **trainer,
    }
    trainer_block = OmegaConf.create(cfg)
    log = RunLog(read_trainer_extras(trainer_block), trainer_block.logger, trainer_block.experiment_name)
    log.tracker = Tracker()
    return log


def test_a_compact_run_prints_its_lines_and_returns_its_summary(tmp_path, capsys):
    log = _run_log(tmp_path)
    log.open(step=0, total_steps=2)
    log.first_validation(0, {VAL: 0.25})
    log.start_progress(0)
    log.step(1, {"critic/score/mean": 0.5}, 3.0)
    log.step(2, {"critic/score/mean": 0.75, VAL: 0.5}, 4.0)
    lines = log.close(plot=True)  # no plot_keys: nothing drawn
    out = capsys.readouterr()
    assert out.out.splitlines()[0] == "step 0/2 | val acc 0.250"
    for line in ("step 1/2 | reward 0.500 | 3.0 s", "step 2/2 | reward 0.750 | val acc 0.500 | 4.0 s"):
        assert line in out.out + out.err  # above the progress bar (tqdm writes to stderr)
    assert "[verl_ext]" not in out.out + out.err, "the closing lines are returned, not printed"
    assert lines == [
        "[verl_ext] validation accuracy 0.250 -> 0.500 (constant answer: 0.180)",
        f"[verl_ext] metrics log: {tmp_path / 'metrics.jsonl'}",
    ]
    assert [r["step"] for r in read_jsonl(tmp_path / "metrics.jsonl")] == [0, 1, 2]
    assert [s for s, _ in log.tracker.logged] == [0, 1, 2]


@pytest.mark.parametrize(
    ("plot_key", "logged"), [("critic/score/mean", "critic/score/mean"), ("val-*/mean@*", "val-core/all/acc/mean@4")]
)
def test_the_curves_are_drawn_when_asked_and_named_in_the_closing_lines(tmp_path, plot_key, logged):
    pytest.importorskip("matplotlib")
    log = _run_log(tmp_path, plot_keys=[plot_key], logger=["console"])
    log.open(step=0, total_steps=1)
    log.start_progress(0)
    log.step(1, {logged: 0.5}, 1.0)
    assert log.close(plot=True) == [f"[verl_ext] metric curves: {tmp_path / 'metrics.png'}"]
    assert (tmp_path / "metrics.png").exists()
    failed = _run_log(tmp_path / "b", plot_keys=["critic/score/mean"])
    failed.open(step=0, total_steps=1)
    assert failed.close(plot=False)[-1].startswith("[verl_ext] metrics log:"), "a failed run draws no curves"


def test_plot_keys_may_be_patterns():
    logged = {"critic/score/mean", "val-core/all/acc/mean@4", "val-core/all/acc/maj@4/mean", "val-core/a/acc/mean@4"}
    assert expand_plot_keys(["val-core/all/acc/mean@*", "critic/score/mean", "absent"], logged) == [
        "val-core/all/acc/mean@4",
        "critic/score/mean",
    ]
    assert expand_plot_keys(["val-core/*/acc/mean@*"], logged) == ["val-core/a/acc/mean@4", "val-core/all/acc/mean@4"]


def test_a_row_lost_after_its_checkpoint_is_written_on_resume(tmp_path, capsys):
    log = _run_log(tmp_path)
    log.open(step=0, total_steps=3)
    log.start_progress(0)
    log.step(1, {"critic/score/mean": 0.5}, 1.0)
    with log.holding_row(2, True, {"critic/score/mean": 0.75}):
        held = log.row_so_far  # what the trainer saves in step 2's checkpoint
    assert log.row_so_far is None and held == {"step": 2, "validates": True, "metrics": {"critic/score/mean": 0.75}}
    log.close(plot=False)  # the crash: step 2's row never written

    resumed = _run_log(tmp_path)
    resumed.resumed_row = held
    resumed.open(step=2, total_steps=3)
    resumed.recover_row(2, validate=lambda: {VAL: 0.5})
    rows = read_jsonl(tmp_path / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2]
    assert rows[1] == {"step": 2, "critic/score/mean": 0.75, VAL: 0.5, "training/row_recovered": 1}
    assert "step 2: metrics row lost after its checkpoint" in capsys.readouterr().out
    # resumed again from the same checkpoint: the row is there now, nothing is validated or written twice
    again = _run_log(tmp_path)
    again.resumed_row = held
    again.open(step=2, total_steps=3)
    again.recover_row(2, validate=lambda: pytest.fail("validated a row that was written"))
    assert read_jsonl(tmp_path / "metrics.jsonl") == rows


def test_the_settings_are_checked_when_the_run_log_is_built(tmp_path):
    with pytest.raises(ValueError, match="plot_keys needs trainer.jsonl_metrics_path"):
        _run_log(tmp_path, plot_keys=["x"], jsonl_metrics_path=None)
    with pytest.raises(ValueError, match="val_baseline"):
        _run_log(tmp_path, val_baseline={"label": "x"})
