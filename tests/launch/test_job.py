"""Cluster-job requests checked before anything is submitted, the job command line and runtime env, and the run's
outputs carried through the job log (no Ray: these run in seconds; the real cluster is in test_e2e_multinode.py)."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys

import pytest

from verl_ext.launch import artifacts, job

RAY_JOB_LIMIT_BYTES = 100 * 1024 * 1024  # Ray's job server refuses a larger request body (the zipped working dir)


def _req(*overrides, recipe="fast_dapo", run_dir="/shared/runs/x", **kw):
    return job.JobRequest(recipe, list(overrides), run_dir, **kw)


@pytest.mark.parametrize(
    "req, message",
    [
        (_req(recipe="nope"), "unknown recipe 'nope'; this project has ['composer', 'fast_dapo']"),
        (_req(run_dir="runs/x"), "run_dir must be an absolute path"),
        (_req("trainer.nnodes"), "overrides must be key=value"),
        (_req("trainer.no_such_key=1"), "Could not override 'trainer.no_such_key'"),
        (_req("data.train_batch_size=[1"), "do not compose into recipe 'fast_dapo'"),
        (_req("hydra.run.dir=/x"), "hydra.run.* is set by the launcher"),
        (_req(working_dir="/no/such/dir"), "working dir /no/such/dir does not exist"),
    ],
)
def test_bad_requests_fail_before_submitting(req, message):
    with pytest.raises(job.JobError, match=message.replace("[", r"\[").replace("*", r"\*")):
        job.validate(req)


def test_entrypoint_runs_the_recipe_through_the_job_entry_with_cluster_overrides():
    req = _req("+preset=cpu_demo", "trainer.nnodes=2", python="/opt/py/bin/python", lost_node_grace_s=5)
    cfg = job.validate(req)
    argv = shlex.split(job.entrypoint(req))
    assert argv[:3] == ["/opt/py/bin/python", "-m", "verl_ext.launch.entry"]
    assert argv[argv.index("--module") + 1] == "recipe.fast_dapo.main"
    assert argv[argv.index("--lost-node-grace-s") + 1] == "5"
    overrides = argv[argv.index("--") + 1 :]
    assert overrides[:2] == ["+preset=cpu_demo", "trainer.nnodes=2"]
    assert "trainer.default_local_dir=/shared/runs/x" in overrides
    assert "trainer.jsonl_metrics_path=/shared/runs/x/metrics.jsonl" in overrides
    # joining a cluster: the preset's local ray.init sizes are cleared, in the composed config too
    assert cfg.ray_kwargs.ray_init.num_cpus is None and cfg.ray_kwargs.ray_init.num_gpus is None
    assert cfg.trainer.nnodes == 2 and cfg.trainer.default_local_dir == "/shared/runs/x"


def test_a_users_own_output_paths_win():
    own = ["trainer.default_local_dir=/elsewhere", "trainer.jsonl_metrics_path=/elsewhere/m.jsonl"]
    req = _req("+preset=cpu_demo", *own)
    overrides = job.cluster_overrides(req)
    assert not any(o.startswith("trainer.default_local_dir=/shared") for o in overrides)
    assert job.validate(req).trainer.jsonl_metrics_path == "/elsewhere/m.jsonl"  # no duplicate-key error


def test_runtime_env_carries_the_cpu_backend_only_for_cpu_configs():
    cpu = _req("+preset=cpu_demo", env_vars={"HF_TOKEN": "t"})
    env = job.runtime_env(cpu, job.validate(cpu))
    assert env["env_vars"]["VERL_PLATFORM"] == "cpu" and env["env_vars"]["HF_TOKEN"] == "t"
    assert env["env_vars"]["RAY_OVERRIDE_JOB_RUNTIME_ENV"] == "1"
    assert env["working_dir"] == str(job.PROJECT_ROOT) and ".venv" in env["excludes"]
    gpu = _req(working_dir=None, preflight="none")  # the stock config: a GPU cluster's model and data, not here
    env = job.runtime_env(gpu, job.validate(gpu))
    assert "VERL_PLATFORM" not in env["env_vars"] and "working_dir" not in env


def test_the_working_dir_a_job_uploads_is_the_code_and_well_under_rays_limit(tmp_path):
    """Zipped by Ray's own packaging, as a submission does: the checkout's published campaign logs (docs/results, over
    100 MB) once made every job fail with "413: Maximum request body size 104857600 exceeded"."""
    from zipfile import ZipFile

    from ray._private.runtime_env.packaging import create_package

    env = job.runtime_env(_req("+preset=cpu_demo"))
    package = tmp_path / "working_dir.zip"
    create_package(env["working_dir"], package, include_gitignore=True, excludes=env["excludes"])
    names = ZipFile(package).namelist()
    assert "recipe/fast_dapo/main.py" in names and "verl_ext/launch/entry.py" in names
    assert not any(n.startswith(("docs/results/", ".venv/", ".git/", "outputs/")) for n in names)
    assert package.stat().st_size < RAY_JOB_LIMIT_BYTES / 10, package.stat().st_size


def test_artifacts_round_trip_through_a_noisy_log(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "metrics.jsonl").write_text('{"step": 1}\n{"step": 2}\n')
    (src / "metrics.png").write_bytes(os.urandom(20000))  # incompressible: several lines
    lines = artifacts.pack(
        {
            "metrics.jsonl": src / "metrics.jsonl",
            "metrics.png": src / "metrics.png",
            "config.yaml": src / "missing.yaml",
        }
    )
    assert len(lines) > 3 and all(len(line) < artifacts.LINE_CHARS + 40 for line in lines)
    log = "\n".join(["(WorkerDict pid=1) step:1", *lines[:2], "(vLLMHttpServer) noise", *lines[2:], "bye"])
    names = artifacts.unpack(log, tmp_path / "out")
    assert names == ["metrics.jsonl", "metrics.png"]  # the missing file is skipped
    assert (tmp_path / "out" / "metrics.png").read_bytes() == (src / "metrics.png").read_bytes()
    assert (tmp_path / "out" / "metrics.jsonl").read_text() == '{"step": 1}\n{"step": 2}\n'
    assert [artifacts.is_artifact_line(x) for x in ("bye", lines[0], lines[1], lines[-1])] == [False, True, True, True]
    assert artifacts.strip(log) == "(WorkerDict pid=1) step:1\n(vLLMHttpServer) noise\nbye"


def test_unpack_takes_the_last_whole_block_and_rejects_a_damaged_one(tmp_path):
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_text("first")
    b.write_text("second")
    first, second = artifacts.pack({"x.txt": a}), artifacts.pack({"x.txt": b})
    assert artifacts.unpack("\n".join([*first, *second[:-1]]), tmp_path / "o1") == ["x.txt"]  # 2nd cut off
    assert (tmp_path / "o1" / "x.txt").read_text() == "first"
    assert artifacts.unpack("no block here", tmp_path / "o2") == []
    damaged = [*first[:1], artifacts.LINE + first[1][len(artifacts.LINE) + 4 :], *first[2:]]
    with pytest.raises(ValueError, match="damaged"):
        artifacts.unpack("\n".join(damaged), tmp_path / "o3")
    with pytest.raises(ValueError, match="over the 10 byte limit"):
        artifacts.pack({"x.txt": a}, max_bytes=10)


def test_cli_rejects_a_bad_request_without_contacting_a_cluster():
    # An address nothing listens on: the request must fail on validation, with exit code 2, before connecting.
    r = subprocess.run(
        [
            sys.executable,
            "scripts/ray_job.py",
            "submit",
            "--address",
            "http://127.0.0.1:9",
            "--recipe",
            "fast_dapo",
            "--run-dir",
            "/tmp/x",
            "--",
            "trainer.no_such_key=1",
        ],
        capture_output=True,
        text=True,
        cwd=job.PROJECT_ROOT,
        timeout=120,
    )
    assert r.returncode == 2, r.stderr
    assert "Could not override 'trainer.no_such_key'" in r.stderr


def _entry(run_dir, module: str, *overrides: str) -> subprocess.CompletedProcess:
    """The cluster job's entrypoint run here, as the job supervisor runs it, with no cluster (the node watch off)."""
    cmd = [sys.executable, "-m", "verl_ext.launch.entry", "--run-dir", str(run_dir), "--module", module, "--"]
    env = {**os.environ, "RAY_ADDRESS": "127.0.0.1:9"}
    return subprocess.run(
        [*cmd, *overrides], capture_output=True, text=True, cwd=job.PROJECT_ROOT, timeout=120, env=env
    )


@pytest.mark.parametrize("code", [0, 7])
def test_entry_passes_the_exit_code_through_and_attaches_the_outputs(tmp_path, code):
    r = _entry(tmp_path / "run", "tests.launch.fake_recipe", f"exit={code}")
    assert r.returncode == code, r.stderr
    names = artifacts.unpack(r.stdout, tmp_path / "local")
    assert names == ["config.yaml", "metrics.jsonl", "overrides.yaml"]
    assert "dir: 2x" in (tmp_path / "local" / "config.yaml").read_text(), "resolved"


def test_the_checkpoint_tracker_is_verls_own_file():
    """The campaign runner tells a resumed run by verl's tracker file: fails if verl renames it."""
    from verl.utils.checkpoint.checkpoint_manager import get_checkpoint_tracker_filename

    assert get_checkpoint_tracker_filename("/runs/a") == f"/runs/a/{artifacts.CHECKPOINT_TRACKER}"


@pytest.mark.parametrize("outcome", ["ok", "fail"])
def test_the_job_log_shows_what_the_local_terminal_shows(tmp_path, outcome):
    """What `ray job logs` holds is the entry's output: the driver's terminal lines (step lines, the resume point, a
    failure's cause, the full log's path) and none of the chatter, which is in the run's log on the cluster."""
    run_dir = tmp_path / "run"
    r = _entry(run_dir, "tests.launch.fake_terminal_recipe", f"exit={outcome}")
    job_log = r.stdout + r.stderr
    assert (r.returncode == 0) == (outcome == "ok"), job_log
    shown = [line for line in job_log.splitlines() if not artifacts.is_artifact_line(line)]
    assert f"[verl_ext] full log: {run_dir / 'run.log'}" in shown
    assert any(line.startswith(f"[verl_ext] resumed from {run_dir}/global_step_2 at step 2") for line in shown)
    assert "step  3/4 | reward 0.500 | 1.0 s" in shown, "a worker's step line, Ray's prefix taken off"
    assert "step  4/4 | reward 0.750 | 1.0 s" in shown
    assert "chatter" not in job_log
    if outcome == "fail":
        assert any("run failed" in line and "RuntimeError: rollout server died" in line for line in shown), shown
    else:
        assert "[verl_ext] validation accuracy 0.2 -> 0.4" in shown
    full = (run_dir / "run.log").read_text()
    for text in ("early chatter", "Setting global step to 2", "(TaskRunner pid=17) step  3/4"):
        assert text in full
