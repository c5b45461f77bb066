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
