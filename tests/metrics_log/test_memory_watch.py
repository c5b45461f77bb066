"""The memory sampler (verl_ext/metrics_log/memory_watch.py) on real process trees: every process of the tree counted
once in its part, a teacher server's children counted as the teacher's whatever their names (its vLLM engine is named as
the rollout's), a watch in a thread that ends with its process and leaves the JSON with the peak."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time

from verl_ext.metrics_log.memory_watch import MemoryWatch, children_map, parts_below, sample

# a tree as a teacher server has it: the server, its child named as a vLLM engine, and a second such child holding
# 64 MB
TREE = textwrap.dedent("""
    import subprocess, sys, time
    py = sys.executable
    sleep = "import time; time.sleep(30)"
    hold = "import time; b = bytearray(64 << 20); b[::4096] = b'x' * len(b[::4096]); time.sleep(30)"
    teacher = subprocess.Popen([py, "-c", sleep, "VLLM::EngineCore"], executable=py)
    rollout = subprocess.Popen([py, "-c", hold, "VLLM::EngineCore"], executable=py)
    time.sleep(30)
""")


def test_parts_of_a_real_process_tree_and_the_teachers_children(tmp_path):
    launcher = tmp_path / "tree.py"
    launcher.write_text(TREE)
    # named as a teacher server is (python -m vllm.entrypoints.openai.api_server ...)
    proc = subprocess.Popen([sys.executable, str(launcher), "vllm.entrypoints.openai.api_server"])
    try:
        time.sleep(3)  # both children started and the 64 MB touched
        below = parts_below(proc.pid, children_map())
        children = [pid for pid in below if pid != proc.pid]
        assert len(children) == 2 and below[proc.pid] == "teacher servers"
        # the launcher's two children are named as vLLM engines; both are the teacher's (sticky), not the rollout's
        assert all(below[pid] == "teacher servers" for pid in children)
        # the same tree read without the launcher's name: its engine children are the rollout's
        plain = parts_below(proc.pid, children_map(), name_of=lambda pid: "python -c VLLM::EngineCore")
        assert set(plain.values()) == {"rollout: vLLM engine"}
        reading = sample(proc.pid)
        assert reading["processes"] == 3 and set(reading["parts_gb"]) == {"teacher servers"}
        assert reading["total_gb"] > 64 / 1024  # the 64 MB a child touched, counted
    finally:
        proc.kill()
        for pid in children:
            subprocess.run(["kill", "-9", str(pid)], check=False)
        proc.wait()


def test_a_watch_in_a_thread_follows_the_process_to_its_end(tmp_path):
    out = tmp_path / "mem.json"
    hold = "b = bytearray(48 << 20); b[::4096] = b'x' * len(b[::4096]); import time; time.sleep(2)"
    memory = MemoryWatch(out, every=0.5)
    proc = subprocess.Popen([sys.executable, "-c", hold])
    with memory.of(proc.pid):
        proc.wait()
    result = json.loads(out.read_text())
    assert result["samples"] == len(result["timeline"]) >= 2
    assert memory.peak_gib == result["peak"]["total_gb"] >= 48 / 1024 and result["peak"]["processes"] == 1
    # the watch of a process that already ended takes no reading
    assert MemoryWatch(None).peak_gib is None
