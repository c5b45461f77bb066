"""Read and validate the fast DAPO settings in the driver, before Ray starts: a bad key or combination fails in
seconds with a message naming it, not minutes later inside a worker.

Every default lives in config/fast_dapo.yaml only, documented there: the settings classes below have no defaults of
their own and are read with the project's one mechanism (`verl_ext/config/settings.py`), which takes a key a config
leaves out from the YAML (`DEFAULTS`), refuses a key the block may not hold, and names a key missing from both.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from omegaconf import DictConfig, OmegaConf, open_dict

from verl_ext.config.errors import ConfigError
from verl_ext.config.fields import setting
from verl_ext.config.settings import YamlDefaults, as_dict, block_keys, read_from, read_settings, set_fields
from verl_ext.curriculum.memory import MemorySettings
from verl_ext.trainer.fidelity import TrainerFidelity
from verl_ext.trainer.recipe_checks import check_recipe_run

FAST_DAPO_YAML = Path(__file__).parent / "config" / "fast_dapo.yaml"
DEFAULTS = YamlDefaults(FAST_DAPO_YAML)
MODES = ("fast", "dapo")
__all__ = [
    "DEFAULTS",
    "FAST_DAPO_YAML",
    "AutoGenBatch",
    "ConfigError",
    "CurriculumSettings",
    "curriculum_settings",
    "prepare_config",
]


@dataclass(frozen=True)
class AutoGenBatch:
    """curriculum.auto_gen_batch: screen per call what keeps the next batch's prompts
    (verl_ext/curriculum/screen_size.py); data.gen_batch_size is then the most a call screens. Values and their
    reasons: fast_dapo.yaml."""

    enable: bool = setting(help="screen just enough prompts per call from the measured keep rate")
    confidence: float = setting(gt=0.0, lt=1.0, help="probability that a call keeps enough prompts")
    window: int = setting(ge=1, help="screening calls pooled for the keep-rate estimate")


@dataclass(frozen=True)
class CurriculumSettings:
    """The `curriculum` block of fast_dapo.yaml, one field per key (the keys the block may hold; `n_continue` is
    written as actor_rollout_ref.rollout.n_continue and moved here by `prepare_config`), and the sizes the curriculum
    works with, read from the verl keys their `read_from` names. Validated on construction; `mode` is "plain" when
    `enable` is false."""

    enable: bool = setting(help="false: plain sampling (N responses per prompt, no filter)")
    mode: Literal[MODES] = setting(help="fast (screen n, continue N - n) or dapo (N, drop uniform groups)")
    filter_metric: str = setting(help="the reward's per-response metric whose variation keeps a group")
    max_num_gen_batches: int = setting(ge=0, help="generation calls per step at most; 0 = no limit")
    max_screen_staleness: int | None = setting(ge=0, help="steps a kept screening may wait; null = never re-screen")
    memory: MemorySettings  # curriculum.memory (pass-rate memory)
    auto_gen_batch: AutoGenBatch  # curriculum.auto_gen_batch (screen just enough per call)
    n_continue: int = setting(ge=0, help="N - n: responses added to a kept prompt")
    n: int = read_from("actor_rollout_ref.rollout.n", help="screening responses per fresh prompt (fast)")
    train_batch_size: int = read_from("data.train_batch_size", help="groups per training step")
    gen_batch_size: int | None = read_from("data.gen_batch_size", help="fresh prompts drawn per call; null: a batch")

    @property
    def N(self) -> int:
        return self.n + self.n_continue

    def __post_init__(self):
        set_fields(
            self,
            mode=self.mode if self.enable else "plain",
            # null: train_batch_size (verl's meaning of null)
            gen_batch_size=self.train_batch_size if self.gen_batch_size is None else self.gen_batch_size,
        )
        self._check()

    def _check(self) -> None:
        if self.n < 1:
            raise ConfigError(f"need actor_rollout_ref.rollout.n >= 1, got n={self.n}")
        if self.mode == "fast" and self.n < 2:
            raise ConfigError(
                "curriculum.mode=fast screens with n responses and keeps prompts whose filter metric varies: "
                "n must be >= 2"
            )
        if self.mode == "dapo" and self.N < 2:
            raise ConfigError("curriculum.mode=dapo drops uniform groups: N = n + n_continue must be >= 2")
        if self.gen_batch_size < 1 or self.train_batch_size < 1:
            raise ConfigError(
                "data.gen_batch_size and data.train_batch_size must be >= 1, "
                f"got {self.gen_batch_size}, {self.train_batch_size}"
            )
        if self.memory.enable and self.mode == "plain":
            raise ConfigError(
                "curriculum.memory.enable=true needs curriculum.enable=true (mode fast or dapo): plain "
                "sampling trains on every group, there is nothing to skip"
            )
        if self.auto_gen_batch.enable and self.mode == "plain":
            raise ConfigError(
                "curriculum.auto_gen_batch.enable=true needs curriculum.enable=true (mode fast or dapo): plain "
                "sampling generates for data.train_batch_size prompts a step, there is no screening to size"
            )
        if not self.filter_metric:
            raise ConfigError("curriculum.filter_metric must name a reward key (acc, score, ...)")


# The keys the `curriculum` block may hold: CurriculumSettings' fields not read from elsewhere.
CURRICULUM_KEYS = frozenset(block_keys(CurriculumSettings))


def curriculum_on(cfg: DictConfig) -> bool:
    """`curriculum.enable` (fast_dapo.yaml's value when left out; false is plain sampling, one generation call per
    step)."""
    return bool(DEFAULTS.setting(cfg, "curriculum.enable"))


# What the fast DAPO trainer changes of verl's step (verl_ext/trainer/fidelity.py): the curriculum's several
# generation calls per step.
FIDELITY = TrainerFidelity("fast DAPO's curriculum", several_generation_calls=curriculum_on)


def curriculum_settings(cfg: DictConfig) -> CurriculumSettings:
    """Validated settings from a resolved run config (the driver's, after `prepare_config`; the trainer reads them
    again from the same config); ConfigError names the offending key."""
    block = as_dict(OmegaConf.select(cfg, "curriculum"), "curriculum")
    if "n_continue" not in block:  # written as actor_rollout_ref.rollout.n_continue (its default is there)
        block["n_continue"] = DEFAULTS.setting(cfg, "actor_rollout_ref.rollout.n_continue")
    return read_settings(CurriculumSettings, block, "curriculum", defaults=DEFAULTS, cfg=cfg)


def prepare_config(cfg: DictConfig) -> CurriculumSettings:
    """Normalise in place and validate; returns the curriculum settings. verl's RolloutConfig dataclass rejects
    unknown fields, so the user-facing `actor_rollout_ref.rollout.n_continue` moves to `curriculum.n_continue` before
    any worker sees the config."""
    OmegaConf.resolve(cfg)
    _move_n_continue(cfg)
    _write_left_out_keys(cfg)
    s = curriculum_settings(cfg)
    _check_run(cfg, s)
    return s


def _move_n_continue(cfg: DictConfig) -> None:
    with open_dict(cfg):
        rollout = cfg.actor_rollout_ref.rollout
        if "n_continue" in rollout:  # (a config without a curriculum block gets one holding just n_continue)
            OmegaConf.update(cfg, "curriculum.n_continue", rollout.pop("n_continue"), force_add=True)


def _write_left_out_keys(cfg: DictConfig) -> None:
    """Write fast_dapo.yaml's value into the config for each of the recipe's keys it leaves out, so whatever reads
    the config after the driver (the trainer, the pass-rate probe, the workers) finds the whole curriculum block and
    needs no default of its own. Unknown keys stay, for curriculum_settings to name."""
    DEFAULTS.fill(cfg, "curriculum", "data.gen_batch_size")
    if "n_continue" not in cfg.curriculum:
        with open_dict(cfg):
            cfg.curriculum.n_continue = DEFAULTS.value("actor_rollout_ref.rollout.n_continue", cfg)


def _check_run(cfg: DictConfig, s: CurriculumSettings) -> None:
    """The rest of the run config as fast DAPO needs it: what every recipe checks (`check_recipe_run`: verl's legacy
    trainer, the plot settings, the fidelity table, the agent block), agent-loop workers, micro-batches and verl's
    batch checks with N responses per prompt, and the advantage settings."""
    check_recipe_run(cfg, "fast DAPO", FIDELITY)
    if int(cfg.actor_rollout_ref.rollout.agent.num_workers) < 1:
        raise ConfigError("actor_rollout_ref.rollout.agent.num_workers must be >= 1")
    _micro_batch_checks(cfg, s)
    _verl_checks(cfg, s)
    from verl_ext.advantage.config import validate_algorithm_config

    validate_algorithm_config(cfg.algorithm)


def _micro_batch_checks(cfg: DictConfig, s: CurriculumSettings) -> None:
    """verl's engine splits each training batch (train_batch_size x N rows) into micro-batches and asserts, deep in a
    worker, that they divide it evenly; check that here."""
    arr = cfg.actor_rollout_ref
    rows = s.train_batch_size * s.N
    for name, sub in (("actor_rollout_ref.rollout", arr.rollout), ("actor_rollout_ref.ref", arr.ref)):
        micro = sub.get("log_prob_micro_batch_size_per_gpu")
        if not sub.get("log_prob_use_dynamic_bsz", False) and micro and rows % int(micro):
            raise ConfigError(
                f"{name}.log_prob_micro_batch_size_per_gpu={micro} must divide the training batch of "
                f"train_batch_size x N = {s.train_batch_size} x {s.N} = {rows} rows"
            )
    actor = arr.actor
    mini_rows = int(actor.ppo_mini_batch_size) * s.N
    micro = actor.get("ppo_micro_batch_size_per_gpu")
    if not actor.get("use_dynamic_bsz", False) and micro and mini_rows % int(micro):
        raise ConfigError(
            f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={micro} must divide a mini-batch of "
            f"ppo_mini_batch_size x N = {actor.ppo_mini_batch_size} x {s.N} = {mini_rows} rows"
        )


def _verl_checks(cfg: DictConfig, s: CurriculumSettings) -> None:
    """verl's own batch-size checks with N responses per prompt (a training batch holds N, not n)."""
    from verl_ext.config.preflight import check_verl_batches

    check_verl_batches(cfg, s.N)
