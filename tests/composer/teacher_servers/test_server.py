"""The teacher servers (verl_ext/composer/teacher_servers/server.py): ports, each server's command and environment,
its start-up phases, and stopping its process group, fast, on real sockets and processes. A run with a real vLLM
server (the released SmolLM2 queried through the Composer's TeacherPool, then the launcher killed) is part of the
Composer's real-model end-to-end run, tests/recipe/composer/test_e2e_composer_real.py, which shares that server's
start-up."""

from __future__ import annotations

import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from verl_ext.composer.teacher_servers.processes import group_pids, pss_mib
from verl_ext.composer.teacher_servers.server import (
    TeacherServer,
    choose_ports,
    server_command,
    server_env,
    startup_phase,
)
from verl_ext.composer.teacher_servers.settings import ServeSettings, TeacherSpec

ROOT = Path(__file__).resolve().parents[3]


def test_ports_are_distinct_and_free():
    ports = choose_ports(3)
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
            choose_ports(2, first=port - 1)


def test_server_uses_the_cpu_backends_rollout_settings_and_a_small_kv_cache(released_dir):
    backend = OmegaConf.load(ROOT / "verl_ext/config/backend/cpu.yaml")
    cmd = server_command(TeacherSpec("released", released_dir), 8123, ServeSettings(kv_cache_mib=64))
    flags = dict(zip(cmd[3::2], cmd[4::2]))
    assert cmd[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]
    assert flags["--dtype"] == backend.actor_rollout_ref.rollout.dtype == "float32"
    assert flags["--block-size"] == str(backend.actor_rollout_ref.rollout.engine_kwargs.vllm.block_size)
    assert flags["--kv-cache-memory-bytes"] == str(64 << 20)
    assert flags["--served-model-name"] == "released" and flags["--port"] == "8123"
    env = server_env(ServeSettings(threads=2), base={"VLLM_CPU_KVCACHE_SPACE": "1", "PATH": "/bin"})
    assert "VLLM_CPU_KVCACHE_SPACE" not in env  # it would override --kv-cache-memory-bytes
    assert env["VLLM_CPU_NUM_OF_RESERVED_CPU"] == str(backend.hydra.job.env_set.VLLM_CPU_NUM_OF_RESERVED_CPU)
    assert env["OMP_NUM_THREADS"] == "2" and env["PATH"] == "/bin"


def test_the_servers_chat_template_by_name_or_file(released_dir, tmp_path):
    """--chat-template: the agent's line tool template by name (the teachers see the tools and calls as the policy
    does), or a file's text; left out, the model's own (no flag)."""
    from verl_ext.pretrained.smollm2 import LINE_TOOL_CHAT_TEMPLATE

    spec = TeacherSpec("released", released_dir)
    cmd = server_command(spec, 8123, ServeSettings(chat_template="line_tool_template"))
    assert cmd[cmd.index("--chat-template") + 1] == LINE_TOOL_CHAT_TEMPLATE
    (tmp_path / "t.jinja").write_text("{{ messages }}")
    cmd = server_command(spec, 8123, ServeSettings(chat_template=str(tmp_path / "t.jinja")))
    assert cmd[cmd.index("--chat-template") + 1] == "{{ messages }}"
    assert "--chat-template" not in server_command(spec, 8123, ServeSettings())


def test_startup_phase_follows_the_log():
    log = ""
    assert startup_phase(log) == "importing vLLM"
    for line, phase in [
        ("(EngineCore pid=1) INFO [core.py:129] Initializing a V1 LLM engine (v0.31.0) with config", "engine starting"),
        ("(EngineCore pid=1) INFO [default_loader.py:484] Loading weights took 3.08 seconds", "weights loaded"),
        ("INFO [core.py:380] init engine (profile, create kv cache, warmup model) took 0.22 s", "KV cache ready"),
        ("INFO:     Application startup complete.", "HTTP up, first completion"),
    ]:
        log += line + "\n"
        assert startup_phase(log) == phase


def test_stop_escalates_to_sigkill_for_a_group_that_ignores_sigterm(tmp_path):
    """A server's whole process group goes, a child that ignores SIGTERM included."""
    script = "trap '' TERM; sleep 300 & sleep 300 & wait"
    server = TeacherServer(TeacherSpec("x", tmp_path), 0, ServeSettings(), tmp_path / "x.log")
    server.proc = subprocess.Popen(["bash", "-c", script], start_new_session=True)
    time.sleep(0.5)
    pgid = server.proc.pid
    assert len(group_pids(pgid)) == 3 and pss_mib(group_pids(pgid)) > 0
    start = time.monotonic()
    server.stop(grace_s=1.0)
    assert group_pids(pgid) == [] and server.proc.returncode == -signal.SIGKILL
    assert time.monotonic() - start < 5
