"""`campaign.py publish`: finished runs' logs copied into a results directory (byte for byte, idempotent), unfinished
runs left out, a differing published log refused unless --overwrite, checkpoints pruned on request."""

from __future__ import annotations

from verl_ext.campaign.cli import main
from verl_ext.campaign.publish import publish
from verl_ext.campaign.spec import CampaignSpec, mark_done

SPEC = "name: demo\nentry: fake_entry\nconditions: {a: [], b: []}\nseeds: [0, 1]\n"


def make_run(root, label, done, ckpt_bytes=0):
    run = root / "demo" / label
    run.mkdir(parents=True)
    (run / "metrics.jsonl").write_text(f'{{"step": 1, "who": "{label}"}}\n')
    if ckpt_bytes:
        (run / "global_step_4" / "actor").mkdir(parents=True)
        (run / "global_step_4" / "actor" / "model.pt").write_bytes(b"x" * ckpt_bytes)
    if done:
        mark_done(run)
    return run


def test_publish_copies_finished_runs_only_and_is_idempotent(tmp_path, capsys):
    (tmp_path / "spec.yaml").write_text(SPEC)
    out, to = tmp_path / "out", tmp_path / "results"
    a0 = make_run(out, "a_s0", done=True, ckpt_bytes=1000)
    make_run(out, "b_s0", done=False, ckpt_bytes=1000)  # still running: its log is half-written
    make_run(out, "a_s1", done=True)  # b_s1 has not started
    args = ["publish", str(tmp_path / "spec.yaml"), "--out-root", str(out), "--to", str(to)]
    assert main(args) == 0
    assert sorted(p.parent.name for p in (to / "demo").glob("*/metrics.jsonl")) == ["a_s0", "a_s1"]
    assert (to / "demo" / "a_s0" / "metrics.jsonl").read_bytes() == (a0 / "metrics.jsonl").read_bytes()
    said = capsys.readouterr().out
    assert "2 copied, 0 unchanged" in said and "not finished, left out: b_s0, b_s1" in said
    assert (a0 / "global_step_4").is_dir()  # no pruning unless asked

    again = publish(CampaignSpec.from_yaml(tmp_path / "spec.yaml"), out, to, prune=True, overwrite=False)
    assert again.copied == [] and again.unchanged == ["a_s0", "a_s1"] and again.pruned_bytes == 1000
    assert not (a0 / "global_step_4").exists() and (out / "demo" / "b_s0" / "global_step_4").is_dir()


def test_a_published_log_with_other_contents_is_refused_unless_overwrite(tmp_path, capsys):
    (tmp_path / "spec.yaml").write_text(SPEC)
    out, to = tmp_path / "out", tmp_path / "results"
    make_run(out, "a_s0", done=True)
    published = to / "demo" / "a_s0" / "metrics.jsonl"
    published.parent.mkdir(parents=True)
    published.write_text('{"step": 1, "who": "another campaign"}\n')
    args = ["publish", str(tmp_path / "spec.yaml"), "--out-root", str(out), "--to", str(to)]
    assert main(args) == 1
    assert "another campaign" in published.read_text()
    assert "other contents, not replaced (--overwrite): a_s0" in capsys.readouterr().out
    assert main([*args, "--overwrite"]) == 0
    assert '"who": "a_s0"' in published.read_text()


def test_the_last_validations_answers_are_published_beside_the_log(tmp_path):
    """verl's held-out answer dumps (<run>/validation/<step>.jsonl): the last one is published, numerically last (step
    16 after step 4, not after "4" as text), under the same idempotence and conflict rules as the log."""
    (tmp_path / "spec.yaml").write_text(SPEC)
    out, to = tmp_path / "out", tmp_path / "results"
    run = make_run(out, "a_s0", done=True)
    (run / "validation").mkdir()
    for step in (0, 4, 16):
        (run / "validation" / f"{step}.jsonl").write_text(f'{{"step": {step}, "output": "\\\\boxed{{{step}}}"}}\n')
    make_run(out, "a_s1", done=True)  # a run without dumps publishes its log alone
    spec = CampaignSpec.from_yaml(tmp_path / "spec.yaml")
    first = publish(spec, out, to, prune=False, overwrite=False)
    assert first.copied == ["a_s0", "a_s1"]
    assert [p.name for p in (to / "demo" / "a_s0" / "validation").iterdir()] == ["16.jsonl"]
    assert (to / "demo" / "a_s0" / "validation" / "16.jsonl").read_bytes() == (
        run / "validation" / "16.jsonl"
    ).read_bytes()
    assert not (to / "demo" / "a_s1" / "validation").exists()
    assert publish(spec, out, to, prune=False, overwrite=False).unchanged == ["a_s0", "a_s1"]
    # other answers under the same name: refused, kept, unless overwrite
    (to / "demo" / "a_s0" / "validation" / "16.jsonl").write_text("another campaign\n")
    (run / "metrics.jsonl").write_text('{"step": 1, "who": "rerun"}\n')  # not published either: the run conflicts
    again = publish(spec, out, to, prune=False, overwrite=False)
    assert '"who": "a_s0"' in (to / "demo" / "a_s0" / "metrics.jsonl").read_text()
    assert again.conflicts == ["a_s0"] and (to / "demo" / "a_s0" / "validation" / "16.jsonl").read_text() == (
        "another campaign\n"
    )
    assert publish(spec, out, to, prune=False, overwrite=True).copied == ["a_s0"]


def test_the_large_held_out_evaluations_answers_are_published_first_and_last(tmp_path):
    """<run>/validation/heldout/<step>.jsonl (the first and the last step's large held-out answers) go with the run,
    beside the last small validation's."""
    (tmp_path / "spec.yaml").write_text(SPEC)
    out, to = tmp_path / "out", tmp_path / "results"
    run = make_run(out, "a_s0", done=True)
    (run / "validation" / "heldout").mkdir(parents=True)
    for step in (4, 16):
        (run / "validation" / f"{step}.jsonl").write_text(f'{{"step": {step}}}\n')
    for step in (0, 16):
        (run / "validation" / "heldout" / f"{step}.jsonl").write_text(f'{{"step": {step}, "heldout": true}}\n')
    publish(CampaignSpec.from_yaml(tmp_path / "spec.yaml"), out, to, prune=False, overwrite=False)
    published = to / "demo" / "a_s0" / "validation"
    assert sorted(p.name for p in published.iterdir()) == ["16.jsonl", "heldout"]
    assert sorted(p.name for p in (published / "heldout").iterdir()) == ["0.jsonl", "16.jsonl"]
    assert (published / "heldout" / "0.jsonl").read_text() == '{"step": 0, "heldout": true}\n'
