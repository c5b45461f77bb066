"""The set-up leaves the stack byte-compiled.

CI's machines run with PYTHONDONTWRITEBYTECODE=1: Python then never writes the bytecode it compiles on import, so a
stack installed without bytecode (`pip install --no-compile`) is compiled from source again in every process of every
run, the driver, each Ray worker and vLLM's engine. One CI run went from about 37 to 60 minutes that way.
"""

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# What a run imports in every process: the driver, Ray's workers, vLLM's server and engine
STACK = ("torch", "transformers", "ray", "verl", "vllm", "tensordict", "numpy")


def python_files_without_bytecode(packages=STACK) -> tuple[int, list[Path]]:
    """(how many .py files the packages hold, those without bytecode where Python looks for it)."""
    files = [f for pkg in packages for f in Path(importlib.util.find_spec(pkg).origin).parent.rglob("*.py")]
    missing = [f for f in files if not Path(importlib.util.cache_from_source(str(f))).exists()]
    return len(files), missing


def compiles(path: Path) -> bool:
    try:
        compile(path.read_bytes(), str(path), "exec")
    except SyntaxError:  # e.g. torch's tests of Python 3.12 syntax: neither pip nor an import can compile them
        return False
    return True


def test_every_python_file_of_the_stack_has_its_bytecode():
    count, missing = python_files_without_bytecode()
    assert count > 5_000, count  # ~10,800 here
    missing = [f for f in missing if compiles(f)]
    assert missing == [], f"{len(missing)} of {count} files without bytecode, e.g. {[str(f) for f in missing[:3]]}"


def test_the_check_sees_a_stack_without_bytecode(monkeypatch, tmp_path):
    monkeypatch.setattr("sys.pycache_prefix", str(tmp_path))  # where Python would look with PYTHONPYCACHEPREFIX
    count, missing = python_files_without_bytecode(("verl",))
    assert len(missing) == count > 300  # 366 here


def test_the_set_up_does_not_skip_byte_compiling():
    """pip compiles unless told not to; uv only when told to."""
    script = (ROOT / "scripts" / "setup_env.sh").read_text()
    code = [line for line in script.splitlines() if not line.lstrip().startswith("#")]
    installs = [line for line in code if " install " in line]
    assert installs, "no install in scripts/setup_env.sh"
    assert not any("--no-compile" in line for line in installs), installs
    uv_installs = [line for line in installs if "uv" in line.split(" install ")[0]]
    assert uv_installs and all("--compile-bytecode" in line for line in uv_installs), uv_installs
