"""`preflight(cfg, recipe, ...)`: run every pre-flight check on a resolved config (the config checks, then the data
and model files unless `files="config"`, then verl's own batch validation), collect every problem into one
ConfigError, and return the run's `Plan`. What differs between drivers comes in as arguments; nothing here knows a
recipe."""

from __future__ import annotations

from omegaconf import DictConfig

from verl_ext.config.errors import ConfigError
from verl_ext.config.preflight.common import Problems, number
from verl_ext.config.preflight.config_checks import (
    check_context_length,
    check_estimator,
    check_model,
    check_reward,
    check_verl_batches,
    range_problems,
    uses_critic,
)
from verl_ext.config.preflight.file_checks import (
    accepts_string_prompts,
    chat_messages,
    check_columns,
    custom_dataset_class,
    data_files,
    enough_rows,
    prompt_tokens,
    read_data_file,
)
from verl_ext.config.preflight.memory import estimate, memory_lines, run_shape
from verl_ext.config.preflight.plan import Plan, batch_arithmetic, steps_plan
from verl_ext.config.settings import get
from verl_ext.config.trainer_settings import read_trainer_extras
from verl_ext.metrics_log.memory_watch import meminfo_gib

FILE_MODES = ("full", "config")  # config: skip data/model files (they live on a cluster's storage only)


def preflight(
    cfg: DictConfig,
    recipe: str,
    responses_per_prompt: int | None = None,
    settings: object | None = None,
    reward_reads_data: bool = True,
    files: str = "full",
    prompts_per_step: int | None = None,
) -> Plan:
    """Check everything `cfg` (resolved, after the recipe's own settings check) will need; return the plan or raise
    one ConfigError listing every problem. `recipe`: the name the plan and the error carry. `responses_per_prompt`:
    responses per prompt in a training batch (default rollout.n). `reward_reads_data`: verl's reward manager scores
    the rows (False when an agent posts the score), so the data needs `data_source` and `reward_model.ground_truth`.
    `files="config"` skips the data and model files (a cluster job whose paths exist on the cluster's storage only).
    `prompts_per_step`: train rows one training step consumes, for the plan's step count (default verl's one
    dataloader batch: data.gen_batch_size, else data.train_batch_size)."""
    if files not in FILE_MODES:
        raise ValueError(f"files must be one of {FILE_MODES}, got {files!r}")
    plan = Plan(recipe, settings=str(settings) if settings is not None else "")
    problems = Problems()
    problems.messages += range_problems(cfg, critic=uses_critic(cfg))
    plan.estimator = problems.run(check_estimator, cfg) or plan.estimator
    plan.reward = problems.run(check_reward, cfg) or plan.reward
    n = responses_per_prompt or number(cfg, "actor_rollout_ref.rollout.n", int) or 1
    if files == "full":
        hf_config = _check_files(cfg, plan, problems, reward_reads_data)
        if hf_config and get(cfg, "trainer.device") == "cpu":  # on CPU every part of the run is in host memory
            _note_memory(cfg, hf_config, plan)
        if uses_critic(cfg):
            problems.run(check_model, cfg, "critic.model.path")
    if not problems.messages:  # verl's validation assumes sane numbers (and builds the critic's model config)
        problems.run(check_verl_batches, cfg, n)
    if files != "full":
        plan.notes.append("data and model files not checked here (files='config')")
    if problems.messages:
        raise ConfigError(f"{recipe}: the run cannot start:\n- " + "\n- ".join(problems.messages))
    plan.batch = batch_arithmetic(cfg, n)
    plan.steps = steps_plan(cfg, plan.data, prompts_per_step)
    return plan


def _note_memory(cfg: DictConfig, hf_config: dict, plan: Plan) -> None:
    """The run's estimated peak host memory into the plan, and a warning note when it would not fit now. A model
    whose config.json lacks a size the estimate reads is not estimated: the run is not refused for it."""
    try:
        shape = run_shape(cfg, hf_config)
    except KeyError as e:
        plan.memory = f"not estimated: the model's config.json has no {e}"
        return
    plan.memory, warning = memory_lines(estimate(shape), shape, *meminfo_gib())
    if warning:
        plan.notes.append(warning)


def _check_files(cfg: DictConfig, plan: Plan, problems: Problems, reward_reads_data: bool) -> dict | None:
    """The model directory and the data files, into `plan` (model, data rows, first prompt's tokens); the model's
    config.json when it was read."""
    model = problems.run(check_model, cfg)
    tokenizer_dir, hf_config = None, None
    if model:
        plan.model, hf_config, tokenizer_dir = model
        if hf_config:
            problems.run(check_context_length, cfg, hf_config)
    dataset_cls = problems.run(custom_dataset_class, cfg)
    first_train = None
    extras = problems.run(read_trainer_extras, get(cfg, "trainer"))  # the project's trainer.* keys
    heldout = extras.heldout if extras else None
    for key in (
        "data.train_files",
        "data.val_files",
        *(["trainer.heldout.files"] if heldout and heldout.enabled else []),
    ):
        first = _check_data(cfg, key, dataset_cls, plan, problems, reward_reads_data)
        first_train = first if key == "data.train_files" else first_train
    if first_train is not None and tokenizer_dir:
        _note_first_prompt(cfg, plan, problems, tokenizer_dir, first_train)
    return hf_config


def _check_data(cfg, key: str, dataset_cls, plan: Plan, problems: Problems, reward_reads_data: bool) -> list | None:
    """One data key's files into `plan.data` (their rows checked against the batch sizes), their columns checked
    when verl's dataset class reads them; for the train files, each file's first prompt checked and the first one's
    chat messages returned."""
    from verl.utils.dataset.rl_dataset import RLHFDataset

    verl_format = dataset_cls is not None and isinstance(dataset_cls, type) and issubclass(dataset_cls, RLHFDataset)
    allow_string = dataset_cls is not None and accepts_string_prompts(dataset_cls)
    prompt_key = str(get(cfg, "data.prompt_key", "prompt"))
    paths = problems.run(data_files, cfg, key) or []
    rows, first_messages = 0, None
    for path in paths:
        read = problems.run(read_data_file, key, path)
        if read is None:
            rows = None
            continue
        data, first, schema = read
        plan.data.append(data)
        rows = None if rows is None or data.rows is None else rows + data.rows
        if data.rows is None or not verl_format:  # a custom dataset class reads its own format
            continue
        problems.run(check_columns, key, data, first, schema, prompt_key, reward_reads_data)
        if first is not None and prompt_key in first and key == "data.train_files":
            messages = problems.run(chat_messages, key, first[prompt_key], allow_string)
            first_messages = first_messages if first_messages is not None else messages
    if rows is not None and paths:
        problems.run(enough_rows, cfg, key, rows)
    return first_messages


def _note_first_prompt(cfg, plan: Plan, problems: Problems, tokenizer_dir, messages: list) -> None:
    """The first train prompt's length in tokens into the plan, and a note if verl would truncate it."""
    tokens = problems.run(
        prompt_tokens, tokenizer_dir, messages, get(cfg, "actor_rollout_ref.model.custom_chat_template")
    )
    if tokens is None:
        return
    limit = get(cfg, "data.max_prompt_length")
    plan.first_prompt = f"{tokens} tokens (data.max_prompt_length {limit})"
    if isinstance(limit, int) and tokens > limit:
        plan.notes.append(
            f"the first train prompt has {tokens} tokens > data.max_prompt_length={limit}: verl left-"
            "truncates such prompts (or drops them with data.filter_overlong_prompts=true)"
        )
