"""The pre-flight's report: the `Plan` of a run (model, data files and rows, first prompt's length, steps, batch
arithmetic, estimator, reward, the recipe's settings) and how its steps and batch lines are worked out from the
config. Nothing here checks: it describes a config the checks have passed."""

from __future__ import annotations

from dataclasses import dataclass, field

from omegaconf import DictConfig

from verl_ext.config.settings import get


@dataclass(frozen=True)
class DataFile:
    key: str  # data.train_files / data.val_files
    path: str
    rows: int | None  # None: a remote path, not read here
    columns: tuple[str, ...] = ()


@dataclass
class Plan:
    """What the run will do, as the pre-flight resolved it."""

    recipe: str
    model: str = "-"
    data: list[DataFile] = field(default_factory=list)
    first_prompt: str = "-"
    steps: str = "-"
    batch: str = "-"
    estimator: str = "-"
    reward: str = "-"
    settings: str = ""
    memory: str = ""  # the estimated peak host memory on the CPU backend (memory.py)
    notes: list[str] = field(default_factory=list)

    def render(self) -> str:
        lines = [f"[preflight] {self.recipe}: the run's plan", f"  model      {self.model}"]
        for d in self.data:
            rows = "remote, not read" if d.rows is None else f"{d.rows} rows"
            lines.append(f"  {d.key:<17} {d.path} ({rows})")
        lines += [
            f"  first prompt {self.first_prompt}",
            f"  steps      {self.steps}",
            f"  batch      {self.batch}",
            f"  estimator  {self.estimator}",
            f"  reward     {self.reward}",
        ]
        if self.settings:
            lines.append(f"  settings   {self.settings}")
        if self.memory:
            lines.append(f"  memory     {self.memory}")
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)


def batch_arithmetic(cfg: DictConfig, n: int) -> str:
    prompts = get(cfg, "data.train_batch_size")
    mini = get(cfg, "actor_rollout_ref.actor.ppo_mini_batch_size")
    epochs = get(cfg, "actor_rollout_ref.actor.ppo_epochs", 1)
    text = f"{prompts} prompts x {n} responses = {prompts * n} rows per step"
    if isinstance(mini, int) and mini > 0:
        text += f"; {max(prompts // mini, 1)} mini-batch(es) of {mini} prompts ({mini * n} rows), {epochs} PPO epoch(s)"
    gen = get(cfg, "data.gen_batch_size")
    if gen and gen != prompts:
        text += f"; {gen} prompts per generation call"
    return text


def steps_plan(cfg: DictConfig, data: list[DataFile], prompts_per_step: int | None = None) -> str:
    """Steps the run takes. A step consumes `prompts_per_step` rows of the train data (the caller's: e.g. a trainer
    that keeps data.train_batch_size prompts out of several generation calls); None: verl's one dataloader batch
    (data.gen_batch_size, else data.train_batch_size)."""
    if get(cfg, "trainer.val_only", False):
        return "validation only (trainer.val_only=true)"
    epochs = get(cfg, "trainer.total_epochs")
    steps = get(cfg, "trainer.total_training_steps")
    train = [d for d in data if d.key == "data.train_files"]
    rows = None if not train or any(d.rows is None for d in train) else sum(d.rows for d in train)
    cap = get(cfg, "data.train_max_samples", -1)
    if rows is not None and isinstance(cap, int) and cap > 0:
        rows = min(rows, cap)
    per_epoch = None
    if rows is not None:
        if prompts_per_step is None:  # verl: one step per full dataloader batch
            prompts_per_step = get(cfg, "data.gen_batch_size") or get(cfg, "data.train_batch_size")
        per_epoch = rows // prompts_per_step
    epoch_text = f"{per_epoch} steps per epoch at most" if per_epoch is not None else "steps per epoch unknown"
    if steps is not None:
        return f"{steps} (trainer.total_training_steps); {epoch_text}, trainer.total_epochs={epochs}"
    total = per_epoch * epochs if per_epoch is not None else "?"
    return f"{total} (trainer.total_epochs={epochs} x {epoch_text})"
