"""The generated task's train/validation parquet, written once per parameter set into the project's cache.

``ensure_task(TaskSpec(...))`` returns a directory holding ``train.parquet`` and ``val.parquet`` (``task.write_task``)
and ``DONE``; the directory name hashes every parameter and ``DATA_VERSION``, and the files are written in a temporary
directory renamed into place, so a changed task or an interrupted write is never served.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path

from verl_ext.mathgen.task import DEFAULT_DIFFICULTY, mix_modules, write_task
from verl_ext.toy.assets import DEFAULT_CACHE, build_once

DATA_VERSION = 1  # bump when the rows change for the same parameters (prompt, instruction, answer format)


@dataclass(frozen=True)
class TaskSpec:
    """The generated task's parameters: the resolver's and the CLI's defaults (``verl_ext/mathgen/task.py``)."""

    train_size: int = 2048  # training rows
    val_size: int = 144  # validation rows (disjoint questions): 16 per module of the "all" mix
    seed: int = 0  # train rows from seed 2*seed, validation from 2*seed + 1
    difficulty: float = DEFAULT_DIFFICULTY  # the entropy band, in [-1, 1]; 0 = the generator's train-easy
    mix: str = "all"  # which modules: a name of task.MIXES

    def key(self) -> str:
        params = {**asdict(self), "data_version": DATA_VERSION}
        return hashlib.sha256(json.dumps(params, sort_keys=True).encode()).hexdigest()[:12]


def ensure_task(spec: TaskSpec | None = None, cache_dir: str | Path | None = None) -> Path:
    spec = spec or TaskSpec()
    root = Path(cache_dir) if cache_dir else DEFAULT_CACHE

    def build(out: Path) -> None:
        write_task(out, spec.train_size, spec.val_size, spec.seed, spec.difficulty, mix_modules(spec.mix))

    return build_once(root / f"mathgen-{spec.key()}", build, asdict(spec))
