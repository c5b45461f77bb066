"""Streaming JSONL metrics log on real files, including a process killed in the middle of a line."""

import json
import math
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

from verl_ext.metrics_log.jsonl import JsonlMetricsWriter, read_jsonl, to_json_value, truncate_after


def raw_lines(path) -> list[str]:
    return path.read_text().split("\n")


def test_each_step_is_a_flushed_line(tmp_path):
    path = tmp_path / "logs" / "metrics.jsonl"
    with JsonlMetricsWriter(path) as writer:
        for step in (1, 2, 3):
            writer.log(step, {"loss": 1.0 / step, "timing/gen": step * 0.5})
            # readable by another reader before close: the line was flushed when log() returned
            assert [json.loads(x)["step"] for x in raw_lines(path) if x] == list(range(1, step + 1))
    assert read_jsonl(path) == [{"step": s, "loss": 1.0 / s, "timing/gen": s * 0.5} for s in (1, 2, 3)]
    assert path.read_text().endswith("\n")


def test_values_become_plain_json(tmp_path):
    metrics = {
        "np_float": np.float32(0.5),
        "np_int": np.int64(7),
        "np_bool": np.bool_(True),
        "torch_scalar": torch.tensor(2.5),
        "torch_int": torch.tensor(3),
        "vector": np.array([1.0, np.nan]),
        "tensor_vec": torch.tensor([1, 2]),
        "nan": float("nan"),
        "inf": np.float64("inf"),
        "neg_inf": -math.inf,
        "nested": {"a": (1, np.float64(2.0))},
        "none": None,
        "text": "ok",
        5: "int key",
    }
    with JsonlMetricsWriter(tmp_path / "m.jsonl", fsync=True) as writer:
        writer.log(np.int64(1), metrics)
    line = raw_lines(tmp_path / "m.jsonl")[0]
    assert "NaN" not in line and "Infinity" not in line
    assert json.loads(line) == {
        "step": 1,
        "np_float": 0.5,
        "np_int": 7,
        "np_bool": True,
        "torch_scalar": 2.5,
        "torch_int": 3,
        "vector": [1.0, None],
        "tensor_vec": [1, 2],
        "nan": None,
        "inf": None,
        "neg_inf": None,
        "nested": {"a": [1, 2.0]},
        "none": None,
        "text": "ok",
        "5": "int key",
    }
    assert type(json.loads(line)["np_int"]) is int


def test_bad_values_and_steps_are_errors(tmp_path):
    with JsonlMetricsWriter(tmp_path / "m.jsonl") as writer:
        with pytest.raises(TypeError, match=r"metrics.obj has type object"):
            writer.log(1, {"obj": object()})
        writer.log(1, {"x": 1})
        for step in (1, 0, 1.5):
            with pytest.raises(ValueError, match="must be an int >"):
                writer.log(step, {"x": 1})
        with pytest.raises(ValueError, match="'step' is set by log"):
            writer.log(2, {"step": 3})
    assert to_json_value([np.float16(1.5)]) == [1.5]


CRASHING_WRITER = textwrap.dedent(
    """
    import os, sys
    from verl_ext.metrics_log.jsonl import JsonlMetricsWriter
    writer = JsonlMetricsWriter(sys.argv[1])
    for step in range(1, 6):
        writer.log(step, {"reward": step / 10, "note": "x" * 50})
    # the process dies half-way through writing step 6's line
    writer._file.write('{"step": 6, "reward": 0.6, "no')
    writer._file.flush()
    os._exit(9)
    """
)


@pytest.fixture(scope="module")
def crashed_log(tmp_path_factory):
    """A log left by a real process killed while writing step 6 (run once, copied per test)."""
    path = tmp_path_factory.mktemp("crash") / "metrics.jsonl"
    result = subprocess.run([sys.executable, "-c", CRASHING_WRITER, str(path)], capture_output=True, text=True)
    assert result.returncode == 9, result.stderr
    assert not path.read_text().endswith("\n")  # torn last line on disk
    return path.read_text()


@pytest.mark.parametrize("checkpoint_step", [3, 5, 0])
def test_resume_after_crash_has_no_duplicate_and_no_gap(tmp_path, crashed_log, checkpoint_step):
    path = tmp_path / "metrics.jsonl"
    path.write_text(crashed_log)
    assert [r["step"] for r in read_jsonl(path)] == [1, 2, 3, 4, 5]  # the torn line is skipped
    with JsonlMetricsWriter(path, resume_from_step=checkpoint_step) as writer:
        assert [r["step"] for r in read_jsonl(path)] == list(range(1, checkpoint_step + 1))
        for step in range(checkpoint_step + 1, 9):  # the trainer redoes the steps after its checkpoint
            writer.log(step, {"reward": step / 100})
    records = read_jsonl(path)
    assert [r["step"] for r in records] == list(range(1, 9))
    assert all(r["reward"] == (r["step"] / 10 if r["step"] <= checkpoint_step else r["step"] / 100) for r in records)
    assert all(json.loads(x) for x in raw_lines(path) if x)  # every line is whole again


def test_truncate_after_keeps_complete_last_line_without_newline(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_text('{"step": 1}\n{"step": 2}')
    assert truncate_after(path, 10) == 2
    assert path.read_text() == '{"step": 1}\n{"step": 2}\n'
    assert truncate_after(tmp_path / "absent.jsonl", 3) == 0


def test_corruption_before_the_last_line_is_an_error(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_text('{"step": 1}\n{"step": 2, "x\n{"step": 3}\n')
    with pytest.raises(ValueError, match="line 2 is not JSON"):
        JsonlMetricsWriter(path, resume_from_step=3)
    path.write_text('{"step": 1}\n{"loss": 2}\n')
    with pytest.raises(ValueError, match="line 2 has no integer 'step'"):
        read_jsonl(path)


def test_validation_before_training_is_step_zero_and_survives_resume(tmp_path):
    path = tmp_path / "m.jsonl"
    w = JsonlMetricsWriter(path)
    w.log(0, {"val": 0.1})
    w.log(1, {"acc": 0.2})
    w.log(2, {"acc": 0.3})
    w.close()
    w = JsonlMetricsWriter(path, resume_from_step=1)  # checkpoint at step 1: step 2 is redone
    with pytest.raises(ValueError, match="> the last logged step 1"):
        w.log(1, {"acc": 0.0})
    w.log(2, {"acc": 0.4})
    w.close()
    assert [(r["step"], r.get("acc")) for r in read_jsonl(path)] == [(0, None), (1, 0.2), (2, 0.4)]
    JsonlMetricsWriter(path).close()  # a fresh run starts empty, step 0 included
    assert read_jsonl(path) == []


def test_a_resumed_step_whose_line_was_lost_can_still_be_logged(tmp_path):
    """A crash between step 3's checkpoint and its line: the resume (from step 3) may write line 3, once."""
    path = tmp_path / "m.jsonl"
    with JsonlMetricsWriter(path) as w:
        for step in (1, 2):
            w.log(step, {"acc": step / 10})
    with JsonlMetricsWriter(path, resume_from_step=3) as w:
        assert w.last_step == 2
        w.log(3, {"acc": 0.3})
        with pytest.raises(ValueError, match="> the last logged step 3"):
            w.log(3, {"acc": 0.3})
        w.log(4, {"acc": 0.4})
    assert [r["step"] for r in read_jsonl(path)] == [1, 2, 3, 4]
