"""The generated task's train/validation parquet, written once per parameter set into the project's cache.

``ensure_task(task.TaskSpec(...))`` returns a directory holding ``train.parquet`` and ``val.parquet``
(``task.write_task``) and ``DONE``; the directory name is ``TaskSpec.key()``, a hash of every parameter, of what the
prompts are made of (the mix's modules and demonstration, the instruction) and of ``task.DATA_VERSION``, and the files
are written in a temporary directory renamed into place, so a changed task or an interrupted write is never served.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

from verl_ext.mathgen.task import TaskSpec, get_mix, write_task
from verl_ext.toy.assets import DEFAULT_CACHE, build_once


def ensure_task(spec: TaskSpec | None = None, cache_dir: str | Path | None = None) -> Path:
    spec = spec or TaskSpec()
    root = Path(cache_dir) if cache_dir else DEFAULT_CACHE

    def build(out: Path) -> None:
        mix = get_mix(spec.mix)
        write_task(out, spec.train_size, spec.val_size, spec.seed, spec.difficulty, mix.modules, mix.demonstration)

    return build_once(root / f"mathgen-{spec.key()}", build, asdict(spec))
