"""The generated task's train/validation parquet, written once per parameter set into the project's cache.

``ensure_task(task.TaskSpec(...))`` returns a directory holding ``train.parquet`` and ``val.parquet``
(``task.write_task``) and ``DONE``; the directory name is ``TaskSpec.key()``, a hash of every parameter, of what the
prompts are made of (the mix's modules and demonstration, the instruction) and of ``task.DATA_VERSION``, and the files
are written in a temporary directory renamed into place, so a changed task or an interrupted write is never served.

``ensure_large_heldout(spec, size)`` returns ``heldout_large.parquet``, the task's large held-out split
(``task.write_large_heldout``: disjoint by meaning from that task's cached train and validation splits), in its own
directory ``mathgen-<key>-heldout_large-<size>`` beside the task's.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

from verl_ext.mathgen.task import LARGE_HELDOUT_SIZE, TaskSpec, get_mix, write_large_heldout, write_task
from verl_ext.toy.assets import DEFAULT_CACHE, build_once


def ensure_task(spec: TaskSpec | None = None, cache_dir: str | Path | None = None) -> Path:
    spec = spec or TaskSpec()
    root = Path(cache_dir) if cache_dir else DEFAULT_CACHE

    def build(out: Path) -> None:
        mix = get_mix(spec.mix)
        write_task(out, spec.train_size, spec.val_size, spec.seed, spec.difficulty, mix.modules, mix.demonstration)

    return build_once(root / f"mathgen-{spec.key()}", build, asdict(spec))


def ensure_large_heldout(
    spec: TaskSpec | None = None, size: int = LARGE_HELDOUT_SIZE, cache_dir: str | Path | None = None
) -> Path:
    spec = spec or TaskSpec()
    root = Path(cache_dir) if cache_dir else DEFAULT_CACHE
    task_dir = ensure_task(spec, cache_dir)

    def build(out: Path) -> None:
        mix = get_mix(spec.mix)
        write_large_heldout(
            out / "heldout_large.parquet",
            task_dir / "train.parquet",
            task_dir / "val.parquet",
            size,
            spec.seed,
            spec.difficulty,
            mix.modules,
            mix.demonstration,
        )

    params = {**asdict(spec), "heldout_large": size}
    return build_once(root / f"mathgen-{spec.key()}-heldout_large-{size}", build, params) / "heldout_large.parquet"
