"""Pre-flight: resolve what a run will need and check it in the driver, before `ray.init`.

Every driver (`recipe.fast_dapo.main`, `recipe.composer.main`, `verl_ext.agent.main`) runs its recipe's settings
check and then `preflight(cfg, recipe, ...)`, so that a typo fails in seconds with a `ConfigError` naming the key
and its value instead of minutes later inside a Ray worker, after the model was loaded onto every GPU. The cluster
job path (`verl_ext/launch/job.py`) runs the same check before submitting, and `+check_only=true` (or `--check`)
prints the plan and exits.

What is checked (cheap only: parquet metadata and one row, module imports, small JSON files; never model weights):

* ranges: lengths, learning rates, batch sizes, epochs, step counts (`total_training_steps=0` trains nothing: an
  error unless `trainer.val_only=true`), sampling settings;
* `algorithm.adv_estimator` is in verl's estimator registry once the project's plugin has registered its own;
* the reward function (`reward.custom_reward_function.path` / `.name`) imports with verl's own loader and accepts the
  keyword arguments verl's reward manager passes (`data_source, solution_str, ground_truth, extra_info` and
  `reward_kwargs`);
* `actor_rollout_ref.model.path` is a local directory with a `config.json`, a tokenizer and weights, or has the form
  of a Hugging Face hub id (a missing local path is named as such, not sent to the hub);
* `data.train_files` / `data.val_files` exist, are parquet (or JSON lines, what verl's RLHFDataset reads) with the
  columns verl's dataset and reward read (`data.prompt_key`, `data_source`, `reward_model.ground_truth`), the first
  row is a chat prompt the model's chat template renders, and the train set fills at least one batch (verl drops the
  last partial batch: fewer rows than a batch is "Train dataloader is empty!" inside Ray);
* verl's own batch-size validation (`verl.utils.config.validate_config`), with the responses per prompt the recipe
  really trains on (fast DAPO: N = n + n_continue).

All problems are collected and reported together. The returned `Plan` says what the run will do (model, data rows,
steps, batch arithmetic, estimator, reward).
"""

from __future__ import annotations

import copy
import inspect
import json
import math
import os
import re
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf, open_dict

from verl_ext.config.errors import ConfigError

CHECK_ONLY_KEY = "check_only"
CHECK_FLAG = "--check"
FILE_MODES = ("full", "config")  # config: skip data/model files (they live on a cluster's storage only)
# What verl's reward manager passes to a reward function (verl/experimental/reward_loop/reward_manager/naive.py).
REWARD_ARGS = ("data_source", "solution_str", "ground_truth", "extra_info")
_ROLES = {"system", "user", "assistant", "tool"}
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")
_WEIGHT_FILES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)
# A Hugging Face repo id: `name` or `org/name` (letters, digits, - _ .), never a filesystem-looking path.
_HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*(/[A-Za-z0-9][A-Za-z0-9_.-]*)?$")


# ------------------------------------------------------------------------------------------------------------ plan
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
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)


# ---------------------------------------------------------------------------------------------------- small helpers
def _get(cfg: DictConfig, key: str, default=None):
    value = OmegaConf.select(cfg, key, default=default)
    return default if value is None else value


def _number(cfg: DictConfig, key: str, kind: type, default=None):
    """The value at `key` as int/float; a ConfigError naming the key if it is not one (bools are not numbers)."""
    value = OmegaConf.select(cfg, key, default=default)
    if value is None:
        return None
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    if kind is int:
        ok = ok and float(value).is_integer()
    if not ok:
        raise ConfigError(f"{key}={value!r} must be {'an integer' if kind is int else 'a number'}")
    return kind(value)


class _Problems:
    """Runs independent checks and collects their ConfigErrors, so one pass reports every problem."""

    def __init__(self) -> None:
        self.messages: list[str] = []

    def run(self, fn: Callable, *args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except ConfigError as e:
            self.messages.append(str(e))
            return None


# --------------------------------------------------------------------------------------------------------- ranges
def range_problems(cfg: DictConfig, critic: bool = False) -> list[str]:
    """Lengths, learning rates, batch sizes, epochs and step counts a run cannot start with (pure: config only)."""
    problems = _Problems()
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
    return problems.messages


_FP32 = ("fp32", "float32")


def check_cpu_precision(cfg: DictConfig) -> None:
    """On the CPU backend (trainer.device=cpu) the FSDP actor and reference compute in fp32: verl's engine takes its
    compute dtype from fsdp_config.mixed_precision.param_dtype (bf16 when unset, whatever the checkpoint says) and
    loads weights in fsdp_config.model_dtype, and bf16 is emulated on CPUs without it (~30x slower per token; the
    rollout's and the actor's log-probs then disagree). The backend config sets both; this catches an override."""
    if str(_get(cfg, "trainer.device", "")) != "cpu":
        return
    for role in ("actor", "ref"):
        base = f"actor_rollout_ref.{role}.fsdp_config"
        model_dtype = _get(cfg, f"{base}.model_dtype")
        param_dtype = _get(cfg, f"{base}.mixed_precision.param_dtype")
        if str(model_dtype) not in _FP32:
            raise ConfigError(f"{base}.model_dtype must be fp32 on the CPU backend, got {model_dtype!r}")
        if str(param_dtype) not in _FP32:
            raise ConfigError(
                f"{base}.mixed_precision.param_dtype must be fp32 on the CPU backend, got {param_dtype!r} (unset means "
                "bf16 in verl's FSDP engine, emulated on this CPU)"
            )


def _at_least(cfg: DictConfig, key: str, low: int) -> None:
    value = _number(cfg, key, int)
    if value is not None and value < low:
        raise ConfigError(f"{key}={value} must be >= {low}")


def _in_range(cfg: DictConfig, key: str, low: float, high: float, what: str) -> None:
    value = _number(cfg, key, float)
    if value is not None and not low <= value <= high:
        raise ConfigError(f"{key}={value} {what}")


def _positive_lr(cfg: DictConfig, key: str) -> None:
    lr = _number(cfg, key, float)
    if lr is not None and not (lr > 0 and math.isfinite(lr)):
        raise ConfigError(f"{key}={lr} must be a learning rate > 0 (torch rejects it inside every worker)")


def _steps(cfg: DictConfig) -> None:
    steps = _number(cfg, "trainer.total_training_steps", int)
    if steps is None:
        return
    if steps < 0:
        raise ConfigError(f"trainer.total_training_steps={steps} must be >= 1 (or null: epochs decide)")
    if steps == 0 and not _get(cfg, "trainer.val_only", False):
        raise ConfigError(
            "trainer.total_training_steps=0 trains nothing (the run would start every worker and exit 0): set it "
            ">= 1, null (epochs decide), or trainer.val_only=true to only validate"
        )


# ------------------------------------------------------------------------------------------------------ estimator
def check_estimator(cfg: DictConfig) -> str:
    """`algorithm.adv_estimator` in verl's registry. Importing verl loads the `verl.plugins` entry points, so the
    project's estimators are registered by the time the registry is read."""
    import verl  # noqa: F401  (loads the plugins, as in every worker)
    from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY

    name = _get(cfg, "algorithm.adv_estimator")
    if name not in ADV_ESTIMATOR_REGISTRY:
        raise ConfigError(
            f"algorithm.adv_estimator={name!r} is not in verl's estimator registry; known: "
            f"{sorted(ADV_ESTIMATOR_REGISTRY)}"
        )
    from verl_ext.advantage.config import ESTIMATORS

    return f"{name} ({'verl-ext' if name in ESTIMATORS or name == 'grpo_composer' else 'verl'})"


# --------------------------------------------------------------------------------------------------------- reward
def check_reward(cfg: DictConfig) -> str:
    """Import the reward function with verl's loader and bind verl's call to its signature."""
    node = _get(cfg, "reward.custom_reward_function") or {}
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
def _is_remote(path: str) -> bool:
    return "://" in path and not path.startswith("file://")


def check_model(cfg: DictConfig, key: str = "actor_rollout_ref.model.path") -> tuple[str, dict | None, str | None]:
    """(description, config.json contents or None, local tokenizer dir or None) of the model at `key`."""
    raw = _get(cfg, key)
    if not raw:
        raise ConfigError(f"{key} is not set")
    path = str(raw)
    if _is_remote(path):
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
    config_dir = Path(os.path.expanduser(str(_get(cfg, f"{section}.hf_config_path") or local)))
    tokenizer_dir = Path(os.path.expanduser(str(_get(cfg, f"{section}.tokenizer_path") or local)))
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
    prompt, response = _get(cfg, "data.max_prompt_length"), _get(cfg, "data.max_response_length")
    if isinstance(max_pos, int) and isinstance(prompt, int) and isinstance(response, int):
        if prompt + response > max_pos:
            raise ConfigError(
                f"data.max_prompt_length + data.max_response_length = {prompt} + {response} = {prompt + response} "
                f"exceeds the model's max_position_embeddings={max_pos} (actor_rollout_ref.model.path)"
            )


# ----------------------------------------------------------------------------------------------------------- data
def _files(cfg: DictConfig, key: str) -> list[str]:
    value = _get(cfg, key)
    if value is None or value == "" or (isinstance(value, list | ListConfig) and not value):
        raise ConfigError(f"{key} is not set")
    return [str(v) for v in value] if isinstance(value, list | ListConfig) else [str(value)]


def read_data_file(key: str, path: str) -> tuple[DataFile, dict | None, Any]:
    """(facts, first row, arrow schema or None) of one data file; ConfigError naming `key` and the path."""
    if _is_remote(path):
        return DataFile(key, path, None), None, None
    local = Path(os.path.expanduser(path))
    if not local.exists():
        raise ConfigError(f"{key}: {path!r} does not exist")
    if not local.is_file():
        raise ConfigError(f"{key}: {path!r} is not a file")
    if path.endswith(".parquet"):
        import pyarrow as pa
        import pyarrow.parquet as pq

        try:
            pf = pq.ParquetFile(local)
            schema = pf.schema_arrow
            batch = next(pf.iter_batches(batch_size=1), None)
        except (pa.ArrowException, OSError) as e:
            raise ConfigError(f"{key}: {path!r} is not a readable parquet file ({e})") from e
        rows = pf.metadata.num_rows
        first = batch.to_pylist()[0] if batch is not None and batch.num_rows else None
        return DataFile(key, path, rows, tuple(schema.names)), first, schema
    if path.endswith((".jsonl", ".json")):
        rows, first = 0, None
        try:
            with open(local) as f:
                for line in f:
                    if line.strip():
                        rows += 1
                        if first is None:
                            first = json.loads(line)
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise ConfigError(f"{key}: {path!r} is not JSON lines ({e})") from e
        if first is not None and not isinstance(first, dict):
            raise ConfigError(f"{key}: {path!r}: each line must be a JSON object, the first is {type(first).__name__}")
        return DataFile(key, path, rows, tuple(first or ())), first, None
    raise ConfigError(f"{key}: {path!r}: verl's RLHFDataset reads .parquet, .json and .jsonl files only")


def check_columns(key: str, data: DataFile, first: dict | None, schema, prompt_key: str, reward_reads: bool) -> None:
    """The columns verl's dataset (`prompt_key`) and reward manager (`data_source`, `reward_model.ground_truth`)
    read, present in the file and set in its first row."""
    if data.rows == 0 or first is None:
        raise ConfigError(f"{key}: {data.path!r} has no rows")
    if prompt_key not in data.columns:
        raise ConfigError(
            f"{key}: {data.path!r} has no {prompt_key!r} column (data.prompt_key); columns: {list(data.columns)}"
        )
    if not reward_reads:
        return
    if "data_source" not in data.columns:
        raise ConfigError(
            f"{key}: {data.path!r} has no 'data_source' column, which verl's reward manager passes to the reward "
            f"function; columns: {list(data.columns)}"
        )
    if "reward_model" not in data.columns:
        raise ConfigError(
            f"{key}: {data.path!r} has no 'reward_model' column (the reward reads reward_model.ground_truth); "
            f"columns: {list(data.columns)}"
        )
    if schema is not None:
        import pyarrow as pa

        kind = schema.field("reward_model").type
        if not pa.types.is_struct(kind) or kind.get_field_index("ground_truth") < 0:
            raise ConfigError(
                f"{key}: {data.path!r}: column 'reward_model' must be a struct with a 'ground_truth' field, got {kind}"
            )
    gt = (first.get("reward_model") or {}).get("ground_truth") if isinstance(first.get("reward_model"), dict) else None
    if gt is None:
        raise ConfigError(f"{key}: {data.path!r}: the first row's reward_model.ground_truth is missing or null")


def chat_messages(key: str, prompt: Any, allow_string: bool) -> list[dict] | str:
    """The first row's prompt as verl's dataset and agent loop will use it: a list of {role, content} messages (or a
    plain string with the project's RawPromptRLHFDataset)."""
    if isinstance(prompt, str):
        if allow_string:
            return prompt
        raise ConfigError(
            f"{key}: the first row's prompt is a plain string; verl needs chat messages [{{role, content}}, ...] "
            "(or data.custom_cls=pkg://verl_ext.dataset.raw_prompt:RawPromptRLHFDataset for raw text prompts)"
        )
    if hasattr(prompt, "tolist"):
        prompt = prompt.tolist()
    if not isinstance(prompt, list) or not prompt:
        raise ConfigError(f"{key}: the first row's prompt must be a non-empty list of chat messages, got {prompt!r}")
    for i, m in enumerate(prompt):
        if not isinstance(m, dict) or m.get("role") not in _ROLES or not isinstance(m.get("content"), str | list):
            raise ConfigError(
                f"{key}: the first row's prompt message {i} is not a chat message with a role in {sorted(_ROLES)} "
                f"and a content: {m!r}"
            )
    return prompt


def _custom_dataset_class(cfg: DictConfig):
    """The dataset class verl will build (data.custom_cls), imported here so a bad path fails now."""
    path, name = _get(cfg, "data.custom_cls.path"), _get(cfg, "data.custom_cls.name")
    from verl.utils.dataset.rl_dataset import RLHFDataset

    if not path:
        return RLHFDataset
    from verl.utils.import_utils import load_extern_object

    try:
        cls = load_extern_object(module_path=str(path), object_name=str(name))
    except Exception as e:  # noqa: BLE001
        raise ConfigError(f"data.custom_cls.path={path!r} name={name!r} does not import: {e}") from e
    return cls


def _prompt_tokens(tokenizer_dir: str, messages, custom_template) -> int:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    if isinstance(messages, str):
        return len(tok(messages, add_special_tokens=False)["input_ids"])
    if custom_template:
        tok.chat_template = custom_template
    try:
        ids = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    except Exception as e:  # noqa: BLE001 -- no template, a template error: the rollout would fail the same way
        raise ConfigError(
            f"the model's tokenizer cannot render the first train prompt as a chat ({type(e).__name__}: {e}); "
            "set actor_rollout_ref.model.custom_chat_template or fix data.train_files' prompt column"
        ) from e
    if isinstance(ids, dict) or hasattr(ids, "keys"):
        ids = ids["input_ids"]
    return len(ids)


# ------------------------------------------------------------------------------------------------ verl's own check
def _uses_critic(cfg: DictConfig) -> bool:
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
        validate_config(probe, use_reference_policy=need_reference_policy(probe), use_critic=_uses_critic(probe))
    except (AssertionError, ValueError, TypeError) as e:
        raise ConfigError(
            f"verl rejects the batch settings (with {responses_per_prompt} responses per prompt): {e}"
        ) from e
    except Exception as e:  # noqa: BLE001 -- e.g. the critic's model config failing to build: still a config error
        raise ConfigError(f"verl rejects the config: {type(e).__name__}: {e}") from e


# -------------------------------------------------------------------------------------------------------- the check
def preflight(
    cfg: DictConfig,
    recipe: str,
    responses_per_prompt: int | None = None,
    settings: object | None = None,
    reward_reads_data: bool = True,
    files: str = "full",
) -> Plan:
    """Check everything `cfg` (resolved, after the recipe's own settings check) will need; return the plan or raise
    one ConfigError listing every problem. `responses_per_prompt`: responses per prompt in a training batch
    (default rollout.n). `reward_reads_data`: verl's reward manager scores the rows (False when an agent posts the
    score), so the data needs `data_source` and `reward_model.ground_truth`. `files="config"` skips the data and
    model files (a cluster job whose paths exist on the cluster's storage only)."""
    if files not in FILE_MODES:
        raise ValueError(f"files must be one of {FILE_MODES}, got {files!r}")
    plan = Plan(recipe, settings=str(settings) if settings is not None else "")
    problems = _Problems()
    problems.messages += range_problems(cfg, critic=_uses_critic(cfg))
    plan.estimator = problems.run(check_estimator, cfg) or plan.estimator
    plan.reward = problems.run(check_reward, cfg) or plan.reward
    n = responses_per_prompt or _number(cfg, "actor_rollout_ref.rollout.n", int) or 1
    if files == "full":
        _check_files(cfg, plan, problems, reward_reads_data)
        if _uses_critic(cfg):
            problems.run(check_model, cfg, "critic.model.path")
    if not problems.messages:  # verl's validation assumes sane numbers (and builds the critic's model config)
        problems.run(check_verl_batches, cfg, n)
    if files != "full":
        plan.notes.append("data and model files not checked here (files='config')")
    if problems.messages:
        raise ConfigError(f"{recipe}: the run cannot start:\n- " + "\n- ".join(problems.messages))
    plan.batch = _batch_arithmetic(cfg, n)
    plan.steps = _steps_plan(cfg, recipe, plan.data)
    return plan


def _check_files(cfg: DictConfig, plan: Plan, problems: _Problems, reward_reads_data: bool) -> None:
    model = problems.run(check_model, cfg)
    tokenizer_dir = None
    if model:
        plan.model, hf_config, tokenizer_dir = model
        if hf_config:
            problems.run(check_context_length, cfg, hf_config)
    dataset_cls = problems.run(_custom_dataset_class, cfg)
    from verl.utils.dataset.rl_dataset import RLHFDataset

    verl_format = dataset_cls is not None and isinstance(dataset_cls, type) and issubclass(dataset_cls, RLHFDataset)
    allow_string = dataset_cls is not None and getattr(dataset_cls, "__name__", "") == "RawPromptRLHFDataset"
    prompt_key = str(_get(cfg, "data.prompt_key", "prompt"))
    first_train = None
    for key in ("data.train_files", "data.val_files"):
        paths = problems.run(_files, cfg, key) or []
        rows = 0
        for path in paths:
            read = problems.run(read_data_file, key, path)
            if read is None:
                rows = None
                continue
            data, first, schema = read
            plan.data.append(data)
            if data.rows is None:
                rows = None
                continue
            if rows is not None:
                rows += data.rows
            if not verl_format:  # a custom dataset class reads its own format
                continue
            problems.run(check_columns, key, data, first, schema, prompt_key, reward_reads_data)
            if first is not None and prompt_key in first and key == "data.train_files":
                messages = problems.run(chat_messages, key, first[prompt_key], allow_string)
                if messages is not None and first_train is None:
                    first_train = messages
        if rows is not None and paths:
            problems.run(_enough_rows, cfg, key, rows)
    if first_train is not None and tokenizer_dir:
        tokens = problems.run(
            _prompt_tokens, tokenizer_dir, first_train, _get(cfg, "actor_rollout_ref.model.custom_chat_template")
        )
        if tokens is not None:
            limit = _get(cfg, "data.max_prompt_length")
            plan.first_prompt = f"{tokens} tokens (data.max_prompt_length {limit})"
            if isinstance(limit, int) and tokens > limit:
                plan.notes.append(
                    f"the first train prompt has {tokens} tokens > data.max_prompt_length={limit}: verl left-"
                    "truncates such prompts (or drops them with data.filter_overlong_prompts=true)"
                )


def _enough_rows(cfg: DictConfig, key: str, rows: int) -> None:
    split = "train" if key == "data.train_files" else "val"
    cap = _get(cfg, f"data.{split}_max_samples", -1)
    used = min(rows, cap) if isinstance(cap, int) and cap > 0 else rows
    if split == "val":
        if used < 1:
            raise ConfigError(f"{key}: no validation rows")
        return
    batch_key = "data.gen_batch_size" if _get(cfg, "data.gen_batch_size") else "data.train_batch_size"
    batch = _get(cfg, batch_key)
    if isinstance(batch, int) and used < batch:
        raise ConfigError(
            f"{key} holds {used} rows{' (data.train_max_samples)' if used < rows else ''}, fewer than one batch of "
            f"{batch_key}={batch}: verl drops the last partial batch, so the train dataloader would be empty"
        )


def _batch_arithmetic(cfg: DictConfig, n: int) -> str:
    prompts = _get(cfg, "data.train_batch_size")
    mini = _get(cfg, "actor_rollout_ref.actor.ppo_mini_batch_size")
    epochs = _get(cfg, "actor_rollout_ref.actor.ppo_epochs", 1)
    text = f"{prompts} prompts x {n} responses = {prompts * n} rows per step"
    if isinstance(mini, int) and mini > 0:
        text += f"; {max(prompts // mini, 1)} mini-batch(es) of {mini} prompts ({mini * n} rows), {epochs} PPO epoch(s)"
    gen = _get(cfg, "data.gen_batch_size")
    if gen and gen != prompts:
        text += f"; {gen} prompts per generation call"
    return text


def _steps_plan(cfg: DictConfig, recipe: str, data: list[DataFile]) -> str:
    if _get(cfg, "trainer.val_only", False):
        return "validation only (trainer.val_only=true)"
    epochs = _get(cfg, "trainer.total_epochs")
    steps = _get(cfg, "trainer.total_training_steps")
    train = [d for d in data if d.key == "data.train_files"]
    rows = None if not train or any(d.rows is None for d in train) else sum(d.rows for d in train)
    cap = _get(cfg, "data.train_max_samples", -1)
    if rows is not None and isinstance(cap, int) and cap > 0:
        rows = min(rows, cap)
    per_epoch = None
    if rows is not None:
        if recipe == "fast_dapo":  # a step is train_batch_size kept prompts (recipe/fast_dapo/fast_dapo_ray_trainer.py)
            per_epoch = rows // _get(cfg, "data.train_batch_size")
        else:  # verl: one step per full dataloader batch
            per_epoch = rows // (_get(cfg, "data.gen_batch_size") or _get(cfg, "data.train_batch_size"))
    epoch_text = f"{per_epoch} steps per epoch at most" if per_epoch is not None else "steps per epoch unknown"
    if steps is not None:
        return f"{steps} (trainer.total_training_steps); {epoch_text}, trainer.total_epochs={epochs}"
    total = per_epoch * epochs if per_epoch is not None else "?"
    return f"{total} (trainer.total_epochs={epochs} x {epoch_text})"


# ------------------------------------------------------------------------------------------------ driver plumbing
def check_only_requested(cfg: DictConfig) -> bool:
    """Pop `check_only` (given as `+check_only=true`) from the config: verl's workers never see it."""
    if CHECK_ONLY_KEY not in cfg:
        return False
    value = cfg[CHECK_ONLY_KEY]
    with open_dict(cfg):
        cfg.pop(CHECK_ONLY_KEY)
    if not isinstance(value, bool):
        raise ConfigError(f"{CHECK_ONLY_KEY}={value!r} must be true or false")
    return value


def translate_check_flag(argv: list[str]) -> list[str]:
    """`--check` on a Hydra command line becomes `+check_only=true` (Hydra's own parser rejects unknown flags)."""
    if CHECK_FLAG not in argv:
        return argv
    return [a for a in argv if a != CHECK_FLAG] + [f"+{CHECK_ONLY_KEY}=true"]


@contextmanager
def failing_cleanly(what: str) -> Iterator[None]:
    """A bad config ends the driver with its message and exit code 2, not a traceback from deep in a check."""
    try:
        yield
    except ValueError as e:  # ConfigError, and the plain ValueErrors of older settings checks
        print(f"[preflight] {what}: bad config, nothing started:\n{e}", file=sys.stderr, flush=True)
        raise SystemExit(2) from e


def gate(what: str, cfg: DictConfig, check: Callable[[DictConfig], Plan]) -> bool:
    """The drivers' one call before `ray.init`: run `check` (the recipe's settings, then `preflight`), print the plan,
    and say whether to start the run (False after `+check_only=true`). A bad config exits 2 with its message."""
    with failing_cleanly(what):
        check_only = check_only_requested(cfg)
        plan = check(cfg)
    print(plan.render(), flush=True)
    if check_only:
        print(f"[preflight] {what}: check passed; check_only=true, so nothing was started", flush=True)
    return not check_only


def agent_check(settings) -> Callable[[DictConfig], Plan]:
    """The check of `verl_ext.agent.main` (verl's ppo_trainer config, the project's trainer base): an agent that
    posts its own score (external_agent.score_source=agent) needs no ground truth in the data."""
    return lambda cfg: preflight(
        cfg, "ppo", settings=settings, reward_reads_data=getattr(settings, "score_source", "reward_fn") != "agent"
    )


def check_recipe_config(recipe: str, cfg: DictConfig, files: str = "full") -> Plan:
    """The driver check of `recipe.<recipe>.main` on a composed config (left unchanged: the check runs on a resolved
    copy). What a cluster job submission and a campaign run before anything is queued."""
    import importlib

    from verl_ext.trainer.launch import register_lazy_resolvers

    register_lazy_resolvers()
    probe = copy.deepcopy(cfg)
    try:
        OmegaConf.resolve(probe)
    except Exception as e:  # noqa: BLE001 -- a resolver's own error (e.g. ${tiny_assets:nope}) names the value
        raise ConfigError(f"{recipe}: the config does not resolve: {e}") from e
    check = importlib.import_module(f"recipe.{recipe}.main").check
    return check(probe, files=files)
