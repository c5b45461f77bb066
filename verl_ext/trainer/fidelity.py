"""Which features of verl 0.9.1's legacy `RayPPOTrainer.fit` the project's trainer base keeps, and which it rejects.

`ExtRayPPOTrainer` (ppo_trainer.py) re-implements verl's `fit` loop so a recipe can change where a step's data comes
from and feed token-level estimators. Nothing of verl's loop may be dropped silently: each feature is either carried
over (by calling verl's own function for it) or rejected in the driver, before Ray starts, by `check_fidelity`, with
a `ConfigError` naming the key. `FEATURES` is that table (docs/FIDELITY.md holds the copy `feature_table_markdown()`
generates, with the tests that show each row, named by the suite); `tests/trainer/test_fidelity.py` checks every
rejection and that a key not in use never trips one.

Supported features are listed too, so the table is the whole side-by-side reading of verl's `fit`.

The checks never ask which recipe runs: each trainer class declares, as its class attribute `fidelity` (a
`TrainerFidelity`), what it changes of verl's step (several generation calls per step, its own actor loss, its own
advantages, its own distillation), and the checks read that. The trainer base declares `BASE_FIDELITY`; a recipe's
trainer declares its own next to its config check, which knows the recipe's keys and where their defaults live.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from omegaconf import DictConfig, OmegaConf

from verl_ext.config.errors import ConfigError
from verl_ext.config.settings import as_dict, get

SUPPORTED, PARTIAL, REJECTED = "supported", "supported, rejected where noted", "rejected"


def _never(cfg: DictConfig) -> bool:
    return False


@dataclass(frozen=True)
class TrainerFidelity:
    """What a trainer class changes of verl's `fit` step, as far as the feature checks need to know."""

    name: str  # how the messages name it ("the Composer")
    # per step, more than one generation call (verl's skip.rollout replays one call per step)
    several_generation_calls: Callable[[DictConfig], bool] = _never
    # its own actor loss replaces verl's policy loss (which rollout-correction bypass mode would switch)
    own_actor_loss: Callable[[DictConfig], bool] = _never
    own_actor_loss_when: str = ""  # the settings that turn it on, for the message
    own_advantages: bool = False  # does not call verl's compute_advantage (where use_pf_ppo is applied)
    rejects_distillation: str | None = None  # why verl's distillation cannot run with it; None: it can


BASE_FIDELITY = TrainerFidelity("the trainer base")


def _project_estimator(cfg: DictConfig) -> bool:
    from verl_ext.advantage.config import ESTIMATORS

    return cfg.algorithm.adv_estimator in ESTIMATORS


def _rollout_corr(cfg: DictConfig) -> dict:
    return as_dict(OmegaConf.select(cfg, "algorithm.rollout_correction"), "algorithm.rollout_correction")


def _rollout_corr_used(cfg: DictConfig) -> bool:
    rc = _rollout_corr(cfg)
    return bool(rc.get("bypass_mode") or rc.get("rollout_is") or rc.get("rollout_rs"))


@dataclass(frozen=True)
class Feature:
    key: str  # the config key (or what the user sets) that turns the feature on
    status: str  # SUPPORTED | PARTIAL (rejected in the combinations `check` names) | REJECTED
    note: str  # how it is supported, or why it is rejected
    # (cfg, the trainer's fidelity) -> None if fine, else the reason it cannot run; only for features rejected in
    # some setting
    check: Callable[[DictConfig, TrainerFidelity], str | None] | None = None


def _remax(cfg, trainer):
    if cfg.algorithm.adv_estimator == "remax":
        return (
            "REMAX needs a greedy baseline rollout per prompt in the same generation call; the trainer base "
            "generates sampled responses only (and fast DAPO's fused calls mix prompts of several phases)"
        )
    return None


def _reward_model(cfg, trainer):
    # verl scores with a reward model in one of two places: a standalone model (its own resource pool) inside the
    # reward loop that streams with the rollout, so `rm_scores` arrive with the generated batch as a reward
    # function's do; a colocated one (no own pool) by a separate `_compute_reward_colocate` call in `fit`.
    if get(cfg, "reward.reward_model.enable", False) and not get(
        cfg, "reward.reward_model.enable_resource_pool", False
    ):
        return (
            "reward.reward_model.enable=true with enable_resource_pool=false (the colocated reward model) is "
            "scored by a separate call in verl's fit that the trainer base does not make (and fast DAPO's "
            "filter reads rewards at generation time); give the reward model its own pool "
            "(reward.reward_model.enable_resource_pool=true) or use a reward function"
        )
    return None


def _skip(cfg, trainer):
    # verl's legacy fit honours skip.rollout only (AgentLoopManager.generate_sequences is wrapped by it, keyed by the
    # step); skip.rollout_tq and skip.async_rollout belong to the v1 and fully-async trainers and would be ignored.
    on = [k for k in ("async_rollout", "rollout_tq") if get(cfg, f"skip.{k}.enable", False)]
    if on:
        return f"skip.{on[0]}.enable belongs to verl's v1 / fully-async trainers; the legacy loop would ignore it"
    if get(cfg, "skip.rollout.enable", False) and trainer.several_generation_calls(cfg):
        return (
            "skip.rollout.enable (verl's rollout dump/replay keyed by step) replays one generation call per step; "
            f"{trainer.name} makes several, so a replay by step would be wrong"
        )
    return None


def _filter_groups(cfg, trainer):
    if get(cfg, "algorithm.filter_groups.enable", False):
        return (
            "algorithm.filter_groups is read by verl-recipe's DAPO trainer, not by verl's fit (it would be "
            "ignored); use recipe/fast_dapo with curriculum.mode=dapo (or fast)"
        )
    return None


def _pf_ppo(cfg, trainer):
    if get(cfg, "algorithm.use_pf_ppo", False) and (trainer.own_advantages or _project_estimator(cfg)):
        return (
            "algorithm.use_pf_ppo is applied inside verl's compute_advantage, which the project's estimators "
            "and the Composer do not call; use one of verl's estimators without it, or drop use_pf_ppo"
        )
    return None


def _distillation(cfg, trainer):
    if trainer.rejects_distillation and get(cfg, "distillation.enabled", False):
        return f"verl's distillation sets its own actor loss flags; {trainer.rejects_distillation}"
    return None


def _rollout_correction(cfg, trainer):
    rc = _rollout_corr(cfg)
    if not _rollout_corr_used(cfg):
        return None
    if not get(cfg, "actor_rollout_ref.rollout.calculate_log_probs", False):
        return (
            "algorithm.rollout_correction needs the rollout's log-probs: set "
            "actor_rollout_ref.rollout.calculate_log_probs=true (verl would skip the correction silently)"
        )
    if rc.get("bypass_mode"):
        if trainer.own_actor_loss(cfg):
            return (
                "algorithm.rollout_correction.bypass_mode switches verl's policy loss to loss_mode=bypass_mode; "
                f"{trainer.name}'s own actor loss ({trainer.own_actor_loss_when}) replaces it. Use decoupled mode "
                "(bypass_mode=false)"
            )
        if _project_estimator(cfg):
            from verl_ext.advantage.config import validate_algorithm_config

            adv = validate_algorithm_config(cfg.algorithm)
            if adv is not None and adv.needs_entropys:
                return (
                    "algorithm.rollout_correction.bypass_mode skips the actor's old-log-prob pass, which is where "
                    f"the per-token entropies come from (uncertainty_kind={adv.uncertainty_kind}); use "
                    "decoupled mode or uncertainty_kind=surprisal"
                )
    return None


def _max_samples(cfg, trainer):
    # verl's RLHFDataset draws the subset with np.random.default_rng(data.seed): with no seed every process (a
    # resumed run, each campaign seed) trains and validates on other prompts, while the checkpoint's dataloader
    # position refers to the first subset.
    if not get(cfg, "data.shuffle", True) or get(cfg, "data.seed") is not None:
        return None
    used = [k for k in ("train_max_samples", "val_max_samples") if (get(cfg, f"data.{k}", -1) or -1) > 0]
    if used:
        return (
            f"data.{used[0]} picks a random subset with data.seed=null, a different one in every process, so a "
            "resumed run would continue on other prompts: set data.seed (or data.shuffle=false: the first rows)"
        )
    return None


FEATURES: tuple[Feature, ...] = (
    Feature(
        "algorithm.rollout_correction",
        PARTIAL,
        "decoupled mode (IS weights, rejection sampling, `rollout_corr/*` metrics) through verl's "
        "`compute_rollout_correction_and_add_to_batch`, bypass mode through `apply_bypass_mode` with verl's "
        "bypass loss set in the actor workers' config before they are built (verl 0.9.1 sets it on the driver "
        "only, after the workers exist); rejected "
        "without `rollout.calculate_log_probs=true`, bypass with the Composer's own actor loss, and bypass with "
        "an estimator that needs entropies (no old-log-prob pass)",
        _rollout_correction,
    ),
    Feature(
        "trainer.val_only",
        SUPPORTED,
        "validate (also a resumed checkpoint), log, stop",
    ),
    Feature(
        "trainer.rollout_data_dir",
        SUPPORTED,
        "one `<step>.jsonl` per step through verl's `_log_rollout_data`",
    ),
    Feature("trainer.validation_data_dir, log_val_generations", SUPPORTED, "verl's `_validate`, unchanged"),
    Feature(
        "global_profiler (steps, tool, profile_continuous_steps)",
        SUPPORTED,
        "verl's `_start_profiling` / `_stop_profiling` and the rollout servers' profile, on the same schedule "
        "(`verl_ext/trainer/profiling.py`); a fast DAPO step's profile covers all its generation calls",
    ),
    Feature(
        "trainer.esi_redundant_time (expiring instances)",
        SUPPORTED,
        "verl's `should_save_ckpt_esi` forces a save when the capacity block is about to expire",
    ),
    Feature(
        "images_seqlens (multimodal)",
        SUPPORTED,
        "collected from `multi_modal_inputs` as verl does",
    ),
    Feature("train_dataset.on_batch_end, async checkpoint finalize", SUPPORTED, "called as verl does"),
    Feature(
        "variance-proxy, spec-decode and GDPO metrics",
        SUPPORTED,
        "verl's metric functions, every step",
    ),
    Feature(
        "critic, use_kl_in_reward, critic_warmup, balance_batch, checkpoints",
        SUPPORTED,
        "verl's own calls in verl's order (the CPU tests run balance_batch and checkpoints; critic, "
        "use_kl_in_reward and critic_warmup are not run: GRPO has no critic)",
    ),
    Feature(
        "distillation (teacher model)",
        PARTIAL,
        "the trainer base: verl's actor update, inherited; rejected in the Composer",
        _distillation,
    ),
    Feature(
        "algorithm.adv_estimator=remax",
        REJECTED,
        "needs a greedy baseline generation",
        _remax,
    ),
    Feature(
        "reward.reward_model (reward model)",
        PARTIAL,
        "a standalone reward model (`enable_resource_pool=true`) scores inside verl's reward loop, like a reward "
        "function (config check tested; not run on CPU); the colocated one (`enable_resource_pool=false`) is "
        "rejected",
        _reward_model,
    ),
    Feature(
        "skip.rollout (rollout dump/replay)",
        PARTIAL,
        "verl's SkipManager, initialised and stepped as verl's fit does; rejected with fast DAPO's curriculum "
        "and the Composer (several generation calls per step), and skip.rollout_tq / skip.async_rollout "
        "(other trainers' keys) everywhere",
        _skip,
    ),
    Feature(
        "data.train_max_samples / data.val_max_samples",
        PARTIAL,
        "verl's dataset subset; rejected when it is random without a seed (data.shuffle=true, data.seed=null): "
        "every process would draw other prompts, so a resume would not continue the same data",
        _max_samples,
    ),
    Feature(
        "algorithm.filter_groups",
        REJECTED,
        "verl-recipe's key, ignored by verl's fit: use fast_dapo",
        _filter_groups,
    ),
    Feature(
        "algorithm.use_pf_ppo",
        PARTIAL,
        "with verl's estimators (inside verl's compute_advantage); rejected with the project's estimators and "
        "the Composer",
        _pf_ppo,
    ),
)


def check_fidelity(cfg: DictConfig, trainer: TrainerFidelity) -> None:
    """Raise ConfigError naming every feature of verl's fit that `cfg` asks for and this trainer cannot run
    (`trainer`: the trainer class's `fidelity`)."""
    if not isinstance(trainer, TrainerFidelity):
        raise TypeError(f"check_fidelity needs the trainer class's TrainerFidelity (its `fidelity`), got {trainer!r}")
    problems = [f"{f.key}: {reason}" for f in FEATURES if f.check and (reason := f.check(cfg, trainer))]
    if problems:
        raise ConfigError(
            "verl features this run cannot honour (see verl_ext/trainer/fidelity.py):\n- " + "\n- ".join(problems)
        )


def feature_table_markdown(tests: Mapping[str, Sequence[str]]) -> str:
    """docs/FIDELITY.md's table: verl feature -> status -> how / why -> the tests that show it (`tests`: feature key
    -> test names; the suite holds that mapping, tests/trainer/test_fidelity.py `FEATURE_TESTS`)."""
    lines = ["| verl feature | status | how / why | tests |", "|---|---|---|---|"]
    for f in FEATURES:
        shown = ", ".join(f"`{t}`" for t in tests.get(f.key, ())) or "-"
        lines.append(f"| `{f.key}` | {f.status} | {f.note} | {shown} |")
    return "\n".join(lines)
