"""Pre-flight checks of the data files, read cheaply (parquet metadata and the first row; JSON lines line by line):

* data files: `data.train_files` / `data.val_files` are set, exist and are parquet or JSON lines (what verl's
  RLHFDataset reads), and the train set fills at least one batch (verl drops the last partial batch);
* columns: the ones verl's dataset (`data.prompt_key`) and reward manager (`data_source`,
  `reward_model.ground_truth`) read, present and set in the first row;
* chat messages: the first row's prompt is a list of {role, content} messages (or a plain string, when the dataset
  class `data.custom_cls` declares `accepts_string_prompts = True`);
* prompt tokens: the model's tokenizer renders the first train prompt (its chat template), and its length.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, ListConfig

from verl_ext.config.errors import ConfigError
from verl_ext.config.preflight.common import is_remote
from verl_ext.config.preflight.plan import DataFile
from verl_ext.config.settings import get

_ROLES = {"system", "user", "assistant", "tool"}


def data_files(cfg: DictConfig, key: str) -> list[str]:
    value = get(cfg, key)
    if value is None or value == "" or (isinstance(value, list | ListConfig) and not value):
        raise ConfigError(f"{key} is not set")
    return [str(v) for v in value] if isinstance(value, list | ListConfig) else [str(value)]


def read_data_file(key: str, path: str) -> tuple[DataFile, dict | None, Any]:
    """(facts, first row, arrow schema or None) of one data file; ConfigError naming `key` and the path."""
    if is_remote(path):
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


def enough_rows(cfg: DictConfig, key: str, rows: int) -> None:
    """Validation: at least one row; train: at least one batch (verl drops the last partial batch)."""
    split = "train" if key == "data.train_files" else "val"
    cap = get(cfg, f"data.{split}_max_samples", -1)
    used = min(rows, cap) if isinstance(cap, int) and cap > 0 else rows
    if split == "val":
        if used < 1:
            raise ConfigError(f"{key}: no validation rows")
        return
    batch_key = "data.gen_batch_size" if get(cfg, "data.gen_batch_size") else "data.train_batch_size"
    batch = get(cfg, batch_key)
    if isinstance(batch, int) and used < batch:
        raise ConfigError(
            f"{key} holds {used} rows{' (data.train_max_samples)' if used < rows else ''}, fewer than one batch of "
            f"{batch_key}={batch}: verl drops the last partial batch, so the train dataloader would be empty"
        )


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


def custom_dataset_class(cfg: DictConfig):
    """The dataset class verl will build (data.custom_cls), imported here so a bad path fails now."""
    path, name = get(cfg, "data.custom_cls.path"), get(cfg, "data.custom_cls.name")
    from verl.utils.dataset.rl_dataset import RLHFDataset

    if not path:
        return RLHFDataset
    from verl.utils.import_utils import load_extern_object

    try:
        cls = load_extern_object(module_path=str(path), object_name=str(name))
    except Exception as e:  # noqa: BLE001
        raise ConfigError(f"data.custom_cls.path={path!r} name={name!r} does not import: {e}") from e
    return cls


def accepts_string_prompts(dataset_cls) -> bool:
    """Whether the dataset class takes a plain-string prompt column: it says so itself, with a class attribute
    `accepts_string_prompts = True` (verl's RLHFDataset needs chat messages)."""
    return getattr(dataset_cls, "accepts_string_prompts", False) is True


def chat_messages(key: str, prompt: Any, allow_string: bool) -> list[dict] | str:
    """The first row's prompt as verl's dataset and agent loop will use it: a list of {role, content} messages (or a
    plain string, with a dataset class that accepts string prompts: `allow_string`)."""
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


def prompt_tokens(tokenizer_dir: str, messages, custom_template) -> int:
    """Tokens of the first train prompt as the rollout will see it (a string as raw text, messages through the chat
    template); a ConfigError if the tokenizer cannot render it."""
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
