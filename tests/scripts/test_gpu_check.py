"""scripts/gpu_check.py is carried to a CUDA machine that has torch but neither verl nor Ray: run here as
`--device cpu` (CPU against CPU), every check must run to its end, and nothing it imports may pull verl or Ray in."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

RUN = """
import runpy, sys
sys.argv = ["gpu_check.py", "--device", "cpu"]
code = "the script returned without an exit status"
try:
    runpy.run_path("scripts/gpu_check.py", run_name="__main__")
except SystemExit as exit:
    code = exit.code
print("pulled in:", sorted(m for m in ("verl", "ray", "vllm") if m in sys.modules))
sys.exit(code)
"""


def test_every_check_runs_on_cpu_without_verl_or_ray():
    out = subprocess.run([sys.executable, "-c", RUN], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    lines = out.stdout.splitlines()
    assert lines[-2:] == ["0 failed", "pulled in: []"], lines[-5:]
    checks = [line for line in lines if line.startswith(("ok", "FAIL"))]
    assert len(checks) >= 30 and all(line.startswith("ok") for line in checks), checks
    for piece in ("registered estimator gtpo_sepa", "SDPO top-k", "staleness", "shared prefix", "timing"):
        assert any(piece in line for line in checks), piece
