"""Typed settings of the `trainer.*` keys the project adds to verl's trainer block (`TrainerExtras`: the JSONL log,
the plot, pass@k, the large held-out evaluation, the trainer class), each declared once on its field (its default,
its bounds, what it means), read with `read_settings` (verl_ext/config/settings.py), so a bad value is a ConfigError
naming the key before Ray starts (the pre-flight reads them) and the trainer reads the same object. verl's own
`trainer.*` keys stay verl's (its dataclass config checks them).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from verl_ext.config.errors import ConfigError
from verl_ext.config.fields import setting
from verl_ext.config.settings import block_keys, read_settings
from verl_ext.metrics_log.console import check_baseline
from verl_ext.metrics_log.plot import check_plot_settings

WHEN = ("first", "last")


@dataclass(frozen=True)
class HeldoutSettings:
    """`trainer.heldout`: the large held-out evaluation (verl_ext/trainer/heldout.py)."""

    files: str | list[str] | None = setting(
        None,
        help="parquet file(s) of the set, as data.val_files takes them; null = off (the real presets name the "
        "generated task's large set: ${mathgen:heldout,<mix>})",
    )
    at: tuple[Literal[WHEN], ...] = setting(
        WHEN,
        help="when the run scores it: first = before the first training step of a fresh run, last = after the last "
        "step; under trainer.val_only it is scored once, whatever this says",
    )
    every: int = setting(
        0,
        ge=0,
        help="also after every this many training steps (a long run's curve; 0 = only at `at`)",
    )
    batch_size: int | None = setting(
        None, ge=1, help="questions per generation call; null = every question in one call (the server batches them)"
    )
    pass_at_k: int = setting(
        0,
        ge=0,
        help="> 0: also k sampled responses per question at the training's sampling settings -> heldout-pass/*/pass@j",
    )
    pass_at_k_questions: int | None = setting(
        None,
        ge=1,
        help="pass@k on the set's first this many questions only (k samples of 1,024 questions cost k greedy "
        "passes); null = every question",
    )

    @property
    def enabled(self) -> bool:
        return bool(self.files)

    def due(self, step: int, is_last: bool) -> bool:
        """Whether the evaluation runs after training step `step` (`is_last`: the run's last step)."""
        if not self.enabled:
            return False
        return (is_last and "last" in self.at) or (self.every > 0 and step % self.every == 0)


@dataclass(frozen=True)
class TrainerExtras:
    """The keys verl-ext adds to verl's `trainer` block."""

    jsonl_metrics_path: str | None = setting(
        None,
        help="a JSONL file: one row of metrics per step (step 0: the validation before training), cut back to the "
        "checkpoint's step on resume; null = none",
    )
    plot_keys: tuple[str, ...] = setting(
        (),
        help="metrics (or patterns such as val-core/all/acc/mean@*) drawn as curves next to the JSONL log when the "
        "run ends; needs jsonl_metrics_path",
    )
    val_baseline: dict | None = setting(
        None,
        help="{label: <text>, value: <number>}: a reference accuracy drawn on the validation panels and printed "
        "at the end; null = none",
    )
    pass_at_k: int | None = setting(
        0,
        ge=0,
        help="responses per validation prompt for pass@k at the last step and under val_only (sampled at the "
        "training's settings: val-pass/*/pass@j); 0 or null = off",
    )
    max_train_minutes: float | None = setting(
        None,
        gt=0,
        help="a budget of training time (time/train_total_s, counted on across resumes): the step expected to pass it "
        "is the run's last; null = total_training_steps only",
    )
    heldout: HeldoutSettings = field(default_factory=HeldoutSettings)
    trainer_cls: str | None = setting(
        None, help="the trainer class as a dotted path; null = the project's ExtRayPPOTrainer (a recipe sets its own)"
    )

    def __post_init__(self):
        try:
            check_plot_settings(self.plot_keys, self.jsonl_metrics_path)
            check_baseline(self.val_baseline)
        except (ValueError, ImportError) as e:
            raise ConfigError(str(e)) from None

    @property
    def responses_for_pass_at_k(self) -> int:
        return self.pass_at_k or 0


def read_trainer_extras(trainer_block) -> TrainerExtras:
    """The project's keys of a run's `trainer` block (verl's keys beside them are left to verl)."""
    block = {k: trainer_block[k] for k in block_keys(TrainerExtras) if trainer_block is not None and k in trainer_block}
    return read_settings(TrainerExtras, block, "trainer")
