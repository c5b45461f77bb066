"""Read and validate the fast DAPO settings in the driver, before Ray starts: a bad key or combination fails in
seconds with a message naming it, not minutes later inside a worker.

Every default lives in config/fast_dapo.yaml only, documented there: a key a config leaves out takes the YAML's
value, read here (`yaml_default`). The settings classes have no defaults of their own, and their fields are the
keys a block may hold: an unknown key fails naming it, and a key missing from both the config and the YAML fails
naming it too, never falling back on a second value in code.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path

from omegaconf import DictConfig, OmegaConf, open_dict

from verl_ext.config.errors import ConfigError
from verl_ext.curriculum.memory import MemorySettings
from verl_ext.metrics_log.plot import check_plot_settings
from verl_ext.trainer.fidelity import TrainerFidelity, check_fidelity

FAST_DAPO_YAML = Path(__file__).parent / "config" / "fast_dapo.yaml"
_YAML = OmegaConf.to_container(OmegaConf.load(FAST_DAPO_YAML), resolve=False)  # interpolations kept as written
MODES = ("fast", "dapo")
__all__ = [
    "FAST_DAPO_YAML",
    "AutoGenBatch",
    "ConfigError",
    "CurriculumSettings",
    "curriculum_settings",
    "prepare_config",
    "yaml_default",
]
_ABSENT = object()


@dataclass(frozen=True)
class AutoGenBatch:
    """curriculum.auto_gen_batch: screen per call what keeps the next batch's prompts
    (verl_ext/curriculum/screen_size.py); data.gen_batch_size is then the most a call screens. Values and their
    reasons: fast_dapo.yaml."""

    enable: bool
    confidence: float  # probability that a call keeps enough; a shortfall costs a whole extra call
    window: int  # screening calls pooled for the keep-rate estimate

    def __post_init__(self):
        if not isinstance(self.enable, bool):
            raise ConfigError(f"curriculum.auto_gen_batch.enable must be true or false, got {self.enable!r}")
        c = self.confidence
        if isinstance(c, bool) or not isinstance(c, int | float) or not 0 < c < 1:
            raise ConfigError(f"curriculum.auto_gen_batch.confidence must be in (0, 1), got {c!r}")
        if isinstance(self.window, bool) or not isinstance(self.window, int) or self.window < 1:
            raise ConfigError(f"curriculum.auto_gen_batch.window must be an int >= 1, got {self.window!r}")


def _read_from(key: str):
    """A CurriculumSettings field read from `key` of verl's config, outside the `curriculum` block."""
    return field(metadata={"key": key})


@dataclass(frozen=True)
class CurriculumSettings:
    """The `curriculum` block of fast_dapo.yaml, one field per key (the keys the block may hold; `n_continue` is
    written as actor_rollout_ref.rollout.n_continue and moved here by `prepare_config`), and the sizes the curriculum
    works with, read from the verl keys their metadata names. Validated on construction."""

    enable: bool  # false: plain sampling (N responses per prompt, no filter)
    mode: str  # "fast" | "dapo"; "plain" when enable is false
    filter_metric: str
    max_num_gen_batches: int  # 0 = no limit
    max_screen_staleness: int | None  # None = never re-screen
    memory: MemorySettings  # curriculum.memory (pass-rate memory)
    auto_gen_batch: AutoGenBatch  # curriculum.auto_gen_batch (screen just enough per call)
    n_continue: int  # N - n
    n: int = _read_from("actor_rollout_ref.rollout.n")  # screening responses per fresh prompt (fast)
    train_batch_size: int = _read_from("data.train_batch_size")  # groups per training step
    gen_batch_size: int = _read_from("data.gen_batch_size")  # fresh prompts drawn per generation call

    @property
    def N(self) -> int:
        return self.n + self.n_continue

    def __post_init__(self):
        if self.n < 1 or self.n_continue < 0:
            raise ConfigError(
                "need actor_rollout_ref.rollout.n >= 1 and n_continue >= 0, "
                f"got n={self.n}, n_continue={self.n_continue}"
            )
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
        k = self.max_screen_staleness
        if k is not None and (isinstance(k, bool) or not isinstance(k, int) or k < 0):
            raise ConfigError(
                f"curriculum.max_screen_staleness must be null (never re-screen) or an int >= 0, got {k!r}"
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
        if self.max_num_gen_batches < 0:
            raise ConfigError("curriculum.max_num_gen_batches must be >= 0 (0 = no limit)")
        if not self.filter_metric:
            raise ConfigError("curriculum.filter_metric must name a reward key (acc, score, ...)")


# The keys the `curriculum` block may hold: CurriculumSettings' fields not read from elsewhere.
CURRICULUM_KEYS = frozenset(f.name for f in fields(CurriculumSettings) if "key" not in f.metadata)


class _Block:
    """The run's config block at `key` (a dotted path) with fast_dapo.yaml's value for each key it leaves out:
    `block[name]` is the run's value, else the YAML's (ConfigError naming the key when neither has one). With
    `allowed`, a key of the run's block not in it is a ConfigError (`unknown_message`, formatted with the sorted
    unknown keys)."""

    def __init__(self, cfg: DictConfig, key: str, allowed: frozenset | None = None, unknown_message: str = ""):
        node = OmegaConf.select(cfg, key, default=None)
        self.cfg, self.key = cfg, key
        self.run = OmegaConf.to_container(node, resolve=True) if isinstance(node, DictConfig) else dict(node or {})
        unknown = set(self.run) - allowed if allowed is not None else set()
        if unknown:
            raise ConfigError(unknown_message.format(sorted(unknown)))

    def __contains__(self, name: str) -> bool:
        return name in self.run

    def __getitem__(self, name: str):
        return self.run[name] if name in self.run else yaml_default(f"{self.key}.{name}", self.cfg)


def yaml_default(key: str, cfg: DictConfig | None = None):
    """fast_dapo.yaml's value at the dotted `key` (a block as a plain dict), its interpolations resolved against the
    run's config `cfg` (against the YAML itself without one). ConfigError naming the key when the YAML has none."""
    value = _YAML
    for part in key.split("."):
        if not isinstance(value, dict) or part not in value:
            raise ConfigError(
                f"{key} is not set, and {FAST_DAPO_YAML.name} has no default for it (the recipe's defaults live "
                f"there only): set {key} or restore it in recipe/fast_dapo/config/fast_dapo.yaml"
            )
        value = value[part]
    root = cfg if cfg is not None else OmegaConf.create(_YAML)
    return OmegaConf.to_container(OmegaConf.create({"v": value}, parent=root), resolve=True)["v"]


def _setting(cfg: DictConfig, key: str):
    """The run's value at `key`, or fast_dapo.yaml's when the config does not have the key."""
    value = OmegaConf.select(cfg, key, default=_ABSENT)
    return yaml_default(key, cfg) if value is _ABSENT else value


def curriculum_on(cfg: DictConfig) -> bool:
    """`curriculum.enable` (fast_dapo.yaml's value when left out; false is plain sampling, one generation call per
    step)."""
    return bool(_Block(cfg, "curriculum")["enable"])


# What the fast DAPO trainer changes of verl's step (verl_ext/trainer/fidelity.py): the curriculum's several
# generation calls per step.
FIDELITY = TrainerFidelity("fast DAPO's curriculum", several_generation_calls=curriculum_on)


def curriculum_settings(cfg: DictConfig) -> CurriculumSettings:
    """Validated settings from a resolved run config (the driver's, after `prepare_config`; the trainer reads them
    again from the same config); ConfigError names the offending key."""
    cur = _Block(
        cfg, "curriculum", CURRICULUM_KEYS, "unknown curriculum keys {}; see recipe/fast_dapo/config/fast_dapo.yaml"
    )
    enable, mode = cur["enable"], cur["mode"]
    if not isinstance(enable, bool):
        raise ConfigError(f"curriculum.enable must be true or false, got {enable!r}")
    if enable and mode not in MODES:
        raise ConfigError(f"curriculum.mode={mode!r}: choose one of {MODES} (or curriculum.enable=false for plain)")
    # written as actor_rollout_ref.rollout.n_continue (its default is there); prepare_config moves it to curriculum
    n_continue = cur["n_continue"] if "n_continue" in cur else _setting(cfg, "actor_rollout_ref.rollout.n_continue")
    train_batch_size = int(_setting(cfg, "data.train_batch_size"))
    gen_batch_size = _setting(cfg, "data.gen_batch_size")  # null: train_batch_size (verl's meaning of null)
    return CurriculumSettings(
        enable=enable,
        mode=mode if enable else "plain",
        filter_metric=str(cur["filter_metric"]),
        max_num_gen_batches=int(cur["max_num_gen_batches"]),
        max_screen_staleness=cur["max_screen_staleness"],
        memory=_memory_settings(cfg),
        auto_gen_batch=_auto_gen_batch(cfg),
        n_continue=int(n_continue),
        n=int(_setting(cfg, "actor_rollout_ref.rollout.n")),
        train_batch_size=train_batch_size,
        gen_batch_size=train_batch_size if gen_batch_size is None else int(gen_batch_size),
    )


def _auto_gen_batch(cfg: DictConfig) -> AutoGenBatch:
    names = [f.name for f in fields(AutoGenBatch)]
    key = "curriculum.auto_gen_batch"
    block = _Block(cfg, key, frozenset(names), f"unknown {key} keys {{}}: {', '.join(names)}")
    return AutoGenBatch(**{name: block[name] for name in names})


def _memory_settings(cfg: DictConfig) -> MemorySettings:
    names = [f.name for f in fields(MemorySettings)]
    key = "curriculum.memory"
    block = _Block(cfg, key, frozenset(names), f"{key}: unknown {key} keys {{}}; known: {sorted(names)}")
    try:
        return MemorySettings(**{name: block[name] for name in names})
    except ValueError as e:
        raise ConfigError(f"{key}: {e}") from e


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
    with open_dict(cfg):
        run = OmegaConf.select(cfg, "curriculum", default=None)
        cfg.curriculum = OmegaConf.merge(yaml_default("curriculum", cfg), run if run is not None else {})
        if "n_continue" not in cfg.curriculum:
            cfg.curriculum.n_continue = yaml_default("actor_rollout_ref.rollout.n_continue", cfg)
        if OmegaConf.select(cfg, "data.gen_batch_size", default=_ABSENT) is _ABSENT:
            cfg.data.gen_batch_size = yaml_default("data.gen_batch_size", cfg)


def _check_run(cfg: DictConfig, s: CurriculumSettings) -> None:
    """The rest of the run config as fast DAPO needs it: verl's legacy trainer, agent-loop workers, the plot
    settings, micro-batches and verl's batch checks with N responses per prompt, the advantage settings, the
    fidelity table's checks and the agent block."""
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
