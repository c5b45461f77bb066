"""Metric curves from real JSONL logs written by the project's writer."""

import json

import pytest

from verl_ext.metrics_log import JsonlMetricsWriter
from verl_ext.metrics_log.plot import ema, main, metric_series, plot_runs


def _log(path, rows):
    w = JsonlMetricsWriter(path)
    for step, metrics in rows:
        w.log(step, metrics)
    w.close()
    return path


def test_series_skip_absent_and_null_values(tmp_path):
    path = _log(
        tmp_path / "a" / "metrics.jsonl",
        [(0, {"val": 0.1}), (1, {"acc": 0.2}), (2, {"acc": float("nan")}), (3, {"acc": 0.5, "val": 0.4})],
    )
    from verl_ext.metrics_log import read_jsonl

    records = read_jsonl(path)
    assert metric_series(records, "acc") == ([1, 3], [0.2, 0.5])
    assert metric_series(records, "val") == ([0, 3], [0.1, 0.4])
    assert metric_series(records, "missing") == ([], [])


def test_ema_matches_a_loop():
    values = [1.0, 0.0, 2.0, 4.0]
    want, prev = [], None
    for v in values:
        prev = v if prev is None else 0.75 * prev + 0.25 * v
        want.append(prev)
    assert ema(values, 0.75) == pytest.approx(want)
    with pytest.raises(ValueError):
        ema(values, 1.0)


def test_plot_runs_writes_a_png_of_every_run(tmp_path):
    a = _log(tmp_path / "run_a" / "metrics.jsonl", [(s, {"acc": s / 10, "loss": 1 - s / 10}) for s in range(1, 9)])
    b = _log(tmp_path / "run_b" / "metrics.jsonl", [(s, {"acc": s / 20}) for s in range(1, 9)])
    out = tmp_path / "curves.png"
    data = plot_runs([a, b], ["acc", "loss"], out, ema_weight=0.5)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 5000
    assert data["run_a"]["acc"] == (list(range(1, 9)), [s / 10 for s in range(1, 9)])
    assert data["run_b"]["loss"] == ([], [])  # run_b never logged it: no line, no error
    with pytest.raises(KeyError, match="no run logged \\['acc_typo'\\]"):
        plot_runs([a], ["acc_typo"], tmp_path / "x.png")


def test_cli(tmp_path, capsys):
    a = _log(tmp_path / "r" / "metrics.jsonl", [(1, {"acc": 0.1}), (2, {"acc": 0.3})])
    main([str(a), "--keys", "acc", "--out", str(tmp_path / "c.png"), "--labels", "mine"])
    assert (tmp_path / "c.png").exists() and "wrote" in capsys.readouterr().out
    assert json.loads(a.read_text().splitlines()[0])["step"] == 1


def test_references_are_drawn_on_validation_panels_only(tmp_path, monkeypatch):
    from matplotlib.figure import Figure

    saved = []
    real_savefig = Figure.savefig
    monkeypatch.setattr(Figure, "savefig", lambda fig, *a, **k: (saved.append(fig), real_savefig(fig, *a, **k)))
    log = _log(tmp_path / "r" / "metrics.jsonl", [(s, {"val-core/t/acc/mean@1": s / 10, "loss": 1.0}) for s in (1, 2)])
    plot_runs([log], ["val-core/t/acc/mean@1", "loss"], tmp_path / "c.png", references={"constant answer": 0.18})
    val_ax, loss_ax = saved[0].axes[:2]
    flat = [line for line in val_ax.get_lines() if line.get_label() == "constant answer"]
    assert len(flat) == 1 and list(flat[0].get_ydata()) == [0.18, 0.18]
    assert not [line for line in loss_ax.get_lines() if line.get_label() == "constant answer"]


# ---------------------------------------------------------------- x = cumulative generated tokens / training time
TOK, TIME, VAL = "curriculum/tokens_generated", "time/train_total_s", "val-core/t/acc/mean@1"
# Tokens generated and seconds spent in each training step 1-5; step 4's row is a recovered one without either key.
STEP_TOKENS = {1: 120, 2: 180, 3: 50, 5: 400}
STEP_SECONDS = {1: 2.5, 2: 3.0, 3: 1.5, 5: 4.0}


def _cost_log(path):
    """Validation before training (step 0, no cost keys) and at steps 2, 4, 5; the cost keys are cumulative, as the
    trainers write them (step 4 lacks them: its x is step 3's)."""
    rows, tok, sec = [(0, {VAL: 0.1})], 0, 0.0
    for s in range(1, 6):
        m = {"critic/score/mean": s / 10}
        if s in STEP_TOKENS:
            tok, sec = tok + STEP_TOKENS[s], sec + STEP_SECONDS[s]
            m |= {TOK: tok, TIME: sec}
        if s in (2, 4, 5):
            m[VAL] = 0.1 * s
        rows.append((s, m))
    return _log(path, rows)


def test_cumulative_at_steps_carries_the_last_value_and_starts_at_zero():
    from verl_ext.metrics_log.plot import cumulative_at_steps

    records = [{"step": 0}, {"step": 1, "k": 5.0}, {"step": 2}, {"step": 3, "k": 9.0}]
    assert cumulative_at_steps(records, "k") == {0: 0.0, 1: 5.0, 2: 5.0, 3: 9.0}
    assert cumulative_at_steps([{"step": 1}, {"step": 2, "k": 3.0}], "k") == {2: 3.0}  # none before the first value
    assert cumulative_at_steps(list(reversed(records)), "k") == {0: 0.0, 1: 5.0, 2: 5.0, 3: 9.0}


def test_series_against_tokens_and_time_are_the_cumulative_counts_by_hand(tmp_path):
    from verl_ext.metrics_log import read_jsonl

    records = read_jsonl(_cost_log(tmp_path / "r" / "metrics.jsonl"))
    # by hand: tokens after steps 0..5 = 0, 120, 300, 350, 350 (recovered row: step 3's), 750
    assert metric_series(records, VAL, x="tokens") == ([0.0, 300.0, 350.0, 750.0], [0.1, 0.2, 0.4, 0.5])
    assert metric_series(records, VAL, x="time") == ([0.0, 5.5, 7.0, 11.0], [0.1, 0.2, 0.4, 0.5])
    xs, ys = metric_series(records, "critic/score/mean", x="tokens")
    assert xs == [120.0, 300.0, 350.0, 350.0, 750.0] and ys == pytest.approx([0.1, 0.2, 0.3, 0.4, 0.5])
    assert metric_series(records, VAL) == ([0, 2, 4, 5], [0.1, 0.2, 0.4, 0.5])  # the default stays x = step
    with pytest.raises(ValueError, match="x must be one of"):
        metric_series(records, VAL, x="wall")


def test_cli_x_tokens_draws_every_panel_against_cumulative_tokens(tmp_path, monkeypatch, capsys):
    from matplotlib.figure import Figure

    saved = []
    real_savefig = Figure.savefig
    monkeypatch.setattr(Figure, "savefig", lambda fig, *a, **k: (saved.append(fig), real_savefig(fig, *a, **k)))
    log = _cost_log(tmp_path / "r" / "metrics.jsonl")
    out = tmp_path / "tok.png"
    main([str(log), "--keys", VAL, "critic/score/mean", "--out", str(out), "--x", "tokens"])
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and "wrote" in capsys.readouterr().out
    (fig,) = saved
    assert len(fig.axes) == 2  # one panel per key
    val_ax, score_ax = fig.axes
    assert val_ax.get_xlabel() == score_ax.get_xlabel() == "generated tokens"
    assert list(val_ax.get_lines()[0].get_xdata()) == [0.0, 300.0, 350.0, 750.0]
    assert list(score_ax.get_lines()[0].get_xdata()) == [120.0, 300.0, 350.0, 350.0, 750.0]

    main([str(log), "--keys", VAL, "--out", str(tmp_path / "time.png"), "--x", "time"])
    assert len(saved[1].axes) == 1 and saved[1].axes[0].get_xlabel() == "training time (s)"
    assert list(saved[1].axes[0].get_lines()[0].get_xdata()) == [0.0, 5.5, 7.0, 11.0]
    with pytest.raises(SystemExit):
        main([str(log), "--keys", VAL, "--out", str(tmp_path / "x.png"), "--x", "wall"])


def test_x_tokens_needs_every_run_to_have_logged_tokens(tmp_path):
    with_tokens = _cost_log(tmp_path / "a" / "metrics.jsonl")
    without = _log(tmp_path / "b" / "metrics.jsonl", [(s, {VAL: 0.1 * s, TIME: 2.0 * s}) for s in (1, 2)])
    with pytest.raises(KeyError, match=r"curriculum/tokens_generated.*\['b'\]"):
        plot_runs([with_tokens, without], [VAL], tmp_path / "c.png", x="tokens")
    data = plot_runs([with_tokens, without], [VAL], tmp_path / "c.png", x="time")  # both logged the time
    assert data["b"][VAL] == ([2.0, 4.0], [0.1, 0.2])
