"""A recipe's driver as a child process on this machine (verl_ext/launch/local_run.py), run for real: the entry point
is a small module that prints, writes a metric log where the overrides say, and exits with the code it is given."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from verl_ext.launch.artifacts import METRICS_FILE
from verl_ext.launch.local_run import driver_command, run_driver, run_recipe

ROOT = Path(__file__).resolve().parents[2]

ENTRY = textwrap.dedent("""
    import json, sys
    from pathlib import Path
    args = dict(a.split("=", 1) for a in sys.argv[1:])
    print("run dir", args["trainer.default_local_dir"])
    print("to stderr", file=sys.stderr)
    with open(args["trainer.jsonl_metrics_path"], "w") as f:
        for step in (1, 2):
            f.write(json.dumps({"step": step, "lr": float(args["lr"])}) + "\\n")
    sys.exit(int(args.get("exit", "0")))
""")


@pytest.fixture
def entry(tmp_path, monkeypatch):
    (tmp_path / "entry_mod.py").write_text(ENTRY)
    monkeypatch.setenv("PYTHONPATH", f"{tmp_path}:{ROOT}")
    return "entry_mod"


def test_the_command_is_this_interpreter_running_the_entry_module():
    assert driver_command("recipe.x.main", ["a=1", "b=2"]) == [sys.executable, "-m", "recipe.x.main", "a=1", "b=2"]


def test_run_recipe_places_the_run_and_returns_its_metric_rows(entry, tmp_path):
    run_dir = tmp_path / "out" / "arm"
    run_dir.mkdir(parents=True)
    console = tmp_path / "logs" / "arm.log"  # its folder is made
    rows = run_recipe(entry, ["lr=0.5"], run_dir, console)
    assert rows == [{"step": 1, "lr": 0.5}, {"step": 2, "lr": 0.5}]
    assert (run_dir / METRICS_FILE).is_file()
    text = console.read_text()
    assert f"run dir {run_dir}" in text and "to stderr" in text


def test_a_failed_run_raises_with_its_exit_status(entry, tmp_path):
    with pytest.raises(subprocess.CalledProcessError) as failed:
        run_recipe(entry, ["lr=1", "exit=3"], tmp_path, tmp_path / "arm.log")
    assert failed.value.returncode == 3 and "exit=3" in failed.value.cmd


def test_run_driver_returns_the_exit_status_and_appends_only_when_asked(entry, tmp_path):
    console = tmp_path / "console.log"
    args = ["lr=1", f"trainer.default_local_dir={tmp_path}", f"trainer.jsonl_metrics_path={tmp_path / 'm.jsonl'}"]
    assert run_driver(entry, [*args, "exit=2"], console) == 2
    assert run_driver(entry, args, console, append=True) == 0
    assert console.read_text().count("to stderr") == 2  # a resumed run's output follows the first's
    assert run_driver(entry, args, console) == 0
    assert console.read_text().count("to stderr") == 1


def test_a_driver_printing_bytes_that_are_not_utf8_does_not_crash_the_runner(tmp_path, monkeypatch):
    """A run's output is not always UTF-8 (a worker's binary junk, a Latin-1 file name): the line is passed on with
    the bad bytes replaced, the run's later lines and its exit status still arrive."""
    (tmp_path / "bytes_mod.py").write_text(
        "import sys\n"
        "sys.stdout.buffer.write(b'step 1/2 | caf\\xe9 \\xff\\xfe\\n')\n"
        "sys.stdout.buffer.write(b'step 2/2 | done\\n')\n"
        "sys.exit(4)\n"
    )
    monkeypatch.setenv("PYTHONPATH", f"{tmp_path}:{ROOT}")
    seen = []
    console = tmp_path / "console.log"
    assert run_driver("bytes_mod", [], console, on_line=seen.append) == 4
    assert seen == ["step 1/2 | caf\ufffd \ufffd\ufffd\n", "step 2/2 | done\n"]
    assert console.read_text().splitlines() == ["step 1/2 | caf\ufffd \ufffd\ufffd", "step 2/2 | done"]
