"""Every trainer of the project changes ExtRayPPOTrainer's step through its named hooks only (ppo_trainer.HOOKS,
docs/ARCHITECTURE.md "Trainer hooks"): a recipe that overrides another method of the base fails here."""

import inspect

import pytest

from recipe.composer.composer_ray_trainer import AgentComposerTrainer, RayComposerTrainer
from recipe.fast_dapo.fast_dapo_ray_trainer import AgentFastDAPOTrainer, RayFastDAPOTrainer
from verl_ext.trainer.agent_episodes import AgentEpisodesMixin, AgentPPOTrainer
from verl_ext.trainer.ppo_trainer import HOOKS, ExtRayPPOTrainer

TRAINERS = [RayFastDAPOTrainer, AgentFastDAPOTrainer, RayComposerTrainer, AgentComposerTrainer, AgentPPOTrainer]


def overridden(cls: type) -> set[str]:
    """Names of ExtRayPPOTrainer's methods and properties (its own and verl's) that `cls` or a class between them
    defines again, constructors and class attributes left out."""
    own = set()
    for klass in cls.__mro__:
        if klass is ExtRayPPOTrainer:
            break
        for name, value in vars(klass).items():
            if name.startswith("__") or not (callable(value) or isinstance(value, property)):
                continue
            if hasattr(ExtRayPPOTrainer, name):
                own.add(name)
    return own


@pytest.mark.parametrize("cls", TRAINERS, ids=lambda c: c.__name__)
def test_trainers_override_only_the_named_hooks(cls):
    assert overridden(cls) <= HOOKS, sorted(overridden(cls) - HOOKS)


def test_every_hook_is_a_method_of_the_base():
    for name in HOOKS:
        assert hasattr(ExtRayPPOTrainer, name), name
    assert AgentEpisodesMixin in AgentFastDAPOTrainer.__mro__


def test_the_checker_sees_a_private_override():
    class Sneaky(RayFastDAPOTrainer):
        def _maybe_save_checkpoint(self, *args, **kwargs):
            pass

        def compute_advantages(self, batch, step):
            return batch

    assert overridden(Sneaky) - HOOKS == {"_maybe_save_checkpoint"}
    assert "compute_advantages" in overridden(Sneaky)
    assert inspect.isfunction(vars(Sneaky)["compute_advantages"])
