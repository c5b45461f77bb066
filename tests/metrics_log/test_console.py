"""The compact console: the per-step line shows the few metrics that say whether a run learns, leaves out what the
step did not log, and the closing summary states the validation change against the baseline."""

from __future__ import annotations

import pytest

from verl_ext.metrics_log.console import check_baseline, compact_line, run_summary, val_accuracy


def test_compact_line_of_a_fast_dapo_step_with_validation():
    metrics = {
        "critic/score/mean": 0.5625,
        "curriculum/keep_rate": 0.1453,
        "curriculum/responses_per_training_group": 48.7,
        "val-core/toy_copy_digit/acc/mean@1": 0.45,
        "actor/pg_loss": 0.01,  # not shown: the JSONL log has everything
    }
    line = compact_line(5, 20, metrics, 27.26)
    assert line == "step  5/20 | reward 0.562 | keep 0.15 | resp/group 48.7 | val acc 0.450 | 27.3 s"


def test_compact_line_leaves_out_what_the_step_did_not_log():
    assert compact_line(0, 8, {"val-core/x/acc/mean@1": 0.26}, None) == "step 0/8 | val acc 0.260"
    line = compact_line(3, 8, {"critic/score/mean": 0.25, "curriculum/keep_rate": float("nan")}, 1.0)
    assert line == "step 3/8 | reward 0.250 | 1.0 s"


def test_val_accuracy_takes_the_first_validation_source_and_ignores_other_keys():
    assert val_accuracy({"val-core/b/acc/mean@1": 0.2, "val-core/a/acc/mean@1": 0.7}) == 0.7
    assert val_accuracy({"val-aux/a/acc/mean@1": 0.7, "critic/score/mean": 1.0}) is None
    assert val_accuracy({"val-core/a/acc/mean@1": None}) is None


def test_run_summary_states_the_change_against_the_baseline_and_where_things_are():
    text = run_summary(0.22, 1.0, {"label": "constant answer", "value": 0.18}, "out/metrics.jsonl", "out/metrics.png")
    assert text.splitlines() == [
        "[verl_ext] validation accuracy 0.220 -> 1.000 (constant answer: 0.180)",
        "[verl_ext] metrics log: out/metrics.jsonl",
        "[verl_ext] curves: out/metrics.png",
    ]
    assert run_summary(None, None, None, None, None) == ""


@pytest.mark.parametrize(
    "bad", [{"label": "x"}, {"label": "x", "value": "high"}, [0.1], {"label": "x", "value": 1, "y": 2}]
)
def test_bad_baseline_is_refused(bad):
    with pytest.raises(ValueError, match="val_baseline"):
        check_baseline(bad)
    check_baseline(None)
    check_baseline({"label": "constant answer", "value": 0.18})


def test_val_accuracy_prefers_the_pooled_accuracy_over_all_sources():
    per_source = {"val-core/mathgen/a/acc/mean@1": 0.1, "val-core/mathgen/b/acc/mean@1": 0.5}
    assert val_accuracy({**per_source, "val-core/all/acc/mean@1": 0.3}) == 0.3
    assert val_accuracy({**per_source, "val-core/all/acc/mean@1": float("nan")}) == 0.1  # not finite: first source


def test_val_accuracy_reads_sampled_validation():
    """Validation sampled n times a question (val_kwargs.n = 4) logs mean@4; best@4 and maj@4 are not the accuracy."""
    sampled = {"val-core/all/acc/best@4/mean": 0.9, "val-core/all/acc/maj@4/mean": 0.7, "val-core/all/acc/mean@4": 0.4}
    assert val_accuracy({**sampled, "val-core/mathgen/a/acc/mean@4": 0.2}) == 0.4
    assert val_accuracy({"val-core/a/acc/maj@4/mean": 0.7, "val-core/a/acc/mean@4": 0.25}) == 0.25


def test_compact_line_of_an_agent_step_shows_its_tool_use():
    """An agent run's line also says how many episodes called the tool and used its result; the keys are the ones
    the agent trainer logs (verl_ext/agent/tool_use.py), so a renamed key would drop them from the line."""
    from verl_ext.agent.tool_use import tool_use_metrics

    metrics = {"critic/score/mean": 0.5, **tool_use_metrics([1, 0, 2, 1], [1, 0, 0, 1])}
    assert (
        compact_line(2, 16, metrics, 40.0) == "step  2/16 | reward 0.500 | tool call 0.75 | result used 0.50 | 40.0 s"
    )


def test_the_summary_gives_the_large_held_out_evaluations_first_and_last():
    text = run_summary(0.153, 0.146, None, None, None, heldout=[(0.0791015625, 1024), (0.126953125, 1024)])
    assert text.splitlines() == [
        "[verl_ext] validation accuracy 0.153 -> 0.146",
        "[verl_ext] held-out accuracy 0.079 -> 0.127 (1,024 questions)",
    ]
    assert (
        run_summary(None, None, None, None, None, heldout=[(0.5, 64)])
        == "[verl_ext] held-out accuracy 0.500 (64 questions)"
    )


def test_a_budgeted_runs_line_shows_its_training_time_against_the_budget():
    """trainer.max_train_minutes: the step's line shows the training time so far against the budget, the measure
    the run ends by; without a budget, nothing of the kind."""
    metrics = {"time/train_total_s": 750.0, "critic/score/mean": 0.5}
    assert (
        compact_line(12, 2000, metrics, 48.2, budget_min=60) == "step   12/2000 | 12.5/60 min | reward 0.500 | 48.2 s"
    )
    assert "min" not in compact_line(12, 2000, metrics, 48.2)
    assert "min" not in compact_line(12, 2000, {}, 48.2, budget_min=60), "no time logged: no column"
