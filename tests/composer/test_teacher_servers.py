"""The teacher launcher (verl_ext/composer/teacher_servers.py): its pure pieces and its process handling, fast, on
real files, sockets and processes. Its run with a real vLLM server (the released SmolLM2 queried through the
Composer's TeacherPool, then the launcher killed) is part of the Composer's real-model end-to-end run,
tests/recipe/composer/test_e2e_composer_real.py, which shares that server's start-up."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import yaml
from omegaconf import OmegaConf

from tests.composer.conftest import alive, descendants
from verl_ext.composer import teacher_servers as ts
from verl_ext.composer.teacher_pool import TeacherConfig

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def released_dir():
    from verl_ext.pretrained.smollm2 import ensure_smollm2

    return ensure_smollm2()


def _hf_dir(path: Path, *, config=True, weights=True, tokenizer=True) -> Path:
    path.mkdir(parents=True)
    if config:
        (path / "config.json").write_text("{}")
    if weights:
        (path / "model.safetensors").write_bytes(b"")
    if tokenizer:
        (path / "tokenizer.json").write_text("{}")
    return path


# -- --model ---------------------------------------------------------------------------------------------------------


def test_released_and_named_directories(released_dir, tmp_path):
    assert ts.parse_model_arg("released") == ts.TeacherSpec("released", released_dir)
    assert ts.parse_model_arg("base=released") == ts.TeacherSpec("base", released_dir)
    d = _hf_dir(tmp_path / "step16")
    assert ts.parse_model_arg(str(d)) == ts.TeacherSpec("step16", d)
    assert ts.parse_model_arg(f"trained={d}") == ts.TeacherSpec("trained", d)


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda p: p / "missing", "does not exist"),
        (lambda p: _hf_dir(p / "m", config=False), "no config.json"),
        (lambda p: _hf_dir(p / "m", weights=False), "no weights"),
        (lambda p: _hf_dir(p / "m", tokenizer=False), "no tokenizer"),
    ],
)
def test_a_bad_model_directory_names_the_argument(tmp_path, make, match):
    path = make(tmp_path)
    with pytest.raises(ValueError, match=f"--model '{path}': .*{match}"):
        ts.parse_model_arg(str(path))


def test_a_training_checkpoint_points_to_the_export(tmp_path):
    actor = tmp_path / "global_step_16" / "actor"
    (actor / "huggingface").mkdir(parents=True)
    (actor / "huggingface" / "config.json").write_text("{}")
    (actor / "model_world_size_1_rank_0.pt").write_bytes(b"")
    with pytest.raises(ValueError, match=r"training checkpoint .* python -m verl_ext.pretrained.export --local-dir"):
        ts.parse_model_arg(f"trained={actor}")


def test_names_are_checked(tmp_path, released_dir):
    with pytest.raises(ValueError, match="teacher name 'a b' must be"):
        ts.parse_model_arg("a b=released")
    with pytest.raises(ValueError, match=r"given twice"):
        ts.check_unique_names([ts.TeacherSpec("x", released_dir), ts.TeacherSpec("x", tmp_path)])


def test_settings_errors_name_the_flag():
    with pytest.raises(ValueError, match="--kv-cache-mib must be a positive integer"):
        ts.ServeSettings(kv_cache_mib=0)
    with pytest.raises(ValueError, match="--max-tokens .* below --max-model-len"):
        ts.ServeSettings(max_tokens=1024, max_model_len=1024)


def test_a_bad_model_stops_the_command_before_any_server_starts(tmp_path, capsys):
    log_dir = tmp_path / "logs"
    with pytest.raises(SystemExit) as exc:
        ts.main(["--model", "released", "--model", str(tmp_path / "nope"), "--log-dir", str(log_dir)])
    assert exc.value.code == 2
    assert f"--model '{tmp_path / 'nope'}': {tmp_path / 'nope'} does not exist" in capsys.readouterr().err
    assert not log_dir.exists()  # no server was started: none wrote a log


# -- ports -----------------------------------------------------------------------------------------------------------


def test_ports_are_distinct_and_free():
    ports = ts.choose_ports(3)
    assert len(set(ports)) == 3
    for port in ports:  # each can be bound now
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))


def test_a_taken_first_port_names_the_argument():
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(ValueError, match=f"--port {port - 1}: port {port} on 127.0.0.1 is in use"):
            ts.choose_ports(2, first=port - 1)


# -- the server's command and environment ----------------------------------------------------------------------------


def test_server_uses_the_cpu_backends_rollout_settings_and_a_small_kv_cache(released_dir):
    backend = OmegaConf.load(ROOT / "verl_ext/config/backend/cpu.yaml")
    cmd = ts.server_command(ts.TeacherSpec("released", released_dir), 8123, ts.ServeSettings(kv_cache_mib=64))
    flags = dict(zip(cmd[3::2], cmd[4::2]))
    assert cmd[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]
    assert flags["--dtype"] == backend.actor_rollout_ref.rollout.dtype == "float32"
    assert flags["--block-size"] == str(backend.actor_rollout_ref.rollout.engine_kwargs.vllm.block_size)
    assert flags["--kv-cache-memory-bytes"] == str(64 << 20)
    assert flags["--served-model-name"] == "released" and flags["--port"] == "8123"
    env = ts.server_env(ts.ServeSettings(threads=2), base={"VLLM_CPU_KVCACHE_SPACE": "1", "PATH": "/bin"})
    assert "VLLM_CPU_KVCACHE_SPACE" not in env  # it would override --kv-cache-memory-bytes
    assert env["VLLM_CPU_NUM_OF_RESERVED_CPU"] == str(backend.hydra.job.env_set.VLLM_CPU_NUM_OF_RESERVED_CPU)
    assert env["OMP_NUM_THREADS"] == "2" and env["PATH"] == "/bin"


def test_startup_phase_follows_the_log():
    log = ""
    assert ts.startup_phase(log) == "importing vLLM"
    for line, phase in [
        ("(EngineCore pid=1) INFO [core.py:129] Initializing a V1 LLM engine (v0.31.0) with config", "engine starting"),
        ("(EngineCore pid=1) INFO [default_loader.py:484] Loading weights took 3.08 seconds", "weights loaded"),
        ("INFO [core.py:380] init engine (profile, create kv cache, warmup model) took 0.22 s", "KV cache ready"),
        ("INFO:     Application startup complete.", "HTTP up, first completion"),
    ]:
        log += line + "\n"
        assert ts.startup_phase(log) == phase


# -- the printed block -----------------------------------------------------------------------------------------------

ENTRIES = ts.pool_entries(
    [("released", "http://127.0.0.1:8001/v1"), ("trained", "http://127.0.0.1:8002/v1")], ts.ServeSettings()
)


def _composer_pool(*overrides, merge=None):
    from verl_ext.advantage import register

    register()
    from recipe.composer.config_check import composer_settings
    from verl_ext.config.compose import compose_config

    cfg = compose_config(
        "composer",
        ["+arm=full", "actor_rollout_ref.actor.ppo_mini_batch_size=4", "actor_rollout_ref.rollout.n=4", *overrides],
        config_module="recipe.composer.config",
        backend="cpu",
    )
    if merge is not None:
        cfg = OmegaConf.merge(cfg, merge)
    OmegaConf.resolve(cfg)
    return composer_settings(cfg).pool


def test_the_block_goes_through_the_composers_config_check_as_yaml_and_as_an_override():
    expected = tuple(TeacherConfig(**e) for e in ENTRIES)
    assert expected[0] == TeacherConfig("released", "http://127.0.0.1:8001/v1", "released", None, 300.0, 128)
    text = ts.render_block(ENTRIES)
    as_yaml = _composer_pool(merge=OmegaConf.create(yaml.safe_load(text)))
    override = next(line for line in text.splitlines() if line.startswith("# 'composer."))[2:]
    assert override == ts.render_override(ENTRIES)
    as_override = _composer_pool(override.strip("'"))  # the shell's quotes gone, as Hydra receives it
    assert as_yaml.teachers == as_override.teachers == expected


# -- processes -------------------------------------------------------------------------------------------------------


def _group_gone(pgid: int, timeout_s: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not ts.group_pids(pgid):
            return True
        time.sleep(0.1)
    return False


def test_stop_escalates_to_sigkill_for_a_group_that_ignores_sigterm(tmp_path):
    """A server's whole process group goes, a child that ignores SIGTERM included."""
    script = "trap '' TERM; sleep 300 & sleep 300 & wait"
    server = ts.TeacherServer(ts.TeacherSpec("x", tmp_path), 0, ts.ServeSettings(), tmp_path / "x.log")
    server.proc = subprocess.Popen(["bash", "-c", script], start_new_session=True)
    time.sleep(0.5)
    pgid = server.proc.pid
    assert len(ts.group_pids(pgid)) == 3 and ts.pss_mib(ts.group_pids(pgid)) > 0
    start = time.monotonic()
    server.stop(grace_s=1.0)
    assert ts.group_pids(pgid) == [] and server.proc.returncode == -signal.SIGKILL
    assert time.monotonic() - start < 5


def test_a_server_dies_with_its_launcher_even_when_the_launcher_is_killed(tmp_path):
    """The launcher's children get SIGTERM from the kernel when it dies (PR_SET_PDEATHSIG), here a launcher killed
    with SIGKILL, which runs no clean-up of its own."""
    pid_file = tmp_path / "child.pid"
    launcher = textwrap.dedent(f"""
        import os, subprocess, sys, time
        from verl_ext.composer.teacher_servers import _die_with_launcher
        child = subprocess.Popen(["sleep", "300"], start_new_session=True, preexec_fn=_die_with_launcher(os.getpid()))
        open({str(pid_file)!r}, "w").write(str(child.pid))
        time.sleep(300)
    """)
    proc = subprocess.Popen([sys.executable, "-c", launcher], env={**os.environ, "PYTHONPATH": str(ROOT)})
    deadline = time.monotonic() + 30
    while not pid_file.exists() or not pid_file.read_text():
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.1)
    child = int(pid_file.read_text())
    assert ts.group_pids(child) == [child]
    proc.kill()
    proc.wait()
    assert _group_gone(child), "the server outlived its killed launcher"


def test_sigint_stops_a_starting_server_even_when_the_shell_ignores_it(tmp_path):
    """A shell starts a background job with SIGINT ignored; the launcher still stops on it, with the server it was
    starting (a real vLLM server process, still importing), and exits 130."""
    cmd = [sys.executable, str(ROOT / "scripts/serve_teachers.py"), "--model", "released"]
    launcher = subprocess.Popen(
        [*cmd, "--log-dir", str(tmp_path / "logs")],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )
    try:
        lines = []
        while not any("importing vLLM" in line for line in lines):
            line = launcher.stderr.readline()
            assert line, f"the launcher ended early: {lines}"
            lines.append(line)
        server = descendants(launcher.pid)
        assert server
        launcher.send_signal(signal.SIGINT)
        assert launcher.wait(timeout=60) == 130
        assert alive(server) == []
        assert "[teachers] stopped" in launcher.stderr.read()
    finally:
        launcher.kill()
        launcher.wait()
