"""Typed settings of the `trainer.*` keys the project adds to verl's trainer block, each declared once on its field
(its default, its bounds, what it means), read with `read_settings` (verl_ext/config/settings.py), so a bad value is
a ConfigError naming the key before Ray starts (the pre-flight reads them) and the trainer reads the same object.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

WHEN = ("first", "last")


@dataclass(frozen=True)
class HeldoutSettings:
    """`trainer.heldout`: the large held-out evaluation (verl_ext/trainer/heldout.py)."""

    # parquet file(s) of the set, as data.val_files takes them; null = off (the real presets name the generated
    # task's large set: ${mathgen:heldout,<mix>})
    files: str | list[str] | None = None
    # when the run scores it: "first" = before the first training step of a fresh run, "last" = after the last
    # step; under trainer.val_only it is scored once, whatever this says
    at: tuple[Literal["first", "last"], ...] = WHEN
    # questions per generation call; null = every question in one call (the rollout server batches them itself)
    batch_size: int | None = None
    # > 0: also k sampled responses per question at the training's sampling settings -> heldout-pass/*/pass@j
    pass_at_k: int = 0

    def __post_init__(self):
        at = tuple(self.at or ())
        bad = [w for w in at if w not in WHEN]
        if bad:
            raise ValueError(f"at: {bad} not among {list(WHEN)}")
        object.__setattr__(self, "at", at)
        if isinstance(self.files, (list, tuple)) or (self.files is not None and not isinstance(self.files, str)):
            object.__setattr__(self, "files", [str(f) for f in self.files])
        if self.batch_size is not None and int(self.batch_size) < 1:
            raise ValueError(f"batch_size must be >= 1 or null, got {self.batch_size}")
        if int(self.pass_at_k) < 0:
            raise ValueError(f"pass_at_k must be >= 0, got {self.pass_at_k}")

    @property
    def enabled(self) -> bool:
        return bool(self.files)


def read_heldout(cfg) -> HeldoutSettings:
    """`trainer.heldout` of a run's config (absent: off)."""
    from verl_ext.config.settings import get, read_settings

    return read_settings(HeldoutSettings, get(cfg, "trainer.heldout"), "trainer.heldout")
