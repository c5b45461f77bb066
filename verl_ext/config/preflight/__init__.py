"""Pre-flight: resolve what a run will need and check it in the driver, before `ray.init`.

Every driver (the recipes' `main` modules, `verl_ext.trainer.agent_main`) runs its own settings check and then
`preflight(cfg, recipe, ...)`, so that a typo fails in seconds with a `ConfigError` naming the key and its value
instead of minutes later inside a Ray worker, after the model was loaded onto every GPU. The cluster job path
(`verl_ext/launch/job.py`) and a campaign run the same driver check before submitting (`check_composed`, with the
driver's check handed in), and `+check_only=true` (or `--check`) prints the plan and exits.

What is checked (cheap only: parquet metadata and one row, module imports, small JSON files; never model weights):

* ranges: lengths, learning rates, batch sizes, epochs, step counts (`total_training_steps=0` trains nothing: an
  error unless `trainer.val_only=true`), sampling settings, fp32 on the CPU backend (`config_checks.py`);
* `algorithm.adv_estimator` is in verl's estimator registry once the project's plugin has registered its own;
* the reward function (`reward.custom_reward_function.path` / `.name`) imports with verl's own loader and accepts the
  keyword arguments verl's reward manager passes (`data_source, solution_str, ground_truth, extra_info` and
  `reward_kwargs`);
* `actor_rollout_ref.model.path` is a local directory with a `config.json`, a tokenizer and weights, or has the form
  of a Hugging Face hub id (a missing local path is named as such, not sent to the hub), and prompt + response fit
  its positions;
* `data.train_files` / `data.val_files` exist, are parquet (or JSON lines, what verl's RLHFDataset reads) with the
  columns verl's dataset and reward read (`data.prompt_key`, `data_source`, `reward_model.ground_truth`), the first
  row is a chat prompt the model's chat template renders, and the train set fills at least one batch (verl drops the
  last partial batch: fewer rows than a batch is "Train dataloader is empty!" inside Ray) (`file_checks.py`);
* verl's own batch-size validation (`verl.utils.config.validate_config`), with the responses per prompt the recipe
  really trains on (the caller's `responses_per_prompt`).

The pre-flight knows no recipe: what differs between drivers is handed in by the caller (`preflight`'s arguments,
the driver's `check` to `gate` / `check_composed`) or declared by the class concerned (a dataset class's
`accepts_string_prompts`; an estimator counts as the project's when the project registered it).

All problems are collected and reported together. The returned `Plan` (`plan.py`) says what the run will do (model,
data rows, steps, batch arithmetic, estimator, reward). Modules: `run.py` (`preflight` itself), `config_checks.py`,
`file_checks.py`, `plan.py`, `gate.py` (the drivers' plumbing around it), `common.py` (reading numbers, collecting
problems). What every recipe's own settings check runs on its config (verl's legacy trainer, the plot settings, the
fidelity table, the agent block) is the trainer base's: `verl_ext/trainer/recipe_checks.py`, above what it checks.
"""

from verl_ext.config.preflight.config_checks import check_verl_batches
from verl_ext.config.preflight.gate import (
    check_composed,
    check_only_requested,
    failing_cleanly,
    gate,
    translate_check_flag,
)
from verl_ext.config.preflight.plan import DataFile, Plan
from verl_ext.config.preflight.run import preflight

__all__ = [
    "DataFile",
    "Plan",
    "check_composed",
    "check_only_requested",
    "check_verl_batches",
    "failing_cleanly",
    "gate",
    "preflight",
    "translate_check_flag",
]
