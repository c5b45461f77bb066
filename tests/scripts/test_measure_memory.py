"""scripts/measure_memory.py from the command line: a watched command run to its end, its peak in the JSON and the
report."""

from __future__ import annotations

import json
import sys


def test_a_watched_command_leaves_its_peak_in_the_json(tmp_path, load_script):
    mm = load_script("measure_memory")
    out = tmp_path / "mem.json"
    hold = "b = bytearray(48 << 20); b[::4096] = b'x' * len(b[::4096]); import time; time.sleep(2)"
    rc = mm.main(["--every", "0.5", "--out", str(out), "--", sys.executable, "-c", hold])
    result = json.loads(out.read_text())
    assert rc == 0 and result["samples"] == len(result["timeline"]) >= 2
    assert result["peak"]["total_gb"] >= 48 / 1024 and result["peak"]["processes"] == 1
    assert mm.report(result).startswith("peak PSS of the run: ")
