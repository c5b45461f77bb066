#!/usr/bin/env bash
# The main job on its embedded default: fast DAPO on the tiny local model and the toy task, on CPU (the tiny assets
# are built on first use). Extra arguments are Hydra overrides, e.g. `make demo ARGS="trainer.total_training_steps=10"`.
# PRESET=real_cpu (`make demo-real`): the same job on SmolLM2-135M-Instruct and the generated math task.
set -euo pipefail
cd "$(dirname "$0")/.."
exec .venv/bin/python -m recipe.fast_dapo.main +preset="${PRESET:-cpu_demo}" "$@"
