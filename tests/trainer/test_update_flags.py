"""The actor update's extra flags (verl_ext/trainer/update_flags.py): added to the TensorDict on its way to the worker
group, and the verl 0.9.1 behaviour this relies on."""

import inspect
from types import SimpleNamespace

from tensordict import TensorDict
from verl.trainer.ppo.ray_trainer import RayPPOTrainer
from verl.utils import tensordict_utils as tu

from verl_ext.trainer.update_flags import update_flags


def test_flags_reach_the_update_call_and_the_method_is_restored():
    seen = []

    def update_actor(td):
        seen.append(tu.get_non_tensor_data(data=td, key="distillation_use_topk", default=None))
        return "out"

    wg = SimpleNamespace(update_actor=update_actor)
    td = TensorDict({}, batch_size=[])
    tu.assign_non_tensor(td, distillation_use_topk=False)  # what verl's _update_actor sets first
    with update_flags(wg, {"distillation_use_topk": True}):
        assert wg.update_actor(td) == "out"
    assert seen == [True]
    assert wg.update_actor is update_actor
    with update_flags(wg, {}):  # no flags: the worker group is untouched
        assert wg.update_actor is update_actor


def test_verl_update_actor_sets_its_flags_then_calls_the_worker_group():
    """If verl's _update_actor stops sending the TensorDict through actor_rollout_wg.update_actor after setting its
    flags, the Composer's full-logit SDPO would silently lose its logits processor."""
    src = inspect.getsource(RayPPOTrainer._update_actor)
    flags_set = src.index("distillation_use_topk=distillation_use_topk")
    assert flags_set < src.index("self.actor_rollout_wg.update_actor(batch_td)")
