"""Read and validate the Composer settings in the driver, before Ray starts (and again in the trainer).

The channel weights: `algorithm.alpha_sdpo` (read by the `grpo_composer` estimator) and `composer.beta_replay`.
Everything else of the recipe is under `composer` (see config/composer.yaml for meanings and recommended values).
Every default lives in composer.yaml only: the blocks are read with the project's one mechanism
(`verl_ext/config/settings.py`), which takes a key a config leaves out from the YAML (`DEFAULTS`) and refuses a key
a block may not hold; the driver's `prepare_config` writes those values into the run's config.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from omegaconf import DictConfig, OmegaConf

from verl_ext.composer.disagreement import RULES
from verl_ext.composer.hints import DEFAULT_HINT_TEMPLATES
from verl_ext.composer.teacher_pool import TeacherPoolConfig
from verl_ext.composer.tool_errors import ToolErrorRule, check_templates
from verl_ext.config.errors import ConfigError
from verl_ext.config.fields import setting
from verl_ext.config.settings import YamlDefaults, read_settings, set_fields
from verl_ext.trainer.fidelity import TrainerFidelity
from verl_ext.trainer.recipe_checks import check_recipe_run

COMPOSER_YAML = Path(__file__).parent / "config" / "composer.yaml"
DEFAULTS = YamlDefaults(COMPOSER_YAML)
HINT_MODES = ("turn", "append")
SDPO_FORMS = ("full_logit", "sampled_token")
SDPO_SITES = ("response", "answer")
__all__ = ["DEFAULTS", "ConfigError", "ComposerSettings", "composer_settings", "prepare_config"]


# The blocks' fields declare their types, choices and bounds (enforced by read_settings); their defaults and the
# full account of each key live in composer.yaml only.
@dataclass(frozen=True)
class SdpoBlock:
    """composer.sdpo, checked whether or not the channel is on."""

    hint_mode: Literal[HINT_MODES] = setting(help="where the hint goes in the teacher's context")
    sibling_solution: bool = setting(help="a successful sibling's response as the hint when one exists")
    form: Literal[SDPO_FORMS] = setting(help="the JSD on the logits in the actor loss, or the sampled-token advantage")
    sites: Literal[SDPO_SITES] = setting(help="the failed turn's tokens that carry the term: all, or the answer's")
    teacher_topk: int | None = setting(ge=1, help="teacher log-probs kept per site token; null = the whole vocabulary")
    jsd_beta: float = setting(ge=0.0, le=1.0, help="generalized JSD beta: 0 forward KL, 1 reverse KL")
    token_clip: float | None = setting(gt=0.0, help="upper clip of each per-vocabulary JSD summand; null = off")
    tool_error_rules: list | None = setting(help="rules that turn a failed tool result into an error site")

    def __post_init__(self):
        # null top-k is the whole vocabulary, which the trainer reads as 0
        set_fields(
            self,
            teacher_topk=self.teacher_topk or 0,
            tool_error_rules=read_tool_error_rules(self.tool_error_rules),
        )


def read_tool_error_rules(written) -> tuple[ToolErrorRule, ...]:
    """composer.sdpo.tool_error_rules read (a list of rules, null = none), each with ToolErrorRule's keys, and their
    hint templates checked; ConfigError naming the rule."""
    where = "composer.sdpo.tool_error_rules"
    if written is None:
        return ()
    if isinstance(written, (str, bytes)) or not isinstance(written, (list, tuple)):
        raise ConfigError(f"{where} must be a list of rules, got {written!r}")
    rules = tuple(
        rule if isinstance(rule, ToolErrorRule) else read_settings(ToolErrorRule, rule, f"{where}[{i}]")
        for i, rule in enumerate(written)
    )
    try:
        check_templates(rules, DEFAULT_HINT_TEMPLATES)
    except ValueError as e:
        raise ConfigError(f"{where}{e}") from None
    return rules


@dataclass(frozen=True)
class ReplayBlock:
    """composer.replay; `teacher_pool` as written (a TeacherPoolConfig is read from it only when replay is on)."""

    beta_dpo: float = setting(gt=0.0, help="the DPO temperature")
    max_pairs_per_step: int = setting(ge=1, help="pairs trained per step (at most half the extra mini-batch)")
    rule: Literal[RULES] = setting(help="when the teachers' answers make a pair")
    min_agree: int = setting(ge=1, help="teachers that must agree under rule=majority")
    pairs_path: str | None = setting(help="the JSONL of DPO pairs, appended as teacher answers arrive")
    teacher_pool: dict | None = setting(help="the teachers (read when replay is on)")


@dataclass(frozen=True)
class ComposerBlock:
    """The `composer` block: the replay channel's weight and the two channels' settings."""

    beta_replay: float | None = setting(ge=0.0, help="channel 3's weight; 0 or null = off")
    sdpo: SdpoBlock
    replay: ReplayBlock


@dataclass(frozen=True)
class ComposerSettings:
    """A run's Composer: the channel weights, the two channels' blocks as read, and the teacher pool."""

    alpha_sdpo: float
    beta_replay: float
    sdpo: SdpoBlock
    replay: ReplayBlock
    pool: TeacherPoolConfig | None  # None when beta_replay == 0: no teacher is ever called

    @property
    def sdpo_on(self) -> bool:
        return self.alpha_sdpo > 0

    @property
    def replay_on(self) -> bool:
        return self.beta_replay > 0


def channel_weights(cfg: DictConfig) -> tuple[float, float]:
    """(algorithm.alpha_sdpo, composer.beta_replay); a weight the config leaves out takes composer.yaml's value, and
    null is off (0)."""
    alpha = float(DEFAULTS.setting(cfg, "algorithm.alpha_sdpo") or 0.0)
    beta = float(DEFAULTS.setting(cfg, "composer.beta_replay") or 0.0)
    return alpha, beta


def own_actor_loss(cfg: DictConfig) -> bool:
    """The Composer installs its own actor loss (verl_ext/composer/actor_loss.py) when a loss-side channel is on:
    SDPO in its full-logit form, or replay."""
    alpha, beta = channel_weights(cfg)
    return (alpha > 0 and DEFAULTS.setting(cfg, "composer.sdpo.form") == "full_logit") or beta > 0


# What the Composer trainer changes of verl's step (verl_ext/trainer/fidelity.py).
FIDELITY = TrainerFidelity(
    "the Composer",
    several_generation_calls=lambda cfg: True,  # in every setting
    own_actor_loss=own_actor_loss,
    own_actor_loss_when="alpha_sdpo > 0 with form=full_logit, or beta_replay > 0",
    own_advantages=True,  # the grpo_composer estimator, not verl's compute_advantage
    rejects_distillation="the Composer installs its own actor loss (SDPO is the recipe's distillation channel)",
)


def prepare_config(cfg: DictConfig) -> ComposerSettings:
    """The driver's check: resolve the config, write composer.yaml's value for each of the recipe's keys it leaves
    out (so the `grpo_composer` estimator and the workers read the values the settings hold), validate."""
    OmegaConf.resolve(cfg)
    DEFAULTS.fill(cfg, "algorithm.alpha_sdpo", "composer")
    return composer_settings(cfg)


def composer_settings(cfg: DictConfig) -> ComposerSettings:
    """Validated settings from a resolved run config; ConfigError names the offending key."""
    algo = cfg.algorithm
    if algo.adv_estimator != "grpo_composer":
        raise ConfigError(
            f"the composer recipe needs algorithm.adv_estimator=grpo_composer, got {algo.adv_estimator!r}"
        )
    block = read_settings(ComposerBlock, cfg.get("composer"), "composer", defaults=DEFAULTS, cfg=cfg)
    alpha, beta = channel_weights(cfg)
    if alpha < 0 or beta < 0:
        raise ConfigError(f"algorithm.alpha_sdpo and composer.beta_replay must be >= 0, got {alpha}, {beta}")
    sdpo, replay = block.sdpo, block.replay
    if alpha > 0 and sdpo.form == "full_logit":
        _check_full_logit_engine(cfg)
    _check_max_pairs(cfg, replay, beta)
    pool = _teacher_pool(cfg, replay) if beta > 0 else None
    check_recipe_run(cfg, "the composer recipe", FIDELITY)
    return ComposerSettings(alpha_sdpo=alpha, beta_replay=beta, sdpo=sdpo, replay=replay, pool=pool)


def _check_max_pairs(cfg: DictConfig, replay: ReplayBlock, beta: float) -> None:
    """composer.replay.max_pairs_per_step against the extra actor mini-batch the pairs fill (checked whether or not
    the channel is on)."""
    max_pairs = replay.max_pairs_per_step
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


def _teacher_pool(cfg: DictConfig, replay: ReplayBlock) -> TeacherPoolConfig:
    """What replay needs when it is on: the pairs file, a valid teacher pool (returned; a key it leaves out takes
    composer.yaml's value, resolved against the run's config: the cache goes in the run's directory), verl's
    reference model and the update order of _check_replay_update_order."""
    if not replay.pairs_path:
        raise ConfigError("composer.beta_replay > 0 needs composer.replay.pairs_path (the DPO pairs JSONL)")
    where = "composer.replay.teacher_pool"
    pool = read_settings(TeacherPoolConfig, replay.teacher_pool, where, defaults=DEFAULTS, cfg=cfg)
    from verl.trainer.ppo.utils import need_reference_policy

    if not need_reference_policy(cfg):
        raise ConfigError(
            "composer.beta_replay > 0 needs verl's reference model for the DPO reference log-probs: set "
            "actor_rollout_ref.actor.use_kl_loss=true (kl_loss_coef may be 0.0) or algorithm.use_kl_in_reward=true"
        )
    _check_replay_update_order(cfg)
    return pool


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
