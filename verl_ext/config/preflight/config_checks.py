"""Pre-flight checks of the config's values, before any worker exists:

* ranges: lengths, learning rates, batch sizes, epochs and step counts a run cannot start with
  (`total_training_steps=0` trains nothing: an error unless `trainer.val_only=true`), sampling settings;
* CPU precision: on the CPU backend the FSDP actor and reference compute in fp32;
* the estimator: `algorithm.adv_estimator` is in verl's registry (the project's are registered by its plugin);
* the reward function imports with verl's loader and accepts the arguments verl's reward manager passes;
* the model: `actor_rollout_ref.model.path` (or the critic's) is a local model directory or a hub id, and prompt +
  response fit its positions (context length);
* verl's own batch-size validation (`validate_config`, which verl runs inside Ray).
"""

from __future__ import annotations

import copy
import inspect
import json
import math
import os
import re
from pathlib import Path

from omegaconf import DictConfig, open_dict

from verl_ext.config.errors import ConfigError
from verl_ext.config.preflight.common import Problems, is_remote, number
from verl_ext.config.settings import get

# What verl's reward manager passes to a reward function (verl/experimental/reward_loop/reward_manager/naive.py).
REWARD_ARGS = ("data_source", "solution_str", "ground_truth", "extra_info")
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")
_WEIGHT_FILES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)
# A Hugging Face repo id: `name` or `org/name` (letters, digits, - _ .), never a filesystem-looking path.
_HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*(/[A-Za-z0-9][A-Za-z0-9_.-]*)?$")
_FP32 = ("fp32", "float32")
# The project's package: an estimator whose registered function is defined under it is the project's (verl's registry
# says who registered each estimator; no list of names to keep in step).
_PROJECT_PACKAGE = "verl_ext"


# --------------------------------------------------------------------------------------------------------- ranges
def range_problems(cfg: DictConfig, critic: bool = False) -> list[str]:
    """Lengths, learning rates, batch sizes, epochs and step counts a run cannot start with (pure: config only)."""
    problems = Problems()
    minimum = {
        "data.max_prompt_length": 1,
        "data.max_response_length": 1,
        "data.train_batch_size": 1,
        "actor_rollout_ref.actor.ppo_mini_batch_size": 1,
        "actor_rollout_ref.actor.ppo_epochs": 1,
        "actor_rollout_ref.rollout.n": 1,
        "trainer.total_epochs": 1,
        "trainer.nnodes": 1,
        "trainer.n_gpus_per_node": 1,
    }
    for key, low in minimum.items():
        problems.run(_at_least, cfg, key, low)
    lr_keys = ["actor_rollout_ref.actor.optim.lr"] + (["critic.optim.lr"] if critic else [])
    for key in lr_keys:
        problems.run(_positive_lr, cfg, key)
    problems.run(_steps, cfg)
    problems.run(_in_range, cfg, "actor_rollout_ref.rollout.temperature", 0.0, math.inf, "must be >= 0")
    problems.run(_in_range, cfg, "actor_rollout_ref.rollout.top_p", 1e-12, 1.0, "must be in (0, 1]")
    problems.run(_in_range, cfg, "actor_rollout_ref.rollout.gpu_memory_utilization", 1e-12, 1.0, "must be in (0, 1]")
    problems.run(check_cpu_precision, cfg)
    problems.run(check_shared_prefix, cfg)
    return problems.messages


def check_cpu_precision(cfg: DictConfig) -> None:
    """On the CPU backend (trainer.device=cpu) the FSDP actor and reference compute in fp32: verl's engine takes its
    compute dtype from fsdp_config.mixed_precision.param_dtype (bf16 when unset, whatever the checkpoint says) and
    loads weights in fsdp_config.model_dtype, and bf16 is emulated on CPUs without it (~30x slower per token; the
    rollout's and the actor's log-probs then disagree). The backend config sets both; this catches an override."""
    if str(get(cfg, "trainer.device", "")) != "cpu":
        return
    for role in ("actor", "ref"):
        base = f"actor_rollout_ref.{role}.fsdp_config"
        model_dtype = get(cfg, f"{base}.model_dtype")
        param_dtype = get(cfg, f"{base}.mixed_precision.param_dtype")
        if str(model_dtype) not in _FP32:
            raise ConfigError(f"{base}.model_dtype must be fp32 on the CPU backend, got {model_dtype!r}")
        if str(param_dtype) not in _FP32:
            raise ConfigError(
                f"{base}.mixed_precision.param_dtype must be fp32 on the CPU backend, got {param_dtype!r} (unset means "
                "bf16 in verl's FSDP engine, emulated on this CPU)"
            )


def check_shared_prefix(cfg: DictConfig) -> None:
    """Shared-prefix actor passes (`actor.use_prefix_grouper`, verl_ext/shared_prefix/) hand the model a 4-D attention
    mask, which transformers' eager and sdpa attention take and FlashAttention (verl's default) does not."""
    if not get(cfg, "actor_rollout_ref.actor.use_prefix_grouper", False):
        return
    from verl_ext.shared_prefix import MASK_KIND

    key = "actor_rollout_ref.model.override_config.attn_implementation"
    attn = get(cfg, key, None) or "flash_attention_2"
    if attn not in MASK_KIND:
        raise ConfigError(
            f"actor_rollout_ref.actor.use_prefix_grouper=true needs {key} in {sorted(MASK_KIND)}, got {attn!r} "
            "(shared-prefix packs pass a 4-D attention mask; docs/SHARED_PREFIX.md)"
        )
    # verl's _balance_batch then splits whole groups across data-parallel ranks and raises inside Ray unless they
    # divide evenly; a step's groups are data.train_batch_size
    if get(cfg, "trainer.balance_batch", True):
        world = int(get(cfg, "trainer.nnodes", 1)) * int(get(cfg, "trainer.n_gpus_per_node", 1))
        sp = int(get(cfg, "actor_rollout_ref.actor.ulysses_sequence_parallel_size", 1) or 1)
        dp = max(1, world // sp)
        groups = int(get(cfg, "data.train_batch_size", dp))
        if groups % dp:
            raise ConfigError(
                f"actor_rollout_ref.actor.use_prefix_grouper=true with trainer.balance_batch: data.train_batch_size="
                f"{groups} groups must divide evenly over the {dp} data-parallel ranks (trainer.nnodes x "
                "trainer.n_gpus_per_node / ulysses_sequence_parallel_size); verl keeps each group on one rank"
            )


def _at_least(cfg: DictConfig, key: str, low: int) -> None:
    value = number(cfg, key, int)
    if value is not None and value < low:
        raise ConfigError(f"{key}={value} must be >= {low}")


def _in_range(cfg: DictConfig, key: str, low: float, high: float, what: str) -> None:
    value = number(cfg, key, float)
    if value is not None and not low <= value <= high:
        raise ConfigError(f"{key}={value} {what}")


def _positive_lr(cfg: DictConfig, key: str) -> None:
    lr = number(cfg, key, float)
    if lr is not None and not (lr > 0 and math.isfinite(lr)):
        raise ConfigError(f"{key}={lr} must be a learning rate > 0 (torch rejects it inside every worker)")


def _steps(cfg: DictConfig) -> None:
    steps = number(cfg, "trainer.total_training_steps", int)
    if steps is None:
        return
    if steps < 0:
        raise ConfigError(f"trainer.total_training_steps={steps} must be >= 1 (or null: epochs decide)")
    if steps == 0 and not get(cfg, "trainer.val_only", False):
        raise ConfigError(
            "trainer.total_training_steps=0 trains nothing (the run would start every worker and exit 0): set it "
            ">= 1, null (epochs decide), or trainer.val_only=true to only validate"
        )


# ------------------------------------------------------------------------------------------------------ estimator
def check_estimator(cfg: DictConfig) -> str:
    """`algorithm.adv_estimator` in verl's registry. Importing verl loads the `verl.plugins` entry points, so the
    project's estimators are registered by the time the registry is read. The plan says whose estimator it is: the
    project's if its registered function is defined in the project's package, else verl's."""
    import verl  # noqa: F401  (loads the plugins, as in every worker)
    from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY

    name = get(cfg, "algorithm.adv_estimator")
    if name not in ADV_ESTIMATOR_REGISTRY:
        raise ConfigError(
            f"algorithm.adv_estimator={name!r} is not in verl's estimator registry; known: "
            f"{sorted(ADV_ESTIMATOR_REGISTRY)}"
        )
    module = getattr(ADV_ESTIMATOR_REGISTRY[name], "__module__", None) or ""
    return f"{name} ({'verl-ext' if module.split('.')[0] == _PROJECT_PACKAGE else 'verl'})"


# --------------------------------------------------------------------------------------------------------- reward
def check_reward(cfg: DictConfig) -> str:
    """Import the reward function with verl's loader and bind verl's call to its signature."""
    node = get(cfg, "reward.custom_reward_function") or {}
    path, name = node.get("path"), node.get("name")
    if not path:
        return "verl's default_compute_score (chosen by each row's data_source)"
    if not name:
        raise ConfigError(f"reward.custom_reward_function.path={path!r} needs reward.custom_reward_function.name")
    from verl.utils.import_utils import load_extern_object

    try:
        fn = load_extern_object(module_path=str(path), object_name=str(name))
    except AttributeError as e:
        raise ConfigError(f"reward.custom_reward_function.name={name!r}: no such object in {path!r} ({e})") from e
    except Exception as e:  # noqa: BLE001 -- ImportError, FileNotFoundError, the module's own error: all name the key
        raise ConfigError(
            f"reward.custom_reward_function.path={path!r} does not import: {type(e).__name__}: {e}"
        ) from e
    if not callable(fn):
        raise ConfigError(f"reward.custom_reward_function.name={name!r} in {path!r} is not callable")
    kwargs = dict(node.get("reward_kwargs") or {})
    try:
        inspect.signature(fn).bind(**dict.fromkeys(REWARD_ARGS), **kwargs)
    except TypeError as e:
        raise ConfigError(
            f"reward.custom_reward_function {path}:{name} cannot be called as verl calls it "
            f"({', '.join(REWARD_ARGS)}=..., plus reward_kwargs {sorted(kwargs)}): {e}"
        ) from e
    except ValueError:
        pass  # a builtin without a signature: verl will find out
    return f"{path}:{name}" + (f" with {kwargs}" if kwargs else "")


# ---------------------------------------------------------------------------------------------------------- model
def check_model(cfg: DictConfig, key: str = "actor_rollout_ref.model.path") -> tuple[str, dict | None, str | None]:
    """(description, config.json contents or None, local tokenizer dir or None) of the model at `key`."""
    raw = get(cfg, key)
    if not raw:
        raise ConfigError(f"{key} is not set")
    path = str(raw)
    if is_remote(path):
        return f"{path} (remote, fetched by each worker; not checked here)", None, None
    local = Path(os.path.expanduser(path.removeprefix("file://")))
    if not local.exists():
        looks_local = path.startswith(("/", ".", "~", "file://")) or path.count("/") > 1
        if looks_local or not _HUB_ID.match(path):
            raise ConfigError(f"{key}={path!r}: no such local directory (and not a Hugging Face hub id)")
        return f"{path} (Hugging Face hub id: downloaded by each worker; not checked here)", None, None
    if not local.is_dir():
        raise ConfigError(f"{key}={path!r} is a file; it must be a model directory (config.json, tokenizer, weights)")
    section = key.rsplit(".", 1)[0]
    config_dir = Path(os.path.expanduser(str(get(cfg, f"{section}.hf_config_path") or local)))
    tokenizer_dir = Path(os.path.expanduser(str(get(cfg, f"{section}.tokenizer_path") or local)))
    try:
        hf_config = json.loads((config_dir / "config.json").read_text())
    except FileNotFoundError as e:
        raise ConfigError(f"{key}={path!r}: no config.json in {config_dir}") from e
    except json.JSONDecodeError as e:
        raise ConfigError(f"{key}={path!r}: {config_dir / 'config.json'} is not JSON ({e})") from e
    if not any((tokenizer_dir / f).exists() for f in _TOKENIZER_FILES):
        raise ConfigError(f"{key}={path!r}: no tokenizer in {tokenizer_dir} (none of {list(_TOKENIZER_FILES)})")
    if not any((local / f).exists() for f in _WEIGHT_FILES) and not list(local.glob("*.safetensors")):
        raise ConfigError(f"{key}={path!r}: no weights in {local} (none of {list(_WEIGHT_FILES)})")
    desc = (
        f"{path} (local {hf_config.get('model_type', '?')}, vocab {hf_config.get('vocab_size', '?')}, "
        f"max positions {hf_config.get('max_position_embeddings', '?')})"
    )
    return desc, hf_config, str(tokenizer_dir)


def check_context_length(cfg: DictConfig, hf_config: dict) -> None:
    """Prompt + response must fit the model's positions (vLLM refuses a longer max_model_len)."""
    max_pos = hf_config.get("max_position_embeddings")
    prompt, response = get(cfg, "data.max_prompt_length"), get(cfg, "data.max_response_length")
    if isinstance(max_pos, int) and isinstance(prompt, int) and isinstance(response, int):
        if prompt + response > max_pos:
            raise ConfigError(
                f"data.max_prompt_length + data.max_response_length = {prompt} + {response} = {prompt + response} "
                f"exceeds the model's max_position_embeddings={max_pos} (actor_rollout_ref.model.path)"
            )


# ------------------------------------------------------------------------------------------------ verl's own check
def uses_critic(cfg: DictConfig) -> bool:
    """verl's need_critic, without its warning that a non-GAE estimator disables the critic (the usual case)."""
    import warnings

    from verl.trainer.ppo.utils import need_critic

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return need_critic(cfg)


def check_verl_batches(cfg: DictConfig, responses_per_prompt: int) -> None:
    """verl's batch-size checks (`validate_config`, which verl runs inside Ray), on a copy where rollout.n is the
    number of responses a training batch holds per prompt."""
    from verl.trainer.ppo.utils import need_reference_policy
    from verl.utils.config import validate_config

    probe = copy.deepcopy(cfg)
    with open_dict(probe):
        probe.actor_rollout_ref.rollout.n = responses_per_prompt
    try:
        validate_config(probe, use_reference_policy=need_reference_policy(probe), use_critic=uses_critic(probe))
    except (AssertionError, ValueError, TypeError) as e:
        raise ConfigError(
            f"verl rejects the batch settings (with {responses_per_prompt} responses per prompt): {e}"
        ) from e
    except Exception as e:  # noqa: BLE001 -- e.g. the critic's model config failing to build: still a config error
        raise ConfigError(f"verl rejects the config: {type(e).__name__}: {e}") from e
