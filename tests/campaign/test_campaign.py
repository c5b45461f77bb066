"""Campaign specs: expansion, validation, the shipped specs' runs pass their recipe's config check, and the runner
resumes (a real subprocess per run; the entry point is a small module that writes a real metrics log)."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from verl_ext.campaign import CampaignSpec, is_done
from verl_ext.campaign.spec import done_seconds
from verl_ext.launch.artifacts import CHECKPOINT_TRACKER

ROOT = Path(__file__).resolve().parents[2]


def test_runs_expand_conditions_times_seeds(tmp_path):
    spec = CampaignSpec.from_dict(
        {
            "name": "c",
            "entry": "m",
            "base": ["a=1"],
            "seeds": [3, 4],
            "conditions": {"x": ["b=2"], "y": []},
            "seed_overrides": ["data.seed={seed}"],
        }
    )
    runs = spec.runs(tmp_path)
    assert [r.label for r in runs] == ["x_s3", "y_s3", "x_s4", "y_s4"]  # a part-done campaign holds paired seeds
    assert runs[2].overrides[:3] == ["a=1", "b=2", "data.seed=4"]
    assert f"trainer.default_local_dir={tmp_path / 'c' / 'x_s4'}" in runs[2].overrides
    assert runs[2].overrides[-1] == "trainer.resume_mode=auto"  # after base: a stopped campaign resumes


def test_select_checks_and_filters_the_runs_for_both_subcommands(tmp_path):
    """--only, --seeds (report) and --runs (run) select through one method: spec order kept, unknown names refused
    naming the option."""
    spec = CampaignSpec.from_dict({"name": "c", "entry": "m", "seeds": [3, 4], "conditions": {"x": [], "y": []}})
    assert spec.select(tmp_path) == spec.runs(tmp_path)
    assert [r.label for r in spec.select(tmp_path, only=["y"])] == ["y_s3", "y_s4"]
    assert [r.label for r in spec.select(tmp_path, seeds=[4], labels=["y_s3", "x_s4"])] == ["x_s4"]
    for kwargs, match in (
        ({"only": ["z"]}, r"--only: unknown conditions \['z'\]; the spec has \['x', 'y'\]"),
        ({"seeds": [5]}, r"--seeds: \[5\] not among the spec's \[3, 4\]"),
        ({"labels": ["x_s5"]}, r"--runs: unknown runs \['x_s5'\]"),
    ):
        with pytest.raises(ValueError, match=match):
            spec.select(tmp_path, **kwargs)


def test_run_is_the_default_subcommand(tmp_path, capsys):
    from verl_ext.campaign.cli import main

    spec = "name: demo\nentry: fake_entry\nconditions: {a: [x=1, 'y=${r:}']}\nseeds: [0, 1]\n"
    (tmp_path / "spec.yaml").write_text(spec)
    args = [str(tmp_path / "spec.yaml"), "--dry-run", "--preflight", "none", "--out-root", str(tmp_path / "out")]
    assert main(["run", *args]) == 0
    explicit = capsys.readouterr().out
    assert main(args) == 0
    assert capsys.readouterr().out == explicit
    # each command as a shell reads it back: a resolver's ${...} quoted
    commands = [shlex.split(line) for line in explicit.splitlines()]
    assert [c[c.index("-m") + 1 : c.index("-m") + 4] for c in commands] == [["fake_entry", "x=1", "y=${r:}"]] * 2


@pytest.mark.parametrize(
    "raw,match",
    [
        ({"name": "c", "entry": "m", "seeds": [0]}, "missing campaign keys"),
        ({"name": "c", "entry": "m", "seeds": [0], "conditions": {"x": ["nokey"]}}, "key=value"),
        ({"name": "c", "entry": "m", "seeds": [0, 0], "conditions": {"x": []}}, "distinct"),
        ({"name": "c", "entry": "m", "seeds": [0], "conditions": {"x": []}, "typo": 1}, "unknown campaign keys"),
        (
            {"name": "c", "entry": "m", "seeds": [0], "conditions": {"x": []}, "seed_overrides": ["data.seed=1"]},
            "{seed}",
        ),
        ({"name": "c", "entry": "m", "seeds": [0], "conditions": {"a/b": []}}, "without '/'"),
    ],
)
def test_bad_specs_are_clear_errors(raw, match):
    with pytest.raises(ValueError, match=match.replace("{", r"\{").replace("}", r"\}")):
        CampaignSpec.from_dict(raw)


@pytest.mark.parametrize("spec_file", sorted((ROOT / "configs" / "campaign").glob("*.yaml")), ids=lambda p: p.stem)
def test_shipped_specs_pass_their_recipes_config_checks(spec_file, tmp_path, served_teachers):
    from verl_ext.config.compose import compose_config
    from verl_ext.trainer.launch import register_lazy_resolvers

    register_lazy_resolvers()  # what the drivers register: ${tiny_assets:...}, ${smollm2:...}, ${mathgen:...}
    spec = CampaignSpec.from_yaml(spec_file)
    recipe = spec.entry.rsplit(".", 1)[0]  # recipe.fast_dapo.main -> recipe.fast_dapo
    # Seeds differ only in the integers of seed_overrides, so one seed per condition covers every configuration a
    # campaign can start (composing each of ~30 runs took ~1 min of CI per spec).
    first_seed = [run for run in spec.runs(tmp_path) if run.seed == spec.seeds[0]]
    assert len(first_seed) == len(spec.conditions)
    for run in first_seed:
        cfg = compose_config(recipe.split(".")[-1], run.overrides, config_module=f"{recipe}.config")
        OmegaConf.resolve(cfg)
        if recipe == "recipe.fast_dapo":
            from recipe.fast_dapo.config_check import prepare_config

            prepare_config(cfg)
        else:
            from recipe.composer.config_check import composer_settings

            composer_settings(cfg)
        assert cfg.trainer.default_local_dir == str(run.run_dir)


FAKE_ENTRY = textwrap.dedent("""
    import sys
    from pathlib import Path
    from verl_ext.metrics_log import JsonlMetricsWriter
    from verl_ext.metrics_log.failure import failed_line
    args = dict(a.split("=", 1) for a in sys.argv[1:])
    print("[verl_ext] Ray started, task runner up (3 s)")
    if args.get("fail") == "yes":
        print(failed_line("ValueError: the reward function broke", "at step 1/3"), file=sys.stderr)
        sys.exit(3)
    w = JsonlMetricsWriter(args["trainer.jsonl_metrics_path"])
    for step in range(1, 4):
        w.log(step, {"acc": step * float(args["data.seed"]) / 10})
        print(f"step {step}/3 | acc {step / 10:.3f}", flush=True)
    w.close()
    Path(args["trainer.default_local_dir"], "calls").open("a").write("x")
    if args.get("stop_at_seed") == args["data.seed"]:  # as a user would: touch STOP while a run is going
        Path(args["trainer.default_local_dir"]).parent.joinpath("STOP").touch()
""")


def test_a_stop_file_ends_the_campaign_between_runs_and_the_same_command_goes_on(tmp_path):
    (tmp_path / "fake_entry.py").write_text(FAKE_ENTRY)
    spec = "name: demo\nentry: fake_entry\nconditions: {a: [stop_at_seed=1], b: [x=1]}\nseeds: [1, 2]\n"
    (tmp_path / "spec.yaml").write_text(spec)
    cmd = [sys.executable, str(ROOT / "scripts" / "campaign.py"), str(tmp_path / "spec.yaml")]
    cmd += ["--out-root", str(tmp_path / "out")]
    env = {"PYTHONPATH": f"{tmp_path}:{ROOT}", "PATH": "/usr/bin:/bin"}
    first = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True)
    root = tmp_path / "out" / "demo"
    assert first.returncode == 0, first.stdout + first.stderr
    # the run in progress finished; none after it started; the file is consumed
    assert is_done(root / "a_s1") and not (root / "b_s1").exists() and not (root / "STOP").exists()
    assert f"[campaign] stopped before b_s1 ({root / 'STOP'} was found)" in first.stdout
    second = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True)
    assert "[campaign] demo: 4 runs, 1 done before, 3 to run" in second.stdout, second.stdout + second.stderr
    assert all(is_done(root / f"{c}_s{s}") for c in "ab" for s in (1, 2))
    assert (root / "a_s1" / "calls").read_text() == "x"  # not run again


def test_runner_resumes_reports_failures_and_plots(tmp_path):
    (tmp_path / "fake_entry.py").write_text(FAKE_ENTRY)
    (tmp_path / "spec.yaml").write_text(
        textwrap.dedent("""
        name: demo
        entry: fake_entry
        conditions: {good: [fail=no], bad: [fail=yes]}
        seeds: [1, 2]
        plot_keys: [acc]
    """)
    )
    cmd = [
        sys.executable,
        str(ROOT / "scripts" / "campaign.py"),
        str(tmp_path / "spec.yaml"),
        "--out-root",
        str(tmp_path / "out"),
    ]
    env = {"PYTHONPATH": f"{tmp_path}:{ROOT}", "PATH": "/usr/bin:/bin"}
    first = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True)
    assert first.returncode == 1 and "2 of 4 runs failed: ['bad_s1', 'bad_s2']" in first.stdout, (
        first.stdout + first.stderr
    )
    # one line per run started and ended, counted, with the time left from the finished runs (seed-major order), the
    # run's step lines between them as they arrive, and a failed run's cause
    lines = [line for line in first.stdout.splitlines() if line.startswith("[campaign] ")]
    assert lines[0] == "[campaign] demo: 4 runs, 0 done before, 4 to run"
    assert lines[1:5] == [
        "[campaign] 1/4 good_s1: started",
        "[campaign] 1/4 good_s1: step 1/3 | acc 0.100",
        "[campaign] 1/4 good_s1: step 2/3 | acc 0.200",
        "[campaign] 1/4 good_s1: step 3/3 | acc 0.300",
    ]
    finished = r"\[campaign\] 1/4 good_s1: finished in \d+ min; peak memory \d+\.\d GiB; 3 left, ~\d+ min"
    finished += r" \(mean of 1 finished\)"
    assert re.fullmatch(finished, lines[5]), lines[5]
    assert lines[6] == "[campaign] 2/4 bad_s1: started"
    assert re.match(r"\[campaign\] 2/4 bad_s1: FAILED \(exit 3\) after \d+ min: ValueError: the reward", lines[7])
    assert lines[7].endswith(f"; see {tmp_path / 'out' / 'demo' / 'bad_s1' / 'run.log'}")
    # each run's memory, sampled while it ran: the runner's and its driver's (a fake one, no Ray under it)
    memory = json.loads((tmp_path / "out" / "demo" / "good_s1" / "memory.json").read_text())
    # (the first reading falls before the driver starts, and the runner alone can hold the larger PSS: its pages are
    # shared with a driver just forked; the readings after it, 0.5 s and 1.5 s in, see the driver)
    assert max(r["processes"] for r in memory["timeline"]) == 2 and memory["peak"]["total_gb"] > 0.01
    assert set(memory["peak"]["parts_gb"]) <= {"driver / campaign", "other"}
    assert lines[13] == "[campaign] 4/4 bad_s2: started" and "FAILED" in lines[14]
    # the run's own console keeps every line it wrote, the campaign shows none but those
    console = (tmp_path / "out" / "demo" / "good_s1" / "console.log").read_text()
    assert "Ray started" in console and "step 3/3 | acc 0.300" in console
    assert not any("Ray started" in line for line in first.stdout.splitlines())
    good = tmp_path / "out" / "demo" / "good_s2"
    assert is_done(good) and not is_done(tmp_path / "out" / "demo" / "bad_s1")
    assert (tmp_path / "out" / "demo" / "curves.png").stat().st_size > 5000
    second = subprocess.run(cmd + ["--only", "good"], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert second.returncode == 0 and "[campaign] demo: 2 runs, 2 done before, 0 to run" in second.stdout
    assert (good / "calls").read_text() == "x"  # not run again
    # the failed runs, fixed, run on: the time left counts the runs finished before (their DONE holds their time),
    # but not a run resumed from a checkpoint (its time is only its last part)
    assert done_seconds(good) is not None and done_seconds(tmp_path / "out" / "demo" / "bad_s1") is None
    spec = (tmp_path / "spec.yaml").read_text().replace("bad: [fail=yes]", "bad: [fail=no]")
    (tmp_path / "spec.yaml").write_text(spec)
    (tmp_path / "out" / "demo" / "bad_s1" / CHECKPOINT_TRACKER).write_text("2")
    third = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True)
    lines = [line for line in third.stdout.splitlines() if "finished in" in line]
    assert third.returncode == 0 and len(lines) == 2, third.stdout + third.stderr
    assert lines[0].startswith("[campaign] 1/2 bad_s1: finished in") and lines[0].endswith("(mean of 2 finished)")
    assert lines[1].startswith("[campaign] 2/2 bad_s2: finished in") and lines[1].endswith("none left")
    resumed, fresh = (tmp_path / "out" / "demo" / f"bad_s{s}" for s in (1, 2))
    assert (resumed / "DONE").read_text() == "finished\n" and done_seconds(fresh) is not None


def test_curves_of_a_campaign_run_in_parts_skip_the_keys_no_run_logged_yet(tmp_path, capsys):
    """The first runs of a campaign run in parts may all be of a condition without a plotted loss: the curves draw
    what was logged and name the rest, and the runs' exit status stays theirs (a KeyError here once failed a
    finished baseline run)."""
    from verl_ext.campaign.local import plot_curves
    from verl_ext.metrics_log import JsonlMetricsWriter

    spec = CampaignSpec.from_dict(
        {
            "name": "c",
            "entry": "m",
            "seeds": [0],
            "conditions": {"base": [], "extra": []},
            "plot_keys": ["acc", "loss/extra"],
        }
    )
    plans = spec.runs(tmp_path)
    plans[0].run_dir.mkdir(parents=True)
    w = JsonlMetricsWriter(plans[0].metrics_path)
    for step in (1, 2, 3):
        w.log(step, {"acc": step / 10})
    w.close()
    plot_curves(spec, plans, tmp_path)
    out = capsys.readouterr().out
    assert "[campaign] curves: no run so far logged ['loss/extra']; no panel for them" in out
    assert (tmp_path / "c" / "curves.png").stat().st_size > 5000
    # once a run logs it, the panel is drawn and nothing is said
    plans[1].run_dir.mkdir(parents=True)
    w = JsonlMetricsWriter(plans[1].metrics_path)
    w.log(1, {"acc": 0.2, "loss/extra": 0.5})
    w.close()
    plot_curves(spec, plans, tmp_path)
    assert "no run so far logged" not in capsys.readouterr().out
    # a spec key no run ever logs draws nothing rather than raising
    spec = CampaignSpec.from_dict({**spec.__dict__, "plot_keys": ["typo"]})
    (tmp_path / "c" / "curves.png").unlink()
    plot_curves(spec, plans, tmp_path)
    assert "no run so far logged ['typo']" in capsys.readouterr().out and not (tmp_path / "c" / "curves.png").exists()
