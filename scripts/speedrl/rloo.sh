#!/usr/bin/env bash
# SPEED-RL arm "rloo": plain RLOO, 24 responses per prompt (the baseline).
#   bash scripts/speedrl/rloo.sh [1p5b|7b] [hydra overrides...]     (default model: 1p5b)
set -euo pipefail
MODEL=${1:-1p5b}
shift $(($# > 0 ? 1 : 0))
exec bash "$(dirname "$0")/run.sh" rloo "$MODEL" "$@"
