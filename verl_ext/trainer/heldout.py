"""The large held-out evaluation (`trainer.heldout`): greedy accuracy on a large question set that shares no question
with training, through the run's own generation path, at the run's first and last step and under `val_only`.

The in-training validation (`data.val_files`, every `test_freq` steps) keeps its small set for the curves: 144
questions put a binomial standard deviation of ~0.03 on an accuracy, most of the spread of a paired difference
between two seeds' runs. This set, ~1,024 questions or more, is scored where a decision is read: before training,
after it, and for any checkpoint on disk (`trainer.val_only=true` with the model or checkpoint to evaluate;
`scripts/evaluate.py` builds that command).

How: verl's own `_validate` (the rollout server, `val_kwargs` sampling: greedy in the presets, the configured
reward, the answers dumped as `<step>.jsonl`) runs over this set's dataloader instead of the validation one; its
metrics come back under `heldout-core/` and `heldout-aux/` instead of `val-core/` and `val-aux/`
(`heldout-core/<source>/acc/mean@1`, `heldout-core/all/...` over several sources), its answers in
`<trainer.validation_data_dir>/heldout/<step>.jsonl`, its wall time as `heldout/seconds`. With `pass_at_k > 0`,
k responses per question at the training's sampling settings add `heldout-pass/<source>/pass@j`
(sampled_eval.py), on the first `pass_at_k_questions` questions when set (`heldout/pass_questions`). The set's rows
are read with the run's `data` settings (prompt length, chat template).
"""

from __future__ import annotations

import contextlib
import time

from omegaconf import open_dict

from verl_ext.config.trainer_settings import HeldoutSettings
from verl_ext.metrics_log.terminal import phase

PREFIX = "heldout"


def rename(metrics: dict, prefix: str = PREFIX) -> dict:
    """verl's validation keys as this evaluation's: `val-core/...` -> `<prefix>-core/...`, `val-aux/...` ->
    `<prefix>-aux/...`, `val-pass/...` -> `<prefix>-pass/...`; other keys unchanged."""
    out = {}
    for key, value in metrics.items():
        head, sep, rest = key.partition("/")
        out[f"{prefix}{head[3:]}/{rest}" if sep and head.startswith("val-") else key] = value
    return out


class HeldoutEval:
    """The evaluation of one run: its data set built once, on first use, with the run's `data` settings."""

    def __init__(self, settings: HeldoutSettings):
        self.settings = settings
        self._dataset = None
        self._loader = None

    def due_first(self, val_only: bool = False) -> bool:
        """Whether it runs before training (`at` holds first) or, under val_only, once."""
        return self.settings.enabled and (val_only or "first" in self.settings.at)

    def due_after(self, step: int, is_last: bool) -> bool:
        """Whether it runs after training step `step`: the last one (`at` holds last), or every `every` steps."""
        return self.settings.due(step, is_last)

    def _data(self, trainer):
        if self._dataset is None:
            from torch.utils.data import DataLoader
            from verl.trainer.ppo.utils import create_rl_dataset
            from verl.utils.dataset.rl_dataset import collate_fn

            self._dataset = create_rl_dataset(
                self.settings.files, trainer.config.data, trainer.tokenizer, trainer.processor, is_train=False
            )
            size = self.settings.batch_size or len(self._dataset)
            self._loader = DataLoader(self._dataset, batch_size=size, shuffle=False, collate_fn=collate_fn)
        return self._dataset, self._loader

    def evaluate(self, trainer) -> dict:
        """Score `trainer`'s current weights on the set: the renamed validation metrics and `heldout/seconds`."""
        dataset, loader = self._data(trainer)
        phase(f"held-out evaluation: {len(dataset)} questions at step {trainer.global_steps}")
        t0 = time.monotonic()
        with _validating_on(trainer, loader):
            metrics = rename(trainer._validate())
        if self.settings.pass_at_k:
            metrics.update(self._pass_at_k(trainer, dataset))
        metrics[f"{PREFIX}/seconds"] = time.monotonic() - t0
        metrics[f"{PREFIX}/questions"] = float(len(dataset))
        return metrics

    def _pass_at_k(self, trainer, dataset) -> dict:
        """`heldout-pass/*/pass@j` on the set's first `pass_at_k_questions` questions (all by default)."""
        from torch.utils.data import Subset

        from verl_ext.trainer.sampled_eval import pass_at_k_metrics, sample_counts

        n = min(self.settings.pass_at_k_questions or len(dataset), len(dataset))
        questions = dataset if n == len(dataset) else Subset(dataset, range(n))
        per_call = min(self.settings.batch_size or n, n)
        k = self.settings.pass_at_k
        sampled = sample_counts(trainer, questions, k, per_call, "acc", desc=f"held-out pass@{k}: {n} questions")
        return {**rename(pass_at_k_metrics(sampled)), f"{PREFIX}/pass_questions": float(n)}


@contextlib.contextmanager
def _validating_on(trainer, loader):
    """verl's `_validate` reads `trainer.val_dataloader` and dumps answers to `trainer.validation_data_dir`: point
    both at this set for the call, and back after it, whatever happens."""
    saved_loader = trainer.val_dataloader
    saved_dir = trainer.config.trainer.get("validation_data_dir", None)
    trainer.val_dataloader = loader
    with open_dict(trainer.config):
        trainer.config.trainer.validation_data_dir = f"{saved_dir}/{PREFIX}" if saved_dir else None
    try:
        yield
    finally:
        trainer.val_dataloader = saved_loader
        with open_dict(trainer.config):
            trainer.config.trainer.validation_data_dir = saved_dir
