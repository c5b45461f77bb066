"""scripts/answers.py on the real model (SmolLM2-135M-Instruct as released) and the real held-out set: each answer
graded by the project's reward as validation grades it, the printed accuracy and shapes read from those answers, a
model given by directory answering as the same weights given by name, and bad model arguments named."""

from __future__ import annotations

import ast
import collections
import json

import pytest


def test_answers_are_graded_and_summarised_per_model(tmp_path, capsys, load_script):
    from verl_ext.pretrained.smollm2 import ensure_smollm2
    from verl_ext.reward.math_reward import compute_score

    answers = load_script("answers")
    out = tmp_path / "answers.jsonl"
    assert answers.main(["released", f"copy={ensure_smollm2()}", "--n", "10", "--threads", "1", "--out", str(out)]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    released = [r for r in rows if r["model"] == "released"]
    copy = [r for r in rows if r["model"] == "copy"]
    assert len(released) == len(copy) == 10
    for r in rows:
        assert r["score"] == compute_score("mathgen", r["answer"], r["ground_truth"])["score"]
    # greedy: the same weights, by name or by directory, answer alike; the released model gets some right, not all
    assert [r["answer"] for r in released] == [r["answer"] for r in copy]
    right = sum(r["score"] == 1.0 for r in released)
    assert 0 < right < 10
    printed = capsys.readouterr().out.splitlines()
    assert printed[0] == f"released: accuracy {right / 10:.3f} ({right}/10)"
    # then its three most common answer shapes, counted over its answers
    counts = collections.Counter(answers.shape(r["answer"]) for r in released)
    for line in printed[1:4]:
        count, form = line.split(" x ", 1)
        assert counts[ast.literal_eval(form)] == int(count), line
    assert [int(line.split(" x ")[0]) for line in printed[1:4]] == [c for _, c in counts.most_common(3)]


def test_shape_masks_every_number(load_script):
    answers = load_script("answers")
    assert answers.shape(" The answer is \\boxed{-1.5}. ") == "The answer is \\boxed{N}."
    assert answers.shape("16/5 = 3 and 2 - -2 = 4") == "N = N and N - N = N"


def test_bad_model_arguments_are_named(tmp_path, load_script):
    answers = load_script("answers")
    with pytest.raises(SystemExit, match="NAME=DIR"):
        answers.main(["nameless", "--n", "1"])
    with pytest.raises(SystemExit, match="neither a Hugging Face directory .no config.json. nor a verl actor"):
        answers.main([f"empty={tmp_path}", "--n", "1"])


def test_dumped_answers_of_a_run_are_read_with_the_runs_own_grades(tmp_path, capsys, load_script):
    """--dumped: a published run's held-out dumps (steps 0 and 16 of the agent campaign's seed 2) are summarised
    without a model: each step's accuracy is the one the run logged for that evaluation, its shapes counted over the
    dumped answers; a file that is not a dump is named."""
    answers = load_script("answers")
    run = answers.REPO / "docs/results/agent_heldout_real_cpu/agents_sdk_s2"
    logged = {}
    for line in (run / "metrics.jsonl").read_text().splitlines():
        rec = json.loads(line)
        if "heldout-core/all/acc/mean@1" in rec:
            logged[rec["step"]] = rec["heldout-core/all/acc/mean@1"]
    dumps = [run / "validation/heldout/0.jsonl", run / "validation/heldout/16.jsonl"]
    out = tmp_path / "rows.jsonl"
    assert answers.main(["--dumped", *map(str, dumps), "--shapes", "2", "--out", str(out)]) == 0
    printed = capsys.readouterr().out.splitlines()
    for step, head in ((0, printed[0]), (16, printed[3])):
        right = round(logged[step] * 1024)
        assert head == f"agents_sdk_s2 step {step}: accuracy {right / 1024:.3f} ({right}/1024)"
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    last = [r for r in rows if r["model"] == "agents_sdk_s2 step 16"]
    top = collections.Counter(answers.shape(r["answer"]) for r in last).most_common(1)[0]
    assert printed[4] == f"  {top[1]:4d} x {top[0]!r}"
    bad = tmp_path / "metrics.jsonl"
    bad.write_text('{"step": 1}\n')
    with pytest.raises(SystemExit, match="not a held-out dump"):
        answers.main(["--dumped", str(bad)])
    with pytest.raises(SystemExit):
        answers.main([])  # neither models nor dumps
