"""scripts/benchlib.py, the benchmarks' shared helpers: a target's verdict, a measurement read back from a real child
process, the per-step means of a metric log."""

from __future__ import annotations

import math
import textwrap

import pytest


@pytest.fixture
def benchlib(load_script):
    return load_script("benchlib")


def test_a_target_gives_its_verdict_beside_the_figure(benchlib):
    at_least = benchlib.Target(">=", 2.5, "x")
    assert at_least.verdict(2.5) == "(target >= 2.5x: PASS)"
    assert at_least.verdict(2.49) == "(target >= 2.5x: MISS)"
    below = benchlib.Target("<", 60, " s")
    assert below.met(59.9) and not below.met(60)
    assert benchlib.Target("<=", 0).verdict(0.0) == "(target <= 0: PASS)"
    assert not benchlib.Target("<=", 1).met(math.nan)  # a figure that could not be measured meets nothing
    with pytest.raises(ValueError, match="target operator '=='"):
        benchlib.Target("==", 1)


def test_run_child_returns_the_result_line_and_stops_on_a_child_without_one(benchlib, tmp_path):
    child = tmp_path / "child.py"
    child.write_text(
        textwrap.dedent("""
        import json, sys
        print("engine chatter")
        if sys.argv[1] == "ok":
            print("RESULT " + json.dumps({"tokens_per_s": 12.5, "arg": sys.argv[1]}))
        else:
            print("Traceback: engine failed", file=sys.stderr)
            sys.exit(1)
    """)
    )
    assert benchlib.run_child(str(child), ["ok"]) == {"tokens_per_s": 12.5, "arg": "ok"}
    with pytest.raises(SystemExit, match=r"(?s)bad: no result \(exit 1\).*engine chatter.*engine failed"):
        benchlib.run_child(str(child), ["bad"])


def test_print_result_is_what_run_child_reads(benchlib, capsys):
    benchlib.print_result({"wall_s": 1.5})
    assert capsys.readouterr().out == 'RESULT {"wall_s": 1.5}\n'


def test_warm_mean_leaves_out_the_first_step_and_counts_a_missing_value_as_zero(benchlib):
    rows = [{"t": 100.0}, {"t": 2.0}, {}, {"t": 4.0}]
    assert benchlib.warm_mean(rows, "t") == pytest.approx(2.0)
    assert benchlib.warm_mean(rows[:1], "t") == 0.0
