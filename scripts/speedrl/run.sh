#!/usr/bin/env bash
# One SPEED-RL arm on a GPU node (the paper's setting: recipe/fast_dapo/config/preset/speedrl_base.yaml):
#   bash scripts/speedrl/run.sh ARM MODEL [hydra overrides...]
#   ARM: fast (SPEED on RLOO) | rloo (plain RLOO) | dapo (DAPO dynamic sampling); MODEL: 1p5b | 7b
# The arm scripts beside this one (fast.sh, rloo.sh, dapo.sh) call it. Before anything starts it checks that the
# data files exist (scripts/speedrl/prepare_data.sh writes them) and that the install check passes with the GPU
# backend (python -m verl_ext.doctor). SPEEDRL_DRY_RUN=1 prints the command instead of running it.
# Multi-node: start Ray on every node first (README "On a GPU cluster") and add trainer.nnodes=N.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-python}
ARM=${1:?usage: run.sh ARM(fast|rloo|dapo) MODEL(1p5b|7b) [overrides...]}
MODEL=${2:?usage: run.sh ARM(fast|rloo|dapo) MODEL(1p5b|7b) [overrides...]}
shift 2
case "$ARM" in fast|rloo|dapo) ;; *) echo "run.sh: unknown arm '$ARM' (fast, rloo or dapo)" >&2; exit 2;; esac
case "$MODEL" in 1p5b|7b) ;; *) echo "run.sh: unknown model '$MODEL' (1p5b or 7b)" >&2; exit 2;; esac

DATA=${VERL_EXT_DATA_DIR:-$HOME/data/speedrl}
missing=0
for f in dapo17k_train dapo17k_test math500 amc2023 aime2024 aime2025; do
  if [ ! -s "$DATA/$f.parquet" ]; then
    echo "run.sh: missing $DATA/$f.parquet (write it with: bash scripts/speedrl/prepare_data.sh)" >&2
    missing=1
  fi
done
[ "$missing" = 0 ] || exit 1

CMD=("$PY" -m recipe.fast_dapo.main "+preset=speedrl_qwen_math_$MODEL" "+arm=$ARM"
     "trainer.experiment_name=qwen2.5-math-$MODEL-$ARM" "$@")
if [ "${SPEEDRL_DRY_RUN:-0}" = 1 ]; then
  printf '%s\n' "${CMD[@]}"
  exit 0
fi
"$PY" -m verl_ext.doctor --require-backend gpu
export VERL_EXT_DATA_DIR=$DATA
exec "${CMD[@]}"
