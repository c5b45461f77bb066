"""Read and validate the Composer settings in the driver, before Ray starts (and again in the trainer).

The channel weights: `algorithm.alpha_sdpo` (read by the `grpo_composer` estimator) and `composer.beta_replay`.
Everything else of the recipe is under `composer` (see config/composer.yaml for meanings and recommended values).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from verl_ext.composer.teacher_pool import TeacherPoolConfig
from verl_ext.config.errors import ConfigError
from verl_ext.metrics_log.plot import check_plot_settings
from verl_ext.trainer.fidelity import TrainerFidelity, check_fidelity

COMPOSER_YAML = Path(__file__).parent / "config" / "composer.yaml"
# The recipe's defaults live in composer.yaml only (each documented there); keys a config leaves out take them.
_YAML = OmegaConf.load(COMPOSER_YAML)
_DEFAULT_SDPO = OmegaConf.to_container(_YAML.composer.sdpo)
_DEFAULT_REPLAY = {
    k: v for k, v in OmegaConf.to_container(_YAML.composer.replay).items() if k not in ("pairs_path", "teacher_pool")
}  # these two point at the run's directory
# composer.replay.teacher_pool as written (its cache path is resolved against each run's config: _default_pool)
_DEFAULT_POOL = OmegaConf.to_container(_YAML.composer.replay.teacher_pool, resolve=False)
HINT_MODES = ("turn", "append")
SDPO_FORMS = ("full_logit", "sampled_token")
_TOP_KEYS = {"beta_replay", "sdpo", "replay"}
_SDPO_KEYS = {"hint_mode", "sibling_solution", "form", "teacher_topk", "jsd_beta", "token_clip"}
_REPLAY_KEYS = {"beta_dpo", "max_pairs_per_step", "rule", "min_agree", "pairs_path", "teacher_pool"}
__all__ = ["ConfigError", "ComposerSettings", "composer_settings"]


@dataclass(frozen=True)
class ComposerSettings:
    alpha_sdpo: float
    beta_replay: float
    hint_mode: str
    sibling_solution: bool
    sdpo_form: str
    teacher_topk: int  # <= 0: the whole vocabulary
    jsd_beta: float
    token_clip: float | None
    beta_dpo: float
    max_pairs_per_step: int
    rule: str
    min_agree: int
    pairs_path: str | None
    pool: TeacherPoolConfig | None  # None when beta_replay == 0: no teacher is ever called

    @property
    def sdpo_on(self) -> bool:
        return self.alpha_sdpo > 0

    @property
    def replay_on(self) -> bool:
        return self.beta_replay > 0


def _plain(node) -> dict:
    return OmegaConf.to_container(node, resolve=True) if isinstance(node, DictConfig) else dict(node or {})


def _check_keys(section: dict, allowed: set, where: str) -> None:
    unknown = set(section) - allowed
    if unknown:
        raise ConfigError(
            f"unknown {where} keys {sorted(unknown)}; allowed: {sorted(allowed)} "
            "(see recipe/composer/config/composer.yaml)"
        )


def channel_weights(cfg: DictConfig) -> tuple[float, float]:
    """(algorithm.alpha_sdpo, composer.beta_replay) as the config has them. A weight left out is off (0), not
    composer.yaml's value: a config that names no channel is plain GRPO."""
    alpha = float(cfg.algorithm.get("alpha_sdpo", 0.0) or 0.0)
    beta = float(_plain(cfg.get("composer")).get("beta_replay", 0.0) or 0.0)
    return alpha, beta


def _sdpo_form(cfg: DictConfig) -> str:
    return ({**_DEFAULT_SDPO, **(_plain(cfg.get("composer")).get("sdpo") or {})})["form"]


def own_actor_loss(cfg: DictConfig) -> bool:
    """The Composer installs its own actor loss (verl_ext/composer/actor_loss.py) when a loss-side channel is on:
    SDPO in its full-logit form, or replay."""
    alpha, beta = channel_weights(cfg)
    return (alpha > 0 and _sdpo_form(cfg) == "full_logit") or beta > 0


# What the Composer trainer changes of verl's step (verl_ext/trainer/fidelity.py).
FIDELITY = TrainerFidelity(
    "the Composer",
    several_generation_calls=lambda cfg: True,  # in every setting
    own_actor_loss=own_actor_loss,
    own_actor_loss_when="alpha_sdpo > 0 with form=full_logit, or beta_replay > 0",
    own_advantages=True,  # the grpo_composer estimator, not verl's compute_advantage
    rejects_distillation="the Composer installs its own actor loss (SDPO is the recipe's distillation channel)",
)


def composer_settings(cfg: DictConfig) -> ComposerSettings:
    """Validated settings from a resolved run config; ConfigError names the offending key."""
    algo = cfg.algorithm
    if algo.adv_estimator != "grpo_composer":
        raise ConfigError(
            f"the composer recipe needs algorithm.adv_estimator=grpo_composer, got {algo.adv_estimator!r}"
        )
    sdpo, replay = _sections(cfg)
    alpha, beta = channel_weights(cfg)
    if alpha < 0 or beta < 0:
        raise ConfigError(f"algorithm.alpha_sdpo and composer.beta_replay must be >= 0, got {alpha}, {beta}")
    sdpo_settings = _sdpo_settings(cfg, sdpo, alpha)
    replay_settings = _replay_settings(cfg, replay, beta)
    _check_run(cfg)
    return ComposerSettings(alpha_sdpo=alpha, beta_replay=beta, **sdpo_settings, **replay_settings)


def _sections(cfg: DictConfig) -> tuple[dict, dict]:
    """(composer.sdpo, composer.replay), their keys checked, each with composer.yaml's values where it has none."""
    comp = _plain(cfg.get("composer"))
    _check_keys(comp, _TOP_KEYS, "composer")
    sdpo, replay = comp.get("sdpo") or {}, comp.get("replay") or {}
    _check_keys(sdpo, _SDPO_KEYS, "composer.sdpo")
    _check_keys(replay, _REPLAY_KEYS, "composer.replay")
    return {**_DEFAULT_SDPO, **sdpo}, {**_DEFAULT_REPLAY, **replay}


def _sdpo_settings(cfg: DictConfig, sdpo: dict, alpha: float) -> dict:
    """ComposerSettings' SDPO fields from composer.sdpo (checked whether or not the channel is on)."""
    hint_mode = sdpo["hint_mode"]
    if hint_mode not in HINT_MODES:
        raise ConfigError(f"composer.sdpo.hint_mode must be one of {HINT_MODES}, got {hint_mode!r}")
    form = sdpo["form"]
    if form not in SDPO_FORMS:
        raise ConfigError(f"composer.sdpo.form must be one of {SDPO_FORMS}, got {form!r}")
    topk = sdpo["teacher_topk"]
    topk = 0 if topk is None else int(topk)
    if topk < 0:
        raise ConfigError(f"composer.sdpo.teacher_topk must be >= 1 or null (the whole vocabulary), got {topk}")
    jsd_beta = float(sdpo["jsd_beta"])
    if not 0.0 <= jsd_beta <= 1.0:
        raise ConfigError(f"composer.sdpo.jsd_beta must be in [0, 1], got {jsd_beta}")
    token_clip = sdpo["token_clip"]
    token_clip = None if token_clip is None else float(token_clip)
    if token_clip is not None and not token_clip > 0:
        raise ConfigError(f"composer.sdpo.token_clip must be > 0 or null, got {token_clip}")
    if alpha > 0 and form == "full_logit":
        _check_full_logit_engine(cfg)
    return {
        "hint_mode": hint_mode,
        "sibling_solution": bool(sdpo["sibling_solution"]),
        "sdpo_form": form,
        "teacher_topk": topk,
        "jsd_beta": jsd_beta,
        "token_clip": token_clip,
    }


def _replay_settings(cfg: DictConfig, replay: dict, beta: float) -> dict:
    """ComposerSettings' replay fields from composer.replay (checked whether or not the channel is on); the teacher
    pool only when it is."""
    beta_dpo = float(replay["beta_dpo"])
    if not beta_dpo > 0:
        raise ConfigError(f"composer.replay.beta_dpo must be > 0, got {beta_dpo}")
    max_pairs = int(replay["max_pairs_per_step"])
    rows_per_minibatch = int(cfg.actor_rollout_ref.actor.ppo_mini_batch_size) * int(cfg.actor_rollout_ref.rollout.n)
    if beta > 0 and rows_per_minibatch % 2:
        raise ConfigError(
            f"composer.beta_replay > 0 needs an even ppo_mini_batch_size x n (chosen + rejected rows), "
            f"got {rows_per_minibatch}"
        )
    if not 1 <= max_pairs <= rows_per_minibatch // 2:
        raise ConfigError(
            f"composer.replay.max_pairs_per_step={max_pairs}: must be in [1, {rows_per_minibatch // 2}] (the pairs' "
            "chosen + rejected rows fill one extra actor mini-batch of ppo_mini_batch_size x n = "
            f"{rows_per_minibatch} rows)"
        )
    pool = _teacher_pool(cfg, replay) if beta > 0 else None  # before min_agree's int(): ConfigError names a bad one
    return {
        "beta_dpo": beta_dpo,
        "max_pairs_per_step": max_pairs,
        "rule": str(replay["rule"]),
        "min_agree": int(replay["min_agree"]),
        "pairs_path": replay.get("pairs_path"),
        "pool": pool,
    }


def _teacher_pool(cfg: DictConfig, replay: dict) -> TeacherPoolConfig:
    """What replay needs when it is on: the pairs file, a valid teacher pool (returned), verl's reference model, a
    valid disagreement rule and the update order of _check_replay_update_order."""
    if not replay.get("pairs_path"):
        raise ConfigError("composer.beta_replay > 0 needs composer.replay.pairs_path (the DPO pairs JSONL)")
    pool_raw = replay.get("teacher_pool") or {}
    try:
        pool = TeacherPoolConfig.from_dict({**_default_pool(cfg), **pool_raw})
    except (TypeError, ValueError) as e:
        raise ConfigError(f"composer.replay.teacher_pool: {e}") from e
    from verl.trainer.ppo.utils import need_reference_policy

    if not need_reference_policy(cfg):
        raise ConfigError(
            "composer.beta_replay > 0 needs verl's reference model for the DPO reference log-probs: set "
            "actor_rollout_ref.actor.use_kl_loss=true (kl_loss_coef may be 0.0) or algorithm.use_kl_in_reward=true"
        )
    from verl_ext.composer.disagreement import DisagreementConfig

    try:
        DisagreementConfig(rule=replay["rule"], min_agree=int(replay["min_agree"]))
    except ValueError as e:
        raise ConfigError(f"composer.replay: {e}") from e
    _check_replay_update_order(cfg)
    return pool


def _default_pool(cfg: DictConfig) -> dict:
    """composer.yaml's composer.replay.teacher_pool (the spend caps, the cache, retries, workers: TeacherPoolConfig
    has no defaults of its own), its interpolations resolved against the run's config (the cache goes in the run's
    directory)."""
    try:
        return OmegaConf.to_container(OmegaConf.create(_DEFAULT_POOL, parent=cfg), resolve=True)
    except OmegaConfBaseException as e:
        raise ConfigError(f"composer.replay.teacher_pool: composer.yaml's values need the run's config: {e}") from e


def _check_run(cfg: DictConfig) -> None:
    """The rest of the run config as the Composer needs it: verl's legacy trainer, the fidelity table's checks, the
    agent block and the plot settings."""
    if cfg.trainer.get("use_v1", False):
        raise ConfigError("the composer recipe runs on verl's legacy trainer: set trainer.use_v1=false")
    check_fidelity(cfg, FIDELITY)
    from verl_ext.agent.settings import check_config as check_agent_config

    check_agent_config(cfg)  # the external_agent block, when the agent loop is selected (or the block is set)
    try:
        check_plot_settings(cfg.trainer.get("plot_keys"), cfg.trainer.get("jsonl_metrics_path"))
    except (ValueError, ImportError) as e:
        raise ConfigError(str(e)) from e


def _check_full_logit_engine(cfg: DictConfig) -> None:
    """The full-logit SDPO term runs in the FSDP engine's logits processor (verl_ext/composer/actor_loss.py)."""
    actor = cfg.actor_rollout_ref.actor
    if actor.get("strategy") not in ("fsdp", "fsdp2"):
        raise ConfigError(
            f"composer.sdpo.form=full_logit needs the FSDP actor (strategy fsdp/fsdp2), got "
            f"{actor.get('strategy')!r}; use form=sampled_token"
        )
    if cfg.actor_rollout_ref.model.get("use_fused_kernels", False):
        raise ConfigError(
            "composer.sdpo.form=full_logit needs logits: set actor_rollout_ref.model.use_fused_kernels="
            "false (fused kernels never materialise them) or use form=sampled_token"
        )
    sp = max(
        int(actor.get("ulysses_sequence_parallel_size", 1) or 1),
        int((actor.get("fsdp_config") or {}).get("ulysses_sequence_parallel_size", 1) or 1),
    )
    if sp != 1:
        raise ConfigError(
            "composer.sdpo.form=full_logit does not support Ulysses sequence parallelism: set "
            "actor_rollout_ref.actor.fsdp_config.ulysses_sequence_parallel_size=1 or use form=sampled_token"
        )


def _check_replay_update_order(cfg: DictConfig) -> None:
    """The replay rows' DPO gradient is exact only if they are the first mini-batch each rank trains on, while the
    policy is still the one that scored them (verl_ext/composer/replay.py), and `loss/grpo` leaves that first
    mini-batch out of verl's per-mini-batch pg_loss. verl walks each rank's chunk in order only with
    `actor.shuffle=false`, and a second PPO epoch would train on the replay rows again with a moved policy."""
    actor = cfg.actor_rollout_ref.actor
    if actor.get("shuffle", False):
        raise ConfigError(
            "composer.beta_replay > 0 needs actor_rollout_ref.actor.shuffle=false: the replay rows must "
            "be the first mini-batch of the update on every rank (exact DPO gradient, loss/grpo)"
        )
    if int(actor.get("ppo_epochs", 1)) != 1:
        raise ConfigError(
            f"composer.beta_replay > 0 needs actor_rollout_ref.actor.ppo_epochs=1, got "
            f"{actor.get('ppo_epochs')}: the DPO term is exact only where the pairs were scored, before "
            "the first optimizer step"
        )
