#!/usr/bin/env bash
# Every data set of the SPEED-RL presets, written into one directory (default ~/data/speedrl; the presets read
# $VERL_EXT_DATA_DIR, or that default):
#   training   dapo17k_train.parquet  DAPO-Math-17k deduplicated (16,398 problems; data_preprocess/dapo17k.py)
#   validation dapo17k_test.parquet   DAPO-1k: 1,000 held-out DAPO-17k problems (seed 42)
#              math500.parquet amc2023.parquet aime2024.parquet aime2025.parquet (data_preprocess/math_sets.py)
# Reads the sets from the Hugging Face hub (or pass local copies: see each module's --input). Needs network access.
#   bash scripts/speedrl/prepare_data.sh [OUT_DIR]
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-python}
OUT=${1:-${VERL_EXT_DATA_DIR:-$HOME/data/speedrl}}
mkdir -p "$OUT"
"$PY" -m data_preprocess.dapo17k --input BytedTsinghua-SIA/DAPO-Math-17k --out-dir "$OUT" \
    --test-size 1000 --seed 42 --use-chat-template on
for set in math500 amc2023 aime2024 aime2025; do
  "$PY" -m data_preprocess.math_sets --set "$set" --out-dir "$OUT" --use-chat-template on
done
echo "SPEED-RL data in $OUT; runs read it with VERL_EXT_DATA_DIR=$OUT"
