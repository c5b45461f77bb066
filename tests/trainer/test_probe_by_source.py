"""The probe's per-data-source summary (per module of the generated math task), against a loop over the rows."""

from __future__ import annotations

import json

import numpy as np

from verl_ext.trainer.probe import PASS_RATES_FILE, by_source, format_summary, write_outputs


def test_by_source_counts_each_source_separately():
    rng = np.random.default_rng(0)
    k = 8
    counts = rng.integers(0, k + 1, size=60)
    sources = np.array(rng.choice(["mathgen/a", "mathgen/b", "mathgen/c"], size=60), dtype=object)
    got = by_source(counts, sources, k)
    assert sorted(got) == sorted(set(sources))
    for source, sub in got.items():
        rows = [int(c) for c, s in zip(counts, sources) if s == source]
        assert sub["prompts"] == len(rows)
        assert np.isclose(sub["pass@1"], sum(rows) / (k * len(rows)))
        assert np.isclose(sub["histogram"]["zeros"], sum(r == 0 for r in rows) / len(rows))
        assert np.isclose(sub["histogram"]["ones"], sum(r == k for r in rows) / len(rows))
        assert np.isclose(sum(sub["histogram"].values()), 1.0)


def test_summary_lines_and_pass_rate_rows_name_the_source(tmp_path):
    k = 4
    counts = np.array([0, 4, 2, 0])
    sources = np.array(["mathgen/x", "mathgen/x", "mathgen/y", "mathgen/y"], dtype=object)
    summary = {"k": k, "prompts": 4, "pass@1": 6 / 16, "histogram": {}, "by_source": by_source(counts, sources, k)}
    from verl_ext.curriculum.pass_rates import pass_histogram

    summary["histogram"] = pass_histogram(counts, k)
    text = format_summary(summary, tmp_path)
    assert "mathgen/x: 2 prompts, pass@1 0.500; all-wrong 0.500, all-right 0.500, mixed 0.000" in text
    assert "mathgen/y: 2 prompts, pass@1 0.250; all-wrong 0.500, all-right 0.000, mixed 0.500" in text
    write_outputs(tmp_path, summary, counts, np.arange(4), np.array([None] * 4, dtype=object), sources)
    rows = [json.loads(line) for line in (tmp_path / PASS_RATES_FILE).read_text().splitlines()]
    assert [r["data_source"] for r in rows] == list(sources) and [r["correct"] for r in rows] == [0, 4, 2, 0]


def test_the_probe_returns_its_report_for_the_driver_to_print(tmp_path, capsys):
    """The probe's `fit` prints nothing inside the Ray actor: its report becomes the trainer's closing lines, which the
    TaskRunner returns to the driver (verl_ext/trainer/launch.py prints them). Without workers: sampling stubbed."""
    from types import SimpleNamespace

    from omegaconf import OmegaConf

    from verl_ext.trainer.probe import PassRateProbeTrainer

    class Probe(PassRateProbeTrainer):
        def _sample(self, s):
            sources = np.array(["a", "a", "b", "b"], dtype=object)
            return np.array([0, 2, 4, 1]), np.arange(4), np.array([None] * 4, dtype=object), sources

    probe = object.__new__(Probe)
    probe.config = OmegaConf.create(
        {
            "probe": {"k": 4, "prompts_per_call": 2, "out_dir": str(tmp_path)},
            "curriculum": {"n_continue": 0, "filter_metric": "acc", "memory": {"key": "raw_prompt"}},
            "actor_rollout_ref": {"rollout": {"n": 4}, "model": {"path": "m"}},
            "data": {"train_files": "t", "train_batch_size": 2},
        }
    )
    probe.checkpoint_manager = SimpleNamespace(update_weights=lambda step: None)
    probe.fit()
    assert capsys.readouterr().out == ""
    summary = json.loads((tmp_path / "probe.json").read_text())
    assert probe.closing_lines == format_summary(summary, tmp_path).splitlines()
    assert probe.closing_lines[0].startswith("[probe] 4 prompts x 4 responses: pass@1 0.438")
    assert probe.closing_lines[-1].startswith("[probe] wrote ")
