"""`campaign.py restore`: published runs copied back to a fresh out-root, byte for byte and marked done, so the runner
skips them and runs the rest; a run finished here is left alone, one started here is refused and named."""

from __future__ import annotations

from verl_ext.campaign.cli import main
from verl_ext.campaign.spec import CampaignSpec, done_seconds, is_done, mark_done

SPEC = "name: demo\nentry: fake_entry\nconditions: {a: [], b: []}\nseeds: [0, 1]\n"


def publish_runs(tmp_path, labels):
    """Runs finished on another machine and published there: their logs and held-out answers under results/."""
    (tmp_path / "spec.yaml").write_text(SPEC)
    out = tmp_path / "elsewhere"
    for label in labels:
        run = out / "demo" / label
        (run / "validation" / "heldout").mkdir(parents=True)
        (run / "metrics.jsonl").write_text(f'{{"step": 1, "who": "{label}"}}\n')
        (run / "validation" / "heldout" / "0.jsonl").write_text(f'{{"output": "{label}"}}\n')
        mark_done(run, 60.0)
    results = tmp_path / "results"
    assert main(["publish", str(tmp_path / "spec.yaml"), "--out-root", str(out), "--to", str(results)]) == 0
    return results


def test_published_runs_come_back_done_and_the_runner_skips_them(tmp_path, capsys):
    results = publish_runs(tmp_path, ["a_s0", "b_s0"])
    out = tmp_path / "fresh"
    args = ["restore", str(tmp_path / "spec.yaml"), "--from", str(results), "--out-root", str(out)]
    assert main(args) == 0
    said = capsys.readouterr().out
    assert "2 restored, 0 finished here already" in said and "not published, to run: a_s1, b_s1" in said
    for label in ("a_s0", "b_s0"):
        here, there = out / "demo" / label, results / "demo" / label
        assert is_done(here) and done_seconds(here) is None  # no time measured here: kept out of the ETA
        for rel in ("metrics.jsonl", "validation/heldout/0.jsonl"):
            assert (here / rel).read_bytes() == (there / rel).read_bytes()
    assert not (out / "demo" / "a_s1").exists()
    # the runner's own view: only the unpublished runs are left to run
    plans = CampaignSpec.from_yaml(tmp_path / "spec.yaml").runs(out)
    assert [p.label for p in plans if not is_done(p.run_dir)] == ["a_s1", "b_s1"]
    # idempotent: a second restore changes nothing
    assert main(args) == 0
    assert "0 restored, 2 finished here already" in capsys.readouterr().out


def test_a_run_started_here_is_not_replaced_by_its_published_log(tmp_path, capsys):
    results = publish_runs(tmp_path, ["a_s0", "a_s1"])
    out = tmp_path / "fresh"
    ours = out / "demo" / "a_s0"
    (ours / "global_step_4").mkdir(parents=True)  # interrupted here: it resumes from its checkpoint
    (ours / "metrics.jsonl").write_text('{"step": 1, "who": "ours"}\n')
    args = ["restore", str(tmp_path / "spec.yaml"), "--from", str(results), "--out-root", str(out)]
    assert main(args) == 1
    said = capsys.readouterr().out
    assert "started here and not finished, not replaced: a_s0" in said and "restored: a_s1" in said
    assert "ours" in (ours / "metrics.jsonl").read_text() and not is_done(ours)
    assert is_done(out / "demo" / "a_s1")
