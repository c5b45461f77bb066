"""Read and validate the fast DAPO settings in the driver, before Ray starts: a bad key or combination fails in
seconds with a message naming it, not minutes later inside a worker."""

from __future__ import annotations

from dataclasses import dataclass

from omegaconf import DictConfig, OmegaConf, open_dict

from verl_ext.config.errors import ConfigError
from verl_ext.curriculum.memory import MemorySettings
from verl_ext.metrics_log.plot import check_plot_settings
from verl_ext.trainer.fidelity import TrainerFidelity, check_fidelity

MODES = ("fast", "dapo")
__all__ = ["ConfigError", "CurriculumSettings", "curriculum_settings", "prepare_config"]


@dataclass(frozen=True)
class AutoGenBatch:
    """curriculum.auto_gen_batch: screen per call what keeps the next batch's prompts
    (verl_ext/curriculum/screen_size.py); data.gen_batch_size is then the most a call screens."""

    enable: bool = False
    confidence: float = 0.8  # probability that a call keeps enough; a shortfall costs a whole extra call
    window: int = 4  # screening calls pooled for the keep-rate estimate


@dataclass(frozen=True)
class CurriculumSettings:
    mode: str  # "fast" | "dapo" | "plain" (curriculum.enable=false)
    n: int  # screening responses per fresh prompt (fast); dapo/plain generate N at once
    n_continue: int  # N - n
    train_batch_size: int  # groups per training step
    gen_batch_size: int  # fresh prompts drawn per generation call
    filter_metric: str
    max_num_gen_batches: int
    memory: MemorySettings  # curriculum.memory (pass-rate memory; off by default)
    auto_gen_batch: AutoGenBatch  # curriculum.auto_gen_batch (screen just enough per call; off by default)

    @property
    def N(self) -> int:
        return self.n + self.n_continue


def curriculum_on(cfg: DictConfig) -> bool:
    """`curriculum.enable` (on when left out; false is plain sampling, one generation call per step)."""
    return bool((cfg.get("curriculum") or {}).get("enable", True))


# What the fast DAPO trainer changes of verl's step (verl_ext/trainer/fidelity.py): the curriculum's several
# generation calls per step.
FIDELITY = TrainerFidelity("fast DAPO's curriculum", several_generation_calls=curriculum_on)


def curriculum_settings(cfg: DictConfig) -> CurriculumSettings:
    cur = cfg.get("curriculum") or {}
    rollout = cfg.actor_rollout_ref.rollout
    n_continue = cur.get("n_continue", rollout.get("n_continue", 0))
    gen_batch_size = cfg.data.get("gen_batch_size")
    return CurriculumSettings(
        mode=cur.get("mode", "fast") if curriculum_on(cfg) else "plain",
        n=int(rollout.n),
        n_continue=int(n_continue),
        train_batch_size=int(cfg.data.train_batch_size),
        gen_batch_size=int(cfg.data.train_batch_size if gen_batch_size is None else gen_batch_size),
        filter_metric=str(cur.get("filter_metric", "acc")),
        max_num_gen_batches=int(cur.get("max_num_gen_batches", 0)),
        memory=_memory_settings(cur.get("memory")),
        auto_gen_batch=_auto_gen_batch(cur.get("auto_gen_batch")),
    )


def _auto_gen_batch(node) -> AutoGenBatch:
    plain = OmegaConf.to_container(node, resolve=True) if isinstance(node, DictConfig) else dict(node or {})
    unknown = set(plain) - {"enable", "confidence", "window"}
    if unknown:
        raise ConfigError(f"unknown curriculum.auto_gen_batch keys {sorted(unknown)}: enable, confidence, window")
    s = AutoGenBatch(**plain)
    if not isinstance(s.enable, bool):
        raise ConfigError(f"curriculum.auto_gen_batch.enable must be true or false, got {s.enable!r}")
    if isinstance(s.confidence, bool) or not isinstance(s.confidence, int | float) or not 0 < s.confidence < 1:
        raise ConfigError(f"curriculum.auto_gen_batch.confidence must be in (0, 1), got {s.confidence!r}")
    if isinstance(s.window, bool) or not isinstance(s.window, int) or s.window < 1:
        raise ConfigError(f"curriculum.auto_gen_batch.window must be an int >= 1, got {s.window!r}")
    return s


def _memory_settings(node) -> MemorySettings:
    plain = OmegaConf.to_container(node, resolve=True) if isinstance(node, DictConfig) else node
    try:
        return MemorySettings.from_mapping(plain)
    except ValueError as e:
        raise ConfigError(f"curriculum.memory: {e}") from e


def prepare_config(cfg: DictConfig) -> CurriculumSettings:
    """Normalise in place and validate. verl's RolloutConfig dataclass rejects unknown fields, so the user-facing
    `actor_rollout_ref.rollout.n_continue` moves to `curriculum.n_continue` before any worker sees the config."""
    OmegaConf.resolve(cfg)
    with open_dict(cfg):
        rollout = cfg.actor_rollout_ref.rollout
        if "n_continue" in rollout:
            cfg.curriculum.n_continue = rollout.pop("n_continue")
    s = curriculum_settings(cfg)
    cur = cfg.curriculum
    unknown = set(cur.keys()) - {
        "enable",
        "mode",
        "n_continue",
        "filter_metric",
        "max_num_gen_batches",
        "memory",
        "max_screen_staleness",
        "auto_gen_batch",
    }
    if unknown:
        raise ConfigError(f"unknown curriculum keys {sorted(unknown)}; see recipe/fast_dapo/config/fast_dapo.yaml")
    if not isinstance(cur.get("enable", True), bool):
        raise ConfigError(f"curriculum.enable must be true or false, got {cur.enable!r}")
    if curriculum_on(cfg) and s.mode not in MODES:
        raise ConfigError(f"curriculum.mode={s.mode!r}: choose one of {MODES} (or curriculum.enable=false for plain)")
    if s.n < 1 or s.n_continue < 0:
        raise ConfigError(
            f"need actor_rollout_ref.rollout.n >= 1 and n_continue >= 0, got n={s.n}, n_continue={s.n_continue}"
        )
    if s.mode == "fast" and s.n < 2:
        raise ConfigError(
            "curriculum.mode=fast screens with n responses and keeps prompts whose filter metric varies: n must be >= 2"
        )
    if s.mode == "dapo" and s.N < 2:
        raise ConfigError("curriculum.mode=dapo drops uniform groups: N = n + n_continue must be >= 2")
    if s.gen_batch_size < 1 or s.train_batch_size < 1:
        raise ConfigError(
            f"data.gen_batch_size and data.train_batch_size must be >= 1, got {s.gen_batch_size}, {s.train_batch_size}"
        )
    k = cur.get("max_screen_staleness", None)
    if k is not None and (isinstance(k, bool) or not isinstance(k, int) or k < 0):
        raise ConfigError(f"curriculum.max_screen_staleness must be null (never re-screen) or an int >= 0, got {k!r}")
    if s.memory.enable and s.mode == "plain":
        raise ConfigError(
            "curriculum.memory.enable=true needs curriculum.enable=true (mode fast or dapo): plain "
            "sampling trains on every group, there is nothing to skip"
        )
    if s.auto_gen_batch.enable and s.mode == "plain":
        raise ConfigError(
            "curriculum.auto_gen_batch.enable=true needs curriculum.enable=true (mode fast or dapo): plain sampling "
            "generates for data.train_batch_size prompts a step, there is no screening to size"
        )
    if s.max_num_gen_batches < 0:
        raise ConfigError("curriculum.max_num_gen_batches must be >= 0 (0 = no limit)")
    if not s.filter_metric:
        raise ConfigError("curriculum.filter_metric must name a reward key (acc, score, ...)")
    if cfg.trainer.get("use_v1", False):
        raise ConfigError("fast DAPO runs on verl's legacy trainer: set trainer.use_v1=false")
    if int(cfg.actor_rollout_ref.rollout.agent.num_workers) < 1:
        raise ConfigError("actor_rollout_ref.rollout.agent.num_workers must be >= 1")
    try:
        check_plot_settings(cfg.trainer.get("plot_keys"), cfg.trainer.get("jsonl_metrics_path"))
    except (ValueError, ImportError) as e:
        raise ConfigError(str(e)) from e
    _micro_batch_checks(cfg, s)
    _verl_checks(cfg, s)
    from verl_ext.advantage.config import validate_algorithm_config

    validate_algorithm_config(cfg.algorithm)
    check_fidelity(cfg, FIDELITY)
    from verl_ext.agent.settings import check_config as check_agent_config

    check_agent_config(cfg)  # the external_agent block, when the agent loop is selected (or the block is set)
    return s


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
