"""Streaming JSONL metrics log: one JSON object per training step, appended and flushed as the step ends.

Format: each line is ``{"step": <int>, <metric>: <value>, ...}\\n``. Values are converted to plain JSON:
numpy / torch scalars to int / float / bool, arrays and multi-element tensors to (nested) lists, dict keys to str.
Non-finite floats (nan, +-inf) are written as ``null`` (strict JSON; every reader accepts it, and "no value" is
what a nan metric means). Objects of other types are an error, not a silent ``str()``.

Resume: a crash can leave a torn last line and, after the last checkpoint, lines of steps that will be redone.
``truncate_after(path, step)`` (used by ``JsonlMetricsWriter(path, resume_from_step=step)``) rewrites the file
atomically with only the complete lines whose step <= ``step``, so after resuming no step appears twice and none
is missing. A fresh run is ``resume_from_step=0`` (the default): it starts from an empty file.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import numpy as np
import torch


def to_json_value(value: Any, where: str = "value") -> Any:
    """Plain-JSON version of a metric value (see module docstring)."""
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu()
        value = value.item() if value.numel() == 1 else value.tolist()
    elif isinstance(value, np.ndarray | np.generic):
        value = value.tolist()  # also turns numpy scalars into python ones
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, list | tuple):
        return [to_json_value(v, where) for v in value]
    if isinstance(value, dict):
        return {str(k): to_json_value(v, f"{where}.{k}") for k, v in value.items()}
    raise TypeError(f"metrics log: {where} has type {type(value).__name__}, which has no JSON form")


def read_jsonl(path: str | Path) -> list[dict]:
    """Complete records of a metrics log; a torn last line (crash mid-write) is ignored."""
    return _parse(Path(path))


def truncate_after(path: str | Path, step: int) -> int:
    """Keep only complete lines with ``step`` <= ``step`` (atomic rewrite). Returns the number of lines kept."""
    return len(_truncate(Path(path), step))


def _truncate(path: Path, step: int) -> list[dict]:
    kept = [r for r in _parse(path) if r["step"] <= step]
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        f.writelines(json.dumps(r, allow_nan=False) + "\n" for r in kept)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return kept


def _parse(path: Path) -> list[dict]:
    if not path.exists():
        return []
    lines = path.read_text().split("\n")
    records = []
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            if i == len(lines) - 1:  # no newline after it: the write was cut by a crash
                break
            raise ValueError(f"metrics log {path}: line {i + 1} is not JSON and is not the last line") from None
        if not isinstance(record, dict) or not isinstance(record.get("step"), int):
            raise ValueError(f"metrics log {path}: line {i + 1} has no integer 'step'")
        records.append(record)
    return records


class JsonlMetricsWriter:
    """Appends one line per training step; each line is flushed (and fsynced if ``fsync``) before ``log`` returns.

    Args:
        path: the log file (created with its parent directories).
        resume_from_step: the last step already done, i.e. the checkpoint's ``global_steps`` on resume, 0 for a
            fresh run (which starts from an empty file and may log step 0). Lines after it are cut away first. Steps
            must then be logged in increasing order, after the last step kept (``last_step``: the resumed step
            itself may still be missing, if the crash came before its line was written).
        fsync: also ``os.fsync`` after each line, so a machine crash (not only a process crash) keeps it.
            Recommended False unless steps are minutes long; a flush already survives a killed process.
    """

    def __init__(self, path: str | Path, resume_from_step: int = 0, fsync: bool = False):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # A fresh run (0) keeps nothing, so it may log step 0 (validation before training) itself.
        kept = _truncate(self.path, int(resume_from_step) if resume_from_step > 0 else -1)
        self.last_step = max((r["step"] for r in kept), default=-1)
        self.fsync = fsync
        self._file = open(self.path, "a")

    def log(self, step: int, metrics: dict[str, Any]) -> None:
        """Write ``{"step": step, **metrics}`` as one line."""
        if not isinstance(step, int | np.integer) or step <= self.last_step:
            raise ValueError(f"metrics log: step {step!r} must be an int > the last logged step {self.last_step}")
        if "step" in metrics:
            raise ValueError("metrics log: 'step' is set by log(step, ...), not by a metric")
        record = {"step": int(step), **to_json_value(dict(metrics), "metrics")}
        self._file.write(json.dumps(record, allow_nan=False) + "\n")
        self._file.flush()
        if self.fsync:
            os.fsync(self._file.fileno())
        self.last_step = int(step)

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> JsonlMetricsWriter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
